"""A tiny random Qwen2 causal LM with a byte-level tokenizer, built offline for tests.

verl needs a chat template, a newline that encodes to exactly one token
(verl/utils/tokenizer/continuous_token.py) and a tokenizer that transformers 5 can rebuild
as ``Qwen2Tokenizer`` for a ``qwen2`` model. A byte-level BPE vocabulary with no merges
(256 byte symbols + 3 specials) satisfies all three and needs no download: every string
round-trips through ``encode``/``decode``.

Usage::

    from tests.tiny_model import build_tiny_qwen2
    path = build_tiny_qwen2(tmp_path / "tiny")      # HF folder, loadable offline
"""

from __future__ import annotations

import json
from pathlib import Path

from recipe.files import atomic_dir

# One ChatML template and one byte alphabet for every tokenizer the project builds.
from recipe.study.testbed.model import ModelShape, build_model
from recipe.study.testbed.tokenizer import (
    CHATML_TEMPLATE,
    ENDOFTEXT,
    IM_END,
    IM_START,
    SPECIAL_TOKENS,
    bytes_to_unicode,
)

_MARKER = "tiny_model.json"


def _byte_level_vocab() -> dict[str, int]:
    """GPT-2 byte-to-unicode symbols as ids 0..255, then the specials (ids 256, 257, 258)."""
    symbols = bytes_to_unicode()  # {byte: printable unicode char}
    vocab = {symbols[b]: b for b in range(256)}
    for offset, token in enumerate(SPECIAL_TOKENS):
        vocab[token] = 256 + offset
    return vocab


def build_tiny_tokenizer():
    """Byte-level ``Qwen2Tokenizer`` (259 tokens), eos ``<|im_end|>``, pad ``<|endoftext|>``."""
    from transformers.models.qwen2.tokenization_qwen2 import Qwen2Tokenizer

    tokenizer = Qwen2Tokenizer(
        vocab=_byte_level_vocab(),
        merges=[],
        unk_token=ENDOFTEXT,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        additional_special_tokens=[IM_START],
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer


def _spec(seed: int, num_layers: int, hidden_size: int) -> dict[str, int | str]:
    return {"format": 1, "seed": seed, "num_layers": num_layers, "hidden_size": hidden_size}


def build_tiny_qwen2(
    out_dir: str | Path, *, seed: int = 0, num_layers: int = 2, hidden_size: int = 64
) -> Path:
    """Save a tiny random ``Qwen2ForCausalLM`` and its byte-level tokenizer to ``out_dir``.

    Idempotent: a folder already built with the same arguments is reused as is. The folder is
    written to a temporary sibling and renamed into place, so a crash never leaves half a model.

    Args:
        out_dir: target folder (created; parents too).
        seed: torch seed of the random weights (same seed, same weights).
        num_layers: decoder layers.
        hidden_size: model width; must be a multiple of 16 (4 heads of width >= 4, 2 KV heads).

    Returns:
        ``out_dir`` as a ``Path``.
    """
    if hidden_size % 16 != 0 or hidden_size <= 0:
        raise ValueError(f"hidden_size must be a positive multiple of 16, got {hidden_size}")
    if num_layers < 1:
        raise ValueError(f"num_layers must be >= 1, got {num_layers}")
    out = Path(out_dir)
    spec = _spec(seed, num_layers, hidden_size)
    marker = out / _MARKER
    if marker.is_file() and json.loads(marker.read_text()) == spec:
        return out

    tokenizer = build_tiny_tokenizer()
    shape = ModelShape(
        hidden_size=hidden_size,
        num_layers=num_layers,
        num_heads=4,
        num_kv_heads=2,
        intermediate_size=2 * hidden_size,
        max_positions=4096,
    )
    model = build_model(tokenizer, shape, seed)  # the caller's RNG state is left alone

    with atomic_dir(out) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / _MARKER).write_text(json.dumps(spec))
    return out
