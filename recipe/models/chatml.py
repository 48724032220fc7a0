"""The one ChatML tokenizer recipe of the project: byte-level Qwen2 BPE, built offline.

verl needs a chat template, a newline that encodes to exactly one token
(verl/utils/tokenizer/continuous_token.py) and, for a ``qwen2`` model, a tokenizer that
transformers 5 can rebuild as ``Qwen2Tokenizer``. A byte-level vocabulary (256 byte symbols + 3
specials) satisfies all three and needs no download: every string round-trips through
``encode``/``decode``.

Every tokenizer the project builds (the tiny test model's, the preflight's padded one, the
testbed's with learned merges) is ``qwen2_chatml_tokenizer`` over its own vocabulary and merges.
"""

from __future__ import annotations

from typing import Any

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)

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


def qwen2_chatml_tokenizer(vocab: dict[str, int], merges: list[tuple[str, str]] | None = None) -> Any:
    """A ``Qwen2Tokenizer`` over ``vocab``/``merges`` with the ChatML template; eos ``<|im_end|>``,
    pad and unk ``<|endoftext|>``, ``<|im_start|>`` an additional special token."""
    from transformers.models.qwen2.tokenization_qwen2 import Qwen2Tokenizer

    tokenizer = Qwen2Tokenizer(
        vocab=vocab,
        merges=list(merges or []),
        unk_token=ENDOFTEXT,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        additional_special_tokens=[IM_START],
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer
