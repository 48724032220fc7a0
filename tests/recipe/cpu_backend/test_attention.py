"""``sdpa_gqa`` against transformers' own ``sdpa`` and ``eager`` attention on a GQA model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from recipe.cpu_backend.attention import ATTN_IMPLEMENTATION, register
from tests.tiny_model import build_tiny_qwen2


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_qwen2(tmp_path_factory.mktemp("tiny") / "model")  # 4 query heads, 2 KV heads


def _load(path: Path, attn: str) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    register()
    return AutoModelForCausalLM.from_pretrained(path, attn_implementation=attn)


def _padded_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Three rows, the first two left-padded (the rollout's layout), the third right-padded (the actor's)."""
    ids = torch.randint(0, 250, (3, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[0, :5] = 0
    mask[1, :2] = 0
    mask[2, 9:] = 0
    return ids, mask


def test_registered_name_loads_and_is_what_the_model_uses(tiny: Path) -> None:
    model = _load(tiny, ATTN_IMPLEMENTATION)
    assert model.config._attn_implementation == ATTN_IMPLEMENTATION
    assert model.config.num_key_value_heads < model.config.num_attention_heads  # the case it speeds up


@pytest.mark.parametrize("reference", ["sdpa", "eager"])
def test_logits_and_gradients_match_transformers_attention(tiny: Path, reference: str) -> None:
    """Same weights, a padded batch: logits and every parameter's gradient agree on real tokens."""
    ids, mask = _padded_batch()
    ours, theirs = _load(tiny, ATTN_IMPLEMENTATION), _load(tiny, reference)
    grads, logits_real = [], []
    for model in (ours, theirs):
        logits = model(input_ids=ids, attention_mask=mask).logits
        real = logits[mask.bool()]
        (real.float().logsumexp(-1).sum()).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        model.zero_grad()
        logits_real.append(real.detach())
    torch.testing.assert_close(logits_real[0], logits_real[1], atol=1e-5, rtol=1e-5)
    assert grads[0].keys() == grads[1].keys() and grads[0]
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], atol=1e-5, rtol=1e-4, msg=name)


def test_cached_decode_matches_sdpa(tiny: Path) -> None:
    """Prefill a left-padded batch, then decode with the cache: each step's logits as with ``sdpa``."""
    ids, mask = _padded_batch()
    ids, mask = ids[:2], mask[:2]
    steps = []
    for attn in (ATTN_IMPLEMENTATION, "sdpa"):
        model = _load(tiny, attn).eval()
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=mask, use_cache=True)
            logits, past, m = [out.logits[:, -1]], out.past_key_values, mask
            for token in (7, 42, 99):
                m = torch.cat([m, torch.ones(2, 1, dtype=m.dtype)], dim=1)
                out = model(
                    input_ids=torch.full((2, 1), token),
                    attention_mask=m,
                    past_key_values=past,
                    use_cache=True,
                )
                logits.append(out.logits[:, -1])
                past = out.past_key_values
        steps.append(torch.stack(logits))
    torch.testing.assert_close(steps[0], steps[1], atol=1e-5, rtol=1e-5)


def test_hf_rollout_loads_the_actors_attention() -> None:
    """The rollout server takes ``model.override_config.attn_implementation`` (sdpa_gqa if unset)."""
    from types import SimpleNamespace

    from recipe.cpu_backend.hf_server import HFRolloutServer

    server = HFRolloutServer.__new__(HFRolloutServer)  # no model load: only the choice is under test
    server.model_config = SimpleNamespace(override_config={"attn_implementation": "eager"})
    assert server.attn_implementation() == "eager"
    server.model_config = SimpleNamespace(override_config={})
    assert server.attn_implementation() == ATTN_IMPLEMENTATION
