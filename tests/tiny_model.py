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
import os
import shutil
import tempfile
from pathlib import Path

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)

# Qwen2's ChatML template, reduced to what verl's agent loop uses (no tools, no system default).
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_MARKER = "tiny_model.json"


def _bytes_to_unicode() -> dict[int, str]:
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


def _byte_level_vocab() -> dict[str, int]:
    """GPT-2 byte-to-unicode symbols as ids 0..255, then the specials (ids 256, 257, 258)."""
    symbols = _bytes_to_unicode()  # {byte: printable unicode char}
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

    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tokenizer = build_tiny_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    # Seed a private generator state so building the model does not disturb the caller's RNG.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the final folder should not be
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / _MARKER).write_text(json.dumps(spec))
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out
