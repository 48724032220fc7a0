"""The tiny test model: offline loadable, byte-level round trip, one-token newline, ChatML."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from recipe.models.tiny import build_tiny_qwen2


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_qwen2(tmp_path_factory.mktemp("tiny") / "model")


def test_tokenizer_is_byte_level_qwen2(tiny_path: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_path)
    assert type(tok).__name__ == "Qwen2Tokenizer"
    assert len(tok) == 259
    assert (tok.eos_token, tok.pad_token) == ("<|im_end|>", "<|endoftext|>")
    assert tok.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>") == 258
    assert tok.pad_token_id == 256
    # verl (utils/tokenizer/continuous_token.py) needs newline to be exactly one token
    assert tok.encode("\n", add_special_tokens=False) == [10]
    text = "Ünïcode 12+30=42\n\tdone 世界"
    ids = tok.encode(text, add_special_tokens=False)
    assert ids == list(text.encode("utf-8"))  # no merges: one token per byte, id == byte value
    assert tok.decode(ids) == text


def test_chat_template_is_chatml(tiny_path: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_path)
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "1+1?"}], add_generation_prompt=True, tokenize=False
    )
    assert prompt == "<|im_start|>user\n1+1?<|im_end|>\n<|im_start|>assistant\n"
    ids = tok.encode(prompt, add_special_tokens=False)
    assert ids[0] == 257 and ids.count(258) == 1  # specials stay single tokens


def test_model_loads_and_is_deterministic(tiny_path: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_path)
    assert model.config.model_type == "qwen2"
    assert model.config.num_hidden_layers == 2 and model.config.hidden_size == 64
    assert model.config.eos_token_id == 258
    out = model(torch.tensor([[257, 49, 43, 49, 10]])).logits
    assert out.shape == (1, 5, 259) and torch.isfinite(out).all()

    again = AutoModelForCausalLM.from_pretrained(build_tiny_qwen2(tmp_path / "same_seed"))
    other = AutoModelForCausalLM.from_pretrained(build_tiny_qwen2(tmp_path / "seed1", seed=1))
    w = model.model.embed_tokens.weight
    assert torch.equal(w, again.model.embed_tokens.weight)
    assert not torch.equal(w, other.model.embed_tokens.weight)


def test_build_is_idempotent(tiny_path: Path) -> None:
    weights = tiny_path / "model.safetensors"
    before = weights.stat().st_mtime_ns
    assert build_tiny_qwen2(tiny_path) == tiny_path
    assert weights.stat().st_mtime_ns == before  # reused, not rewritten
    assert not list(tiny_path.parent.glob(".model.tmp-*"))  # no leftover temporary folder
