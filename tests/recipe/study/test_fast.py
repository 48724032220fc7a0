"""The fast study trainer's parts (recipe/study/fast) against independent computations.

The end-to-end parity with verl's trainer (advantages, loss and gradients of a captured main_copo
step) is tests/e2e/test_fast_parity.py; these are the unit checks: settings read from the composed
config, verl's data order, the forked sampler, DAPO's refill rule, the GRPO advantage, the log-probs
of a padded batch, the loss normalisation and the optimizer step.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from recipe.copo.config_check import compose_and_validate
from recipe.cpu_backend.sampling import SamplingParams, sample_batch
from recipe.study.fast import dapo
from recipe.study.fast.data import Prompt, data_order
from recipe.study.fast.rollout import Group, sample_forked
from recipe.study.fast.run import group_census
from recipe.study.fast.settings import FastConfigError, FastSettings
from recipe.study.fast.update import (
    UpdateBatch,
    batch_from_groups,
    compute_advantages,
    optimizer_step,
    policy_loss,
    response_log_probs,
    token_rewards,
)
from recipe.study.methods import METHODS

PATHS = ["actor_rollout_ref.model.path=/m", "data.train_files=/t", "data.val_files=/v", "data.seed=3"]
PATHS += ["actor_rollout_ref.rollout.seed=3"]


def settings_for(method: str, *extra: str) -> FastSettings:
    return FastSettings.from_config(
        compose_and_validate([*PATHS, *METHODS[method], *extra], config_name="testbed2_cpu")
    )


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from recipe.models.tiny import build_tiny_qwen2

    path = build_tiny_qwen2(tmp_path_factory.mktemp("fast") / "tiny")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa").eval()
    return model, AutoTokenizer.from_pretrained(path)


@pytest.mark.parametrize("method", ["grpo", "copo_soft_with_zero", "copo_soft", "dapo_filter"])
def test_settings_read_the_composed_config(method: str) -> None:
    s = settings_for(method, "actor_rollout_ref.actor.optim.lr=0.002")
    assert (s.batch_size, s.n, s.temperature, s.val_n, s.val_temperature) == (16, 4, 1.0, 4, 1.0)
    assert (s.data_seed, s.rollout_seed, s.reuse_rollout_log_probs) == (3, 3, True)
    assert s.actor.optim.lr == 0.002 and s.actor.loss_agg_mode == "seq-mean-token-mean"
    assert s.estimator == ("grpo" if method in ("grpo", "dapo_filter") else "copo")
    assert s.filter_groups == (method == "dapo_filter")
    if s.step is not None:
        assert s.step.copo.blend_mode == method.removeprefix("copo_")


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("actor_rollout_ref.actor.ppo_epochs=2", "ppo_epochs"),
        ("actor_rollout_ref.actor.ppo_mini_batch_size=8", "ppo_mini_batch_size"),
        ("algorithm.adv_estimator=rloo", "adv_estimator"),
        ("actor_rollout_ref.actor.entropy_coeff=0.01", "entropy_coeff"),
    ],
)
def test_settings_refuse_what_the_fast_trainer_does_not_run(override: str, key: str) -> None:
    from omegaconf import OmegaConf

    from recipe.copo.config_check import compose

    config = compose([*PATHS, *METHODS["grpo"]], config_name="testbed2_cpu")
    name, value = override.split("=")
    OmegaConf.update(
        config, name, int(value) if value.isdigit() else (float(value) if "." in value else value)
    )
    with pytest.raises(FastConfigError, match=key):
        FastSettings.from_config(config)


def test_data_order_is_verls_sampler_with_the_seeded_generator() -> None:
    from torchdata.stateful_dataloader.sampler import RandomSampler  # verl's create_rl_sampler

    generator = torch.Generator()
    generator.manual_seed(7)
    sampler = RandomSampler(range(10), generator=generator)
    expected = list(sampler) + list(sampler)  # two epochs
    order = data_order(10, seed=7)
    assert [next(order) for _ in range(20)] == expected


def test_forked_sampling_equals_sampling_every_copy(tiny) -> None:
    model, tokenizer = tiny
    prompts = [[10, 11, 12, 13], [20, 21], [30, 31, 32]]
    params = SamplingParams(temperature=1.0, max_tokens=6)
    kwargs = {"eos_token_ids": [int(tokenizer.eos_token_id)], "pad_token_id": int(tokenizer.pad_token_id)}
    forked = sample_forked(model, prompts, 3, params, generator=torch.Generator().manual_seed(1), **kwargs)
    rows = [p for p in prompts for _ in range(3)]
    plain = sample_batch(
        model, rows, params, max_tokens=[6] * len(rows), generator=torch.Generator().manual_seed(1), **kwargs
    )
    for i, sample in enumerate(plain):
        mine = forked[i // 3][i % 3]
        assert mine.token_ids == sample.token_ids
        assert np.allclose(mine.log_probs, sample.log_probs, atol=1e-5)


def _group(uid: str, accs: list[int], task: str = "testbed2/add") -> Group:
    prompt = Prompt(int(uid), (1, 2), task, "1", {})
    return Group(prompt, uid, [[5, 6]] * len(accs), [[-1.0, -1.0]] * len(accs), [float(a) for a in accs],
                 [bool(a) for a in accs], [str(a) for a in accs])  # fmt: skip


def test_dapo_refills_twice_the_evicted_groups_up_to_the_inflight_cap() -> None:
    # round 1: 4 prompts, 3 evicted -> credit 6, cap 2 x 4 = 8 -> 6 prompts; round 2: 2 kept -> full
    outcomes = iter([[1, 1], [0, 0], [1, 0], [0, 0], [1, 1], [0, 1], [0, 0], [1, 0], [1, 0], [1, 1]])
    stream = iter(range(100))
    calls = []

    def generate(prompts):
        calls.append(len(prompts))
        return [_group(str(p), next(outcomes)) for p in prompts]

    sample = dapo.sample_step(
        lambda k: [next(stream) for _ in range(k)],
        generate,
        4,
        filter_groups=True,
        max_inflight_gen_batches=2,
    )
    assert calls == [4, 6]
    assert [g.uid for g in sample.kept] == ["2", "5", "7", "8"]
    assert [g.uid for g in sample.surplus] == []
    assert len(sample.evicted) == 6 and len(sample.generated) == 10 and sample.rounds == 2


def test_dapo_keeps_the_first_groups_and_discards_the_surplus() -> None:
    stream = iter(range(100))
    # round 1: 1 kept of 3, credit 4 capped at 1 x 3 prompts; round 2: 3 more kept, one is surplus
    rounds = iter([[[0, 0], [1, 0], [1, 1]], [[0, 1], [1, 0], [0, 1]]])

    def generate(prompts):
        return [_group(str(p), acc) for p, acc in zip(prompts, next(rounds), strict=True)]

    sample = dapo.sample_step(lambda k: [next(stream) for _ in range(k)], generate, 3, filter_groups=True)
    assert [g.uid for g in sample.kept] == ["1", "3", "4"]
    assert [g.uid for g in sample.surplus] == ["5"]


def test_without_filtering_the_step_is_one_batch() -> None:
    sample = dapo.sample_step(lambda k: list(range(k)), lambda ps: [_group(str(p), [1, 1]) for p in ps], 3)
    assert len(sample.kept) == 3 and sample.rounds == 1 and not sample.evicted


def _batch() -> UpdateBatch:
    groups = [_group("0", [1, 0, 1, 1]), _group("1", [0, 0, 0, 0]), _group("2", [1, 0, 0, 0])]
    groups[0].responses[1] = [5, 6, 7]
    groups[0].log_probs[1] = [-1.0, -2.0, -0.5]
    return batch_from_groups(groups, pad_token_id=0)


def test_batch_layout_and_token_rewards() -> None:
    batch = _batch()
    assert batch.input_ids.shape == (12, 2 + 3)
    assert batch.response_mask[1].tolist() == [1, 1, 1] and batch.response_mask[0].tolist() == [1, 1, 0]
    assert batch.position_ids[1].tolist() == [0, 1, 2, 3, 4]
    rewards = token_rewards(batch.scores, batch.response_mask)
    assert (
        rewards[0].tolist() == [0, 1, 0]
        and rewards[1].tolist() == [0, 0, 0]
        and rewards.sum() == batch.scores.sum()
    )


def test_grpo_advantage_is_the_group_standardised_score() -> None:
    batch = _batch()
    adv = compute_advantages(batch, settings_for("grpo"), global_step=1)["advantages"]
    for g in range(3):
        rows = slice(4 * g, 4 * g + 4)
        scores = batch.scores[rows]
        expected = (scores - scores.mean()) / (scores.std() + 1e-6)
        assert torch.allclose(adv[rows, 0], expected, atol=1e-6)
        assert torch.equal(adv[rows] * (1 - batch.response_mask[rows]), torch.zeros_like(adv[rows]))


def test_every_response_is_its_own_session() -> None:
    from recipe.copo.step import session_rows
    from recipe.study.fast.update import session_keys

    keys = session_keys(["a", "a", "b", "a", "b"])
    assert keys == ["a_0_0", "a_1_0", "b_0_0", "a_2_0", "b_1_0"]
    assert session_rows(keys, [False] * 5)[0] == [0, 1, 2, 3, 4]


def test_copo_fields_come_from_the_recipe_step() -> None:
    from recipe.copo.fields import GLOBAL_ADV, LOCAL_WEIGHT

    fields = compute_advantages(_batch(), settings_for("copo_soft_with_zero"), global_step=1)
    assert fields[GLOBAL_ADV][4:8, 0].lt(0).all()  # the all-wrong group ranks below the batch mean
    assert fields[LOCAL_WEIGHT][4:8].eq(0).all()  # soft_with_zero: wrong responses take the global term
    assert "copo/entropy_mean" in fields["metrics"]


def test_log_probs_of_the_padded_batch_equal_each_sequence_alone(tiny) -> None:
    model, _ = tiny
    batch = _batch()
    log_prob = response_log_probs(model, batch, temperature=0.7)
    width = batch.response_width
    for i in range(batch.input_ids.shape[0]):
        ids = batch.input_ids[i][batch.attention_mask[i].bool()]
        n_resp = int(batch.response_mask[i].sum())
        with torch.no_grad():
            logits = model(input_ids=ids[None]).logits[0].float() / 0.7
        alone = torch.log_softmax(logits[-n_resp - 1 : -1], -1).gather(-1, ids[-n_resp:, None]).squeeze(-1)
        assert torch.allclose(log_prob[i, :n_resp].detach(), alone, atol=1e-5)
        assert log_prob[i, n_resp:width].abs().sum() == 0


def test_shared_prompt_forward_equals_every_row_forward(tiny) -> None:
    """Log-probs and gradients of the grouped forward equal the padded forward of every row."""
    model, _ = tiny
    rng = torch.Generator().manual_seed(0)
    groups = []
    for g, prompt_len in enumerate((5, 9, 3)):
        prompt = tuple(torch.randint(3, 200, (prompt_len,), generator=rng).tolist())
        responses = [torch.randint(3, 200, (int(n),), generator=rng).tolist() for n in (4, 1, 6, 3)]
        groups.append(
            Group(
                Prompt(g, prompt, "testbed2/add", "1", {}),
                str(g),
                responses,
                [[-1.0] * len(r) for r in responses],
                [1.0, 0.0, 1.0, 0.0],
                [True, False, True, False],
                ["1", "0", "1", "2"],
            )  # fmt: skip
        )
    batch = batch_from_groups(groups, pad_token_id=0)
    results = []
    for group_size in (1, 4):
        model.zero_grad()
        log_prob = response_log_probs(model, batch, temperature=0.8, group_size=group_size)
        (log_prob * torch.linspace(-1, 1, log_prob.numel()).view_as(log_prob)).sum().backward()
        results.append((log_prob.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (plain, plain_grads), (shared, shared_grads) = results
    assert torch.allclose(plain, shared, atol=1e-5)
    for name, grad in plain_grads.items():
        assert torch.allclose(grad, shared_grads[name], atol=1e-5, rtol=1e-4), name
    with pytest.raises(ValueError, match="groups of 3"):
        response_log_probs(model, batch, temperature=0.8, group_size=3)


def test_loss_is_the_mean_over_sequences_of_token_means() -> None:
    batch = _batch()
    settings = settings_for("grpo")
    fields = compute_advantages(batch, settings, global_step=1)
    log_prob = batch.old_log_probs.clone()  # ratio 1: the loss is -mean_i(mean_t A)
    loss, _ = policy_loss(settings, batch, log_prob, fields)
    mask = batch.response_mask
    per_seq = -(fields["advantages"] * mask).sum(-1) / mask.sum(-1)
    assert float(loss) == pytest.approx(float(per_seq.mean()), abs=1e-6)


def test_optimizer_step_skips_non_finite_gradients() -> None:
    layer = torch.nn.Linear(2, 1)
    before = layer.weight.detach().clone()
    optimizer = torch.optim.SGD(layer.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    layer.weight.grad = torch.tensor([[math.inf, 1.0]])
    layer.bias.grad = torch.zeros(1)
    norm, _ = optimizer_step(layer, optimizer, scheduler, clip_grad=1.0)
    assert not math.isfinite(norm) and torch.equal(layer.weight, before) and layer.weight.grad is None


def test_group_census_counts_per_task() -> None:
    groups = [
        _group("0", [1, 1]),
        _group("1", [0, 0]),
        _group("2", [1, 0], "testbed2/max"),
        _group("3", [1, 1], "testbed2/max"),
    ]
    census = group_census(groups)
    assert census["groups/testbed2/add/all_correct"] == 0.5 and census["groups/testbed2/add/all_wrong"] == 0.5
    assert census["groups/testbed2/max/zero_variance"] == 0.5 and census["groups/all/count"] == 4
    assert census["groups/all/accuracy"] == pytest.approx(5 / 8)


def test_a_fast_run_trains_validates_and_records_its_time(tmp_path: Path, tiny) -> None:
    """Two steps of the tiny model on a tiny testbed v2 (parity reward: mixed groups)."""
    from recipe.study.fast.run import RESULT, VALIDATION, run
    from recipe.study.testbed.mixed import MixedTaskSpec
    from recipe.tracking.jsonl import read_metrics_jsonl
    from tests.e2e.cpu_run import PARITY_REWARD

    MixedTaskSpec(train_per_task=16, val_per_task=4).make_splits().write(tmp_path / "data")
    model_dir = Path(tiny[0].name_or_path)
    config = compose_and_validate(
        [
            f"actor_rollout_ref.model.path={model_dir}",
            f"data.train_files={tmp_path / 'data' / 'train.parquet'}",
            f"data.val_files={tmp_path / 'data' / 'val.parquet'}",
            "data.seed=0",
            "actor_rollout_ref.rollout.seed=0",
            "data.train_batch_size=4",
            "data.max_prompt_length=160",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            f"reward.custom_reward_function.path={PARITY_REWARD}",
            "trainer.total_training_steps=2",
            "trainer.test_freq=1",
            *METHODS["copo_soft_with_zero"],
        ],
        config_name="testbed2_cpu",
    )
    result = run(config, tmp_path / "run")
    rows = read_metrics_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert rows[1]["signal/num_responses"] == 16 and "copo/entropy_mean" in rows[1]
    # the mechanism, logged per step: its group shares add up, its counts count the wrong answers
    from recipe.tracking import names

    for row in rows[1:]:
        assert set(names.MECHANISM_KEYS) <= set(row)
        assert sum(row[k] for k in names.MECHANISM_GROUP_SHARES) == pytest.approx(1.0)
        wrong = row[names.MECHANISM_NUM_WRONG_ALL_WRONG] + row[names.MECHANISM_NUM_WRONG_MIXED]
        assert wrong == pytest.approx(16 * (1 - row[names.SCORE_MEAN]))  # the parity reward is 0 or 1
    assert {"val-core/testbed2/add/acc/mean@4", "val-core/testbed2/max/acc/mean@4"} <= set(rows[2])
    data = np.load(tmp_path / "run" / VALIDATION)
    assert data["steps"].tolist() == [0, 1, 2] and data["correct"].shape == (3, 8) and int(data["n"]) == 4
    assert result["cpu_s"] > 0 and (tmp_path / "run" / RESULT).is_file()
