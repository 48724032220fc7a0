"""``sdpa_gqa`` against transformers' own ``sdpa`` and ``eager`` attention on a GQA model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from recipe.cpu_backend.attention import ATTN_IMPLEMENTATION, register
from recipe.models.tiny import build_tiny_qwen2


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
    """The rollout server takes ``model.override_config.attn_implementation`` (sdpa_gqa if unset, on CPU)."""
    from types import SimpleNamespace

    from recipe.cpu_backend.hf_server import HFRolloutServer

    server = HFRolloutServer.__new__(HFRolloutServer)  # no model load: only the choice is under test
    server.device = "cpu"
    server.model_config = SimpleNamespace(override_config={"attn_implementation": "eager"})
    assert server.attn_implementation() == "eager"
    server.model_config = SimpleNamespace(override_config={})
    assert server.attn_implementation() == ATTN_IMPLEMENTATION


def _packed_row(lengths: list[int]) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """Sequences of ``lengths`` and the one row verl's remove-padding path packs them into."""
    gen = torch.Generator().manual_seed(1)
    seqs = [torch.randint(0, 250, (n,), generator=gen) for n in lengths]
    positions = torch.cat([torch.arange(n) for n in lengths])[None]
    return seqs, torch.cat(seqs)[None], positions


def test_packed_row_matches_each_sequence_alone(tiny: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A packed row (positions restart at 0, no mask: verl's use_remove_padding input) gives every
    token the logits and every weight the gradient it gets with each sequence run on its own, and
    its attention runs sequence by sequence."""
    from recipe.cpu_backend import attention

    calls = []
    packed_attention = attention._packed_attention
    monkeypatch.setattr(
        attention, "_packed_attention", lambda *a, **k: calls.append(a[4]) or packed_attention(*a, **k)
    )
    seqs, packed, positions = _packed_row([5, 9, 1, 3, 7])
    model = _load(tiny, ATTN_IMPLEMENTATION)
    alone = torch.cat([model(input_ids=s[None], use_cache=False).logits[0] for s in seqs])
    alone.logsumexp(-1).sum().backward()
    want = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    together = model(input_ids=packed, position_ids=positions, use_cache=False).logits[0]
    together.logsumexp(-1).sum().backward()
    assert calls == [[0, 5, 14, 15, 18, 25]] * model.config.num_hidden_layers
    torch.testing.assert_close(together, alone, atol=1e-5, rtol=1e-5)
    for name, grad in want.items():
        torch.testing.assert_close(model.get_parameter(name).grad, grad, atol=1e-5, rtol=1e-4, msg=name)
    # transformers' own sdpa over the whole row under its block-diagonal mask agrees too
    theirs = _load(tiny, "sdpa")(input_ids=packed, position_ids=positions, use_cache=False).logits[0]
    torch.testing.assert_close(together.detach(), theirs.detach(), atol=1e-5, rtol=1e-5)


def test_packed_bounds_only_where_the_mask_is_block_diagonal() -> None:
    from recipe.cpu_backend.attention import packed_bounds

    positions = torch.tensor([[0, 1, 2, 0, 1, 0, 1, 2, 3]])
    seq = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2])
    block = (seq[:, None] == seq[None, :]) & torch.ones(9, 9, dtype=torch.bool).tril()
    assert packed_bounds(positions, block[None, None]) == [0, 3, 5, 9]
    leaky = block.clone()
    leaky[4, 1] = True  # a token of the second sequence sees the first one: not separable
    assert packed_bounds(positions, leaky[None, None]) is None
    assert packed_bounds(positions, None) is None  # no mask: transformers found no packing
    assert packed_bounds(torch.arange(9)[None], block[None, None]) is None  # one sequence
    assert packed_bounds(positions.expand(2, -1), block[None, None].expand(2, -1, -1, -1)) is None
