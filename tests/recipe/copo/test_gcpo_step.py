"""apply_gcpo on a real verl DataProto with the hashing embedder and a byte-level tokenizer."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

from copo_core.gcpo import compute_gcpo_advantages, gcpo_coverage
from recipe.copo.embedders import HashEmbedder
from recipe.copo.gcpo_step import (
    PRECOMPUTED_KEY,
    apply_gcpo,
    decode_responses,
    embed_unique,
    get_embedder,
    precomputed_embeddings,
    response_scores,
)
from tests.tiny_model import build_tiny_tokenizer

PROMPT_LEN = 5
RESP_LEN = 40


@pytest.fixture(scope="module")
def tokenizer():
    return build_tiny_tokenizer()


def make_config(**gcpo) -> OmegaConf:
    section = {"embedder": "hash", "embed_batch_size": 8, **gcpo}
    return OmegaConf.create({"algorithm": {"norm_adv_by_std_in_grpo": True, "gcpo": section}})


def make_batch(
    tokenizer, texts: list[str], scores: list[float], uids: list[str], *, key="token_level_scores", **meta
):
    """A DataProto shaped like verl's after the reward: left-padded prompts, right-padded responses."""
    n = len(texts)
    responses = torch.full((n, RESP_LEN), tokenizer.pad_token_id, dtype=torch.long)
    response_mask = torch.zeros(n, RESP_LEN, dtype=torch.long)
    rewards = torch.zeros(n, RESP_LEN)
    for i, text in enumerate(texts):
        ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
        assert len(ids) <= RESP_LEN, f"test text too long for RESP_LEN: {text!r}"
        responses[i, : len(ids)] = torch.tensor(ids)
        response_mask[i, : len(ids)] = 1
        rewards[i, len(ids) - 1] = scores[i]  # verl puts the outcome on the last response token
    prompts = torch.full((n, PROMPT_LEN), 65, dtype=torch.long)
    attention_mask = torch.cat([torch.ones(n, PROMPT_LEN, dtype=torch.long), response_mask], dim=1)
    tensors = {
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention_mask,
        "response_mask": response_mask,
        key: rewards,
    }
    return DataProto.from_dict(
        tensors=tensors, non_tensors={"uid": np.array(uids, dtype=object)}, meta_info=dict(meta)
    )


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


def test_decode_and_scores_use_only_response_tokens(tokenizer):
    batch = make_batch(tokenizer, TEXTS, SCORES, UIDS)
    assert decode_responses(batch, tokenizer) == TEXTS  # eos (special) and padding stripped
    assert response_scores(batch).tolist() == SCORES
    # Without response_mask the response half of attention_mask is used.
    batch.batch.pop("response_mask")
    assert decode_responses(batch, tokenizer) == TEXTS


def test_apply_gcpo_equals_core_on_independently_embedded_texts(tokenizer):
    batch = make_batch(tokenizer, TEXTS, SCORES, UIDS, global_steps=3)
    config = make_config(alpha=0.7, beta=0.5)
    adv, metrics = apply_gcpo(batch, config, tokenizer)
    emb = HashEmbedder(256).embed(TEXTS)
    expected = compute_gcpo_advantages(emb, torch.tensor(SCORES), UIDS, alpha=0.7, beta=0.5, seed=3)
    assert adv.shape == (9,) and adv.dtype == torch.float32
    assert torch.allclose(adv, expected, atol=1e-6)
    coverage = gcpo_coverage(emb, torch.tensor(SCORES), UIDS, alpha=0.7)
    assert metrics["coverage_mean"] == pytest.approx(float(coverage[[0, 4, 8]].mean()), abs=1e-5)
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
    batch = make_batch(tokenizer, TEXTS, SCORES, UIDS, key="token_level_rewards")
    config = make_config(beta=0.0)
    config.algorithm.norm_adv_by_std_in_grpo = norm
    adv, _ = apply_gcpo(batch, config, tokenizer)
    verl_adv, _ = compute_grpo_outcome_advantage(
        batch.batch["token_level_rewards"],
        batch.batch["response_mask"],
        batch.non_tensor_batch["uid"],
        norm_adv_by_std_in_grpo=norm,
    )
    mask = batch.batch["response_mask"].bool()
    expected = verl_adv[:, 0]
    assert torch.allclose(
        verl_adv[mask], expected[:, None].expand_as(verl_adv)[mask]
    )  # constant per response
    assert torch.allclose(adv, expected, atol=1e-6)


