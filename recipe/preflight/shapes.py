"""Model shapes the preflight builds random weights of: the paper's Qwen2.5-Instruct models.

Written from the models' published ``config.json`` files, so no hub access is needed. A local
model folder (``actor_rollout_ref.model.path`` or ``MODEL_PATH`` pointing at one) gives its own
``config.json`` instead; ``tiny`` keeps a shape's vocabulary (the LM head and the log-prob work
per token) with two narrow layers, for CPU.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# Shared by every Qwen2.5 model (Qwen2 architecture, q/k/v biases, RoPE base 1e6).
_QWEN2 = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_act": "silu",
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "use_sliding_window": False,
    "attention_dropout": 0.0,
    "initializer_range": 0.02,
}

KNOWN: dict[str, dict[str, Any]] = {
    "Qwen/Qwen2.5-0.5B-Instruct": {
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
    },
    "Qwen/Qwen2.5-1.5B-Instruct": {
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
    },
    "Qwen/Qwen2.5-3B-Instruct": {
        "hidden_size": 2048,
        "intermediate_size": 11008,
        "num_hidden_layers": 36,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
    },
    "Qwen/Qwen2.5-7B-Instruct": {
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "tie_word_embeddings": False,
    },
}

# Two narrow layers (4 query heads, 2 KV heads, as recipe/models/tiny.py) under the named vocabulary.
TINY = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}


def model_shape(name: str, tiny: bool = False) -> dict[str, Any]:
    """The HF ``config.json`` fields of ``name`` (a known hub id or a local folder's config).

    Raises ValueError for an unknown hub id, listing the known ones.
    """
    local = Path(name) / "config.json"
    if local.is_file():
        shape = json.loads(local.read_text())
    elif name in KNOWN:
        shape = {**_QWEN2, **KNOWN[name]}
    else:
        raise ValueError(
            f"no shape known for model {name!r}: use one of {sorted(KNOWN)} or a local folder with a "
            "config.json (actor_rollout_ref.model.path=... or MODEL_PATH=...)"
        )
    if tiny:
        shape = {**shape, **TINY}
        shape.pop("head_dim", None)
    return shape
