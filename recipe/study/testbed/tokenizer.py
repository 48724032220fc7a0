"""The testbed's tokenizer: byte-level Qwen2 BPE with a ChatML template, built offline.

verl needs a chat template, a newline that encodes to exactly one token
(verl/utils/tokenizer/continuous_token.py) and, for a ``qwen2`` model, a tokenizer that
transformers 5 can rebuild as ``Qwen2Tokenizer``. A byte-level vocabulary (256 byte symbols + 3
specials, ``recipe/models/chatml.py``) satisfies all three and needs no download.

A byte per token would make the project's fixed instruction (``data_prep.schema.BOXED_INSTRUCTION``,
70 characters) most of every sequence, so merges are learned from the task's own text with the
``tokenizers`` BPE trainer: each word of the prompt template becomes one token and a prompt is about
35 tokens instead of 110. Qwen2's pre-tokenizer splits every digit into its own piece, so numbers
stay one token per digit whatever the merges.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from recipe.models.chatml import SPECIAL_TOKENS, bytes_to_unicode, qwen2_chatml_tokenizer

# Room for every word of a small template; the trainer stops earlier when nothing is left to merge.
MAX_VOCAB = 1024


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
    tokenizer = qwen2_chatml_tokenizer(vocab, [])
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
    return qwen2_chatml_tokenizer(dict(model["vocab"]), merges)