def test_monte_carlo_seed_follows_the_global_step(tokenizer):
    texts = [f"answer {i % 5} because {i}" for i in range(12)]
    scores = [1.0] * 12
    uids = ["g"] * 12
    config = make_config(exact_max_g=4, num_permutations=4, seed=10)
    emb = HashEmbedder(256).embed(texts)
    results = []
    for step in (1, 2):
        batch = make_batch(tokenizer, texts, scores, uids, global_steps=step)
        adv, _ = apply_gcpo(batch, config, tokenizer)
        expected = compute_gcpo_advantages(
            emb, torch.tensor(scores), uids, exact_max_g=4, num_permutations=4, seed=10 + step
        )
        assert torch.allclose(adv, expected, atol=1e-6)
        results.append(adv)
    assert not torch.equal(results[0], results[1])
    # An explicit global_step overrides meta_info.
    adv, _ = apply_gcpo(
        make_batch(tokenizer, texts, scores, uids, global_steps=1), config, tokenizer, global_step=2
    )
    assert torch.equal(adv, results[1])


def test_all_wrong_group_and_metrics_on_a_batch(tokenizer):
    scores = [0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0]
    batch = make_batch(tokenizer, TEXTS, scores, UIDS)
    adv, metrics = apply_gcpo(batch, make_config(), tokenizer)
    assert (adv[:4] == 0).all()
    assert 0.0 <= metrics["frac_redundant_correct"] <= 1.0
    assert 0.0 < metrics["uniqueness_mean"] <= 1.0 + 1e-6


def test_embedder_is_cached_across_steps():
    assert get_embedder("hash", 8) is get_embedder("hash", 8)
    assert get_embedder("hash", 8) is not get_embedder("hash", 16)


def test_missing_inputs_raise(tokenizer):
    batch = make_batch(tokenizer, TEXTS, SCORES, UIDS)
    no_uid = DataProto(batch=batch.batch, non_tensor_batch={}, meta_info={})
    with pytest.raises(ValueError, match="uid"):
        apply_gcpo(no_uid, make_config(), tokenizer)
    batch.batch.pop("token_level_scores")
    with pytest.raises(ValueError, match="token_level_rewards"):
        apply_gcpo(batch, make_config(), tokenizer)


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


def test_precomputed_embeddings_from_reward_extra_info_are_used(tokenizer):
    batch = make_batch(tokenizer, TEXTS, SCORES, UIDS, global_steps=0)
    gen = torch.Generator().manual_seed(0)
    vectors = torch.randn(len(TEXTS), 5, generator=gen)
    column = np.empty(len(TEXTS), dtype=object)
    column[:] = [v.tolist() for v in vectors]  # as verl's reward extra info delivers them
    batch.non_tensor_batch[PRECOMPUTED_KEY] = column
    assert torch.allclose(precomputed_embeddings(batch), vectors)
    adv, _ = apply_gcpo(batch, make_config(embedder="/not/used"), tokenizer)
    expected = compute_gcpo_advantages(vectors, torch.tensor(SCORES), UIDS, seed=0)
    assert torch.allclose(adv, expected, atol=1e-6)
    column[1] = [1.0, 2.0]
    with pytest.raises(ValueError, match="gcpo_embedding"):
        precomputed_embeddings(batch)


@pytest.mark.parametrize("estimator", ["gcpo", "copo"])
def test_real_apply_gcpo_inside_the_trainer_step(tokenizer, estimator):
    """recipe.copo.trainer.compute_step_fields with the real apply_gcpo (not a stub)."""
    from recipe.copo.trainer import CopoSettings, compute_step_fields

    batch = make_batch(tokenizer, TEXTS, SCORES, UIDS, key="token_level_rewards")
    keys = [f"{uid}_{row}_0" for row, uid in enumerate(UIDS)]  # one session per response
    config = make_config(beta=0.5)
    settings = CopoSettings(local_estimator="gcpo", entropy_source="reward")

    def gcpo_fn(sub):
        return apply_gcpo(sub, config, tokenizer, global_step=1)

    fields, metrics = compute_step_fields(batch, keys, [False] * len(UIDS), estimator, settings, gcpo_fn)
    expected = compute_gcpo_advantages(
        HashEmbedder(256).embed(TEXTS), torch.tensor(SCORES), UIDS, beta=0.5, seed=1
    )
    name = "advantages" if estimator == "gcpo" else "copo_local_adv"
    mask = batch.batch["response_mask"].bool()
    token_values = fields[name]
    assert torch.allclose(token_values[:, 0], expected, atol=1e-6)
    assert torch.equal(token_values[~mask], torch.zeros_like(token_values[~mask]))
    assert {"gcpo/coverage_mean", "gcpo/frac_redundant_correct", "gcpo/embed_time_s"} <= set(metrics)
