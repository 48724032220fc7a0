"""Small random Qwen2 causal LMs, built offline: ``build_model`` (any ``ModelShape``, for a given
tokenizer; the testbed's policy) and ``build_tiny_qwen2`` (a 2-layer model with the byte-level
ChatML tokenizer of ``recipe.models.chatml`` and no merges, for tests and benches).

Usage::

    from recipe.models.tiny import build_tiny_qwen2
    path = build_tiny_qwen2(tmp_path / "tiny")      # HF folder, loadable offline
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipe.files import atomic_dir
from recipe.models.chatml import SPECIAL_TOKENS, bytes_to_unicode, qwen2_chatml_tokenizer


@dataclass(frozen=True)
class ModelShape:
    """Qwen2 dimensions; part of the cache key. The defaults give about 1.0M parameters."""

    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 512
    max_positions: int = 256

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"ModelShape: hidden_size {self.hidden_size} must divide by num_heads {self.num_heads}, "
                f"and num_heads by num_kv_heads {self.num_kv_heads}"
            )


def build_model(tokenizer: Any, shape: ModelShape, seed: int) -> Any:
    """A randomly initialised ``Qwen2ForCausalLM`` (fp32, tied embeddings) sized for ``tokenizer``.

    The torch RNG is forked, so building does not disturb the caller's random state.
    """
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads,
        num_key_value_heads=shape.num_kv_heads,
        max_position_embeddings=shape.max_positions,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    return model


_MARKER = "tiny_model.json"


def _byte_level_vocab() -> dict[str, int]:
    """GPT-2 byte-to-unicode symbols as ids 0..255, then the specials (ids 256, 257, 258)."""
    symbols = bytes_to_unicode()  # {byte: printable unicode char}
    vocab = {symbols[b]: b for b in range(256)}
    for offset, token in enumerate(SPECIAL_TOKENS):
        vocab[token] = 256 + offset
    return vocab


def build_tiny_tokenizer() -> Any:
    """Byte-level ``Qwen2Tokenizer`` (259 tokens), eos ``<|im_end|>``, pad ``<|endoftext|>``."""
    return qwen2_chatml_tokenizer(_byte_level_vocab())


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
