"""A random-weight model folder of a given shape, with a tokenizer that decodes every token id.

The tokenizer is byte-level Qwen2 BPE with a ChatML template (recipe/models/chatml.py's
alphabet and specials): prompts encode to one token per byte. Its vocabulary is padded with
filler tokens (strings of two or three byte symbols, never produced by encoding) up to the
model's ``vocab_size``, so that whatever a random model samples decodes, as the rollout and the
reward need.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path
from typing import Any

from recipe.files import atomic_dir
from recipe.models.chatml import ENDOFTEXT, IM_END, SPECIAL_TOKENS, bytes_to_unicode, qwen2_chatml_tokenizer

_MARKER = "preflight_model.json"


def padded_vocab(size: int) -> dict[str, int]:
    """256 byte symbols (ids 0-255), the 3 specials (256-258), then fillers up to ``size`` ids."""
    symbols = [bytes_to_unicode()[b] for b in range(256)]
    if size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(
            f"vocab_size {size} is below the {256 + len(SPECIAL_TOKENS)} byte and special tokens"
        )
    vocab = {s: i for i, s in enumerate(symbols)}
    for token in SPECIAL_TOKENS:
        vocab[token] = len(vocab)
    fillers = itertools.chain(
        ("".join(p) for p in itertools.product(symbols, repeat=2)),
        ("".join(p) for p in itertools.product(symbols, repeat=3)),
    )
    for token in itertools.islice(fillers, size - len(vocab)):
        vocab[token] = len(vocab)
    return vocab


def build_tokenizer(vocab_size: int) -> Any:
    """Byte-level ``Qwen2Tokenizer`` of exactly ``vocab_size`` ids; eos ``<|im_end|>``, pad ``<|endoftext|>``."""
    return qwen2_chatml_tokenizer(padded_vocab(vocab_size))


def shape_key(shape: dict[str, Any], dtype: str, seed: int) -> str:
    """A short name for a (shape, dtype, seed): the folder a model is cached in."""
    text = json.dumps({"shape": shape, "dtype": dtype, "seed": seed}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def build_random_model(
    shape: dict[str, Any], root: str | Path, *, dtype: str = "bfloat16", device: str = "cpu", seed: int = 0
) -> Path:
    """Save a random causal LM of ``shape`` (HF ``config.json`` fields) and its tokenizer under ``root``.

    Reused when already built with the same arguments; written to a temporary sibling and renamed
    into place, so a crash never leaves half a model.

    Args:
        shape: config fields (``model_type`` picks the architecture).
        root: parent folder; the model goes to ``root/<shape_key>``.
        dtype: weights' dtype on disk (the engine casts to its own).
        device: where to initialise the weights (``cuda`` is much faster for billions of them).
        seed: torch seed of the weights.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    out = Path(root) / shape_key(shape, dtype, seed)
    marker = out / _MARKER
    if marker.is_file():
        return out
    config = AutoConfig.for_model(**{k: v for k, v in shape.items() if k != "architectures"})
    config.architectures = shape.get("architectures")
    tokenizer = build_tokenizer(int(shape["vocab_size"]))
    config.bos_token_id = None
    config.eos_token_id = tokenizer.convert_tokens_to_ids(IM_END)
    config.pad_token_id = tokenizer.convert_tokens_to_ids(ENDOFTEXT)
    with torch.random.fork_rng(devices=[]), torch.device(device):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    with atomic_dir(out) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / _MARKER).write_text(json.dumps({"shape": shape, "dtype": dtype, "seed": seed}, sort_keys=True))
    del model
    return out
