"""GCPO's step on plain inputs (texts, scores, uids) with the hashing embedder, decoding with a
byte-level tokenizer, and inside the whole COPO/GCPO step."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

from copo_core import CopoConfig, GcpoConfig
from copo_core.gcpo import compute_gcpo_advantages
from recipe.copo.embedders import HashEmbedder
from recipe.copo.gcpo_step import decode_responses, embed_unique, gcpo_advantage, get_embedder
from recipe.copo.step import StepBatch, StepSettings, advantage_step
from recipe.models.tiny import build_tiny_tokenizer
from tests.copo_core.reference import ref_gcpo_coverage

RESP_LEN = 40

TEXTS = [
    "x = 3, so the answer is 3",
    "we get 3",
    "x = 3, so the answer is 3",
    "I think it is 5",
    "the answer is 7",
    "so 7",
    "maybe 8",
    "seven: 7",
    "alone 2",
]
SCORES = [1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0]
UIDS = ["a", "a", "a", "a", "b", "b", "b", "b", "c"]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tiny_tokenizer()


def gcpo(**keys) -> GcpoConfig:
    return GcpoConfig(**{"embedder": "hash", "embed_batch_size": 8, **keys})


def encode(tokenizer, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded (N, RESP_LEN) response ids ending in eos, and their mask, as verl stores them."""
    responses = torch.full((len(texts), RESP_LEN), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros(len(texts), RESP_LEN, dtype=torch.long)
    for i, text in enumerate(texts):
        ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
        assert len(ids) <= RESP_LEN, f"test text too long for RESP_LEN: {text!r}"
        responses[i, : len(ids)] = torch.tensor(ids)
        mask[i, : len(ids)] = 1
    return responses, mask


def test_decode_uses_only_response_tokens(tokenizer):
    responses, mask = encode(tokenizer, TEXTS)
    assert decode_responses(responses, mask, tokenizer) == TEXTS  # eos (special) and padding stripped
    mask[0, 5:] = 0  # a shorter mask cuts the text
    assert decode_responses(responses, mask, tokenizer)[0] == TEXTS[0][:5]


def test_gcpo_advantage_equals_core_on_independently_embedded_texts():
    adv, metrics = gcpo_advantage(TEXTS, torch.tensor(SCORES), UIDS, gcpo(alpha=0.7, beta=0.5), global_step=3)
    emb = HashEmbedder(256).embed(TEXTS)
    expected = compute_gcpo_advantages(emb, torch.tensor(SCORES), UIDS, alpha=0.7, beta=0.5, seed=3)
    assert adv.shape == (9,) and adv.dtype == torch.float32
    assert torch.allclose(adv, expected, atol=1e-6)
    coverage = ref_gcpo_coverage(emb, torch.tensor(SCORES), UIDS, alpha=0.7)
    assert metrics["coverage_mean"] == pytest.approx((coverage[0] + coverage[4] + coverage[8]) / 3, abs=1e-5)
    assert set(metrics) == {
        "coverage_mean",
        "uniqueness_mean",
        "frac_redundant_correct",
        "embed_time_s",
        "shapley_time_s",
    }
    assert metrics["embed_time_s"] >= 0 and metrics["shapley_time_s"] >= 0
    # The duplicated correct response of group a earns less than its unique correct teammate.
    assert adv[0] == pytest.approx(adv[2].item(), abs=1e-6)
    assert adv[0] < adv[1]


@pytest.mark.parametrize("norm", [True, False])
def test_beta_zero_is_verl_grpo(tokenizer, norm):
    responses, mask = encode(tokenizer, TEXTS)
    rewards = torch.zeros(len(TEXTS), RESP_LEN)
    rewards[torch.arange(len(TEXTS)), mask.sum(-1) - 1] = torch.tensor(SCORES)  # outcome on the last token
    adv, _ = gcpo_advantage(TEXTS, rewards.sum(-1), UIDS, gcpo(beta=0.0), norm_adv_by_std=norm)
    verl_adv, _ = compute_grpo_outcome_advantage(
        rewards, mask, np.array(UIDS, dtype=object), norm_adv_by_std_in_grpo=norm
    )
    expected = verl_adv[:, 0]
    assert torch.allclose(verl_adv[mask.bool()], expected[:, None].expand_as(verl_adv)[mask.bool()])
    assert torch.allclose(adv, expected, atol=1e-6)


def test_monte_carlo_seed_follows_the_global_step():
    texts = [f"answer {i % 5} because {i}" for i in range(12)]
    scores = torch.ones(12)
    uids = ["g"] * 12
    config = gcpo(exact_max_g=4, num_permutations=4, seed=10)
    emb = HashEmbedder(256).embed(texts)
    results = []
    for step in (1, 2):
        adv, _ = gcpo_advantage(texts, scores, uids, config, global_step=step)
        expected = compute_gcpo_advantages(
            emb, scores, uids, exact_max_g=4, num_permutations=4, seed=10 + step
        )
        assert torch.allclose(adv, expected, atol=1e-6)
        results.append(adv)
    assert not torch.equal(results[0], results[1])


def test_all_wrong_group_and_metrics_on_a_batch():
    scores = torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0])
    adv, metrics = gcpo_advantage(TEXTS, scores, UIDS, gcpo())
    assert (adv[:4] == 0).all()
    assert 0.0 <= metrics["frac_redundant_correct"] <= 1.0
    assert 0.0 < metrics["uniqueness_mean"] <= 1.0 + 1e-6


