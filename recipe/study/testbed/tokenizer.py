"""The testbed's tokenizer: byte-level Qwen2 BPE with a ChatML template, built offline.

verl needs a chat template, a newline that encodes to exactly one token
(verl/utils/tokenizer/continuous_token.py) and, for a ``qwen2`` model, a tokenizer that
transformers 5 can rebuild as ``Qwen2Tokenizer``. A byte-level vocabulary (256 byte symbols + 3
specials, as in ``tests/tiny_model.py``) satisfies all three and needs no download.

A byte per token would make the project's fixed instruction (``data_prep.schema.BOXED_INSTRUCTION``,
70 characters) most of every sequence, so merges are learned from the task's own text with the
``tokenizers`` BPE trainer: each word of the prompt template becomes one token and a prompt is about
35 tokens instead of 110. Qwen2's pre-tokenizer splits every digit into its own piece, so numbers
stay one token per digit whatever the merges.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)
# Room for every word of a small template; the trainer stops earlier when nothing is left to merge.
MAX_VOCAB = 1024

# Qwen2's ChatML template, reduced to what verl's agent loop and the census use (no tools).
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable-character map, the alphabet of ``pre_tokenizers.ByteLevel``."""
    printable = list(range(ord("!"), ord("~") + 1))
    printable += list(range(ord("\u00a1"), ord("\u00ac") + 1)) + list(range(ord("\u00ae"), ord("\u00ff") + 1))
    mapping = {b: chr(b) for b in printable}
    shift = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + shift)
            shift += 1
    return mapping


def _qwen2_tokenizer(vocab: dict[str, int], merges: list[tuple[str, str]]) -> Any:
    from transformers.models.qwen2.tokenization_qwen2 import Qwen2Tokenizer

    tokenizer = Qwen2Tokenizer(
        vocab=vocab,
        merges=merges,
        unk_token=ENDOFTEXT,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        additional_special_tokens=[IM_START],
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer


def build_tokenizer(corpus: Sequence[str] = ()) -> Any:
    """A byte-level ``Qwen2Tokenizer`` (eos ``<|im_end|>``, pad ``<|endoftext|>``), with BPE merges
    learned from ``corpus`` (none when it is empty).

    Deterministic: the same corpus gives the same vocabulary and merges (the trainer breaks ties
    by the pair itself, not by hashing). Specials take ids 0-2, the 256 byte symbols the next ids.
    """
    import json

    from tokenizers import pre_tokenizers, trainers

    symbols = bytes_to_unicode()
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    vocab.update({symbols[b]: len(SPECIAL_TOKENS) + b for b in range(256)})
    tokenizer = _qwen2_tokenizer(vocab, [])
    if not corpus:
        return tokenizer
    backend = tokenizer._tokenizer  # the Rust tokenizer: same pre-tokenizer as the final one
    trainer = trainers.BpeTrainer(
        vocab_size=MAX_VOCAB,
        min_frequency=1,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(list(corpus), trainer)
    model = json.loads(backend.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return _qwen2_tokenizer(dict(model["vocab"]), merges)
