"""The testbed's policy architecture: a small Qwen2 causal LM (random init) for the task tokenizer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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