def test_embedder_is_cached_across_steps():
    assert get_embedder("hash", 8) is get_embedder("hash", 8)
    assert get_embedder("hash", 8) is not get_embedder("hash", 16)


def test_mismatched_inputs_raise():
    with pytest.raises(ValueError, match="length mismatch"):
        gcpo_advantage(TEXTS[:-1], torch.tensor(SCORES), UIDS, gcpo())


class CountingEmbedder(HashEmbedder):
    def __init__(self) -> None:
        super().__init__(64)
        self.seen: list[str] = []

    def embed(self, texts: list[str]) -> torch.Tensor:
        self.seen.extend(texts)
        return super().embed(texts)


def test_embed_unique_embeds_each_distinct_text_once():
    embedder = CountingEmbedder()
    texts = ["a b", "c", "a b", "", "c", "a b"]
    out = embed_unique(embedder, texts)
    assert embedder.seen == ["a b", "c", ""]
    assert torch.equal(out, HashEmbedder(64).embed(texts))


@pytest.mark.parametrize("estimator", ["gcpo", "copo"])
def test_real_gcpo_advantage_inside_the_step(tokenizer, estimator):
    """recipe.copo.step.advantage_step with the real GCPO advantage (not a stub), texts decoded from ids."""
    responses, mask = encode(tokenizer, TEXTS)
    step_batch = StepBatch(
        scores=torch.tensor(SCORES),
        uids=UIDS,
        keys=[f"{uid}_{row}_0" for row, uid in enumerate(UIDS)],  # one session per response
        is_padding=[False] * len(UIDS),
        response_mask=mask,
        texts=decode_responses(responses, mask, tokenizer),
    )
    copo = CopoConfig(local_estimator="gcpo", entropy_source="reward")
    settings = StepSettings(estimator=estimator, copo=copo, gcpo=gcpo(beta=0.5))
    result = advantage_step(step_batch, settings, global_step=1)
    expected = compute_gcpo_advantages(
        HashEmbedder(256).embed(TEXTS), torch.tensor(SCORES), UIDS, beta=0.5, seed=1
    )
    name = "advantages" if estimator == "gcpo" else "copo_local_adv"
    token_values = result.fields[name]
    assert torch.allclose(token_values[:, 0], expected, atol=1e-6)
    assert torch.equal(token_values[~mask.bool()], torch.zeros_like(token_values[~mask.bool()]))
    assert {"gcpo/coverage_mean", "gcpo/frac_redundant_correct", "gcpo/embed_time_s"} <= set(result.metrics)


def test_local_estimator_gcpo_local_only_is_the_gcpo_estimator(tokenizer):
    """algorithm.copo.local_estimator=gcpo with blend_mode=local_only trains on GCPO's advantage: exactly the
    adv_estimator=gcpo step's, and (to float32 rounding) copo_core's GCPO advantage on the same embeddings."""
    responses, mask = encode(tokenizer, TEXTS)
    step_batch = StepBatch(
        scores=torch.tensor(SCORES),
        uids=UIDS,
        keys=[f"{uid}_{row}_0" for row, uid in enumerate(UIDS)],
        is_padding=[False] * len(UIDS),
        response_mask=mask,
        texts=decode_responses(responses, mask, tokenizer),
    )
    copo = CopoConfig(local_estimator="gcpo", entropy_source="reward", blend_mode="local_only")
    blended = advantage_step(step_batch, StepSettings(estimator="copo", copo=copo, gcpo=gcpo(beta=0.5)), 3)
    alone = advantage_step(step_batch, StepSettings(estimator="gcpo", gcpo=gcpo(beta=0.5)), 3)
    assert torch.equal(blended.fields["advantages"], alone.fields["advantages"])
    assert torch.equal(blended.fields["copo_local_weight"], mask.to(torch.float32))
    expected = compute_gcpo_advantages(
        HashEmbedder(256).embed(TEXTS), torch.tensor(SCORES), UIDS, beta=0.5, seed=3
    )
    assert torch.allclose(blended.fields["advantages"][:, 0], expected, atol=1e-6)
