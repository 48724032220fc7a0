"""Many seeds in one process (recipe/study/fast/grouped*.py, seeds.py) against today's single-seed code path.

Each check runs the single-seed functions (``transformers``' Qwen2, ``update.train_on_batch``,
``rollout.sample_forked``, ``run.run``) on each seed alone and the batched ones on the S seeds together,
and compares seed by seed. Tolerances (fp32, the tiny 2-layer model):

* logits and log-probs: 1e-5 absolute (the batched matmuls block their sums differently);
* advantages: exactly equal (the same function on the same scores);
* loss: 1e-6 relative; gradient norm: 1e-5 relative;
* weights after 3 AdamW steps at lr 0.01 (each step moves a weight by up to ~0.01): 2e-5 absolute.
  Measured: ~1e-6 on the embeddings and most matrices, up to 1e-5 on the key biases, whose gradient
  is nearly zero (RoPE aside, softmax ignores a shift of every key), so AdamW's ``m / sqrt(v)``
  scales their rounding differences up to the size of a step;
* sampled tokens: equal (the random draws are the seed's own; a token would differ only at a
  near tie of the cumulative distribution within ~1e-6, which these seeds do not hit).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from recipe.copo.config_check import compose_and_validate
from recipe.study.fast.data import Prompt
from recipe.study.fast.grouped import GroupedQwen2
from recipe.study.fast.grouped_step import sample_seeds, seed_log_probs, train_seeds
from recipe.study.fast.rollout import Group, sample_forked
from recipe.study.fast.settings import FastSettings
from recipe.study.fast.update import batch_from_groups, build_optimizer, response_log_probs, train_on_batch
from recipe.study.methods import METHODS
from recipe.tracking import names

PATHS = ["actor_rollout_ref.model.path=/m", "data.train_files=/t", "data.val_files=/v", "data.seed=3"]
PATHS += [
    "actor_rollout_ref.rollout.seed=3",
    "data.train_batch_size=3",
    "actor_rollout_ref.actor.ppo_mini_batch_size=3",
]
PATHS += ["actor_rollout_ref.actor.optim.lr=0.01", "actor_rollout_ref.actor.optim.lr_warmup_steps=1"]
SEEDS = 3
PAD = 257  # the tiny model's pad token: its embedding row takes no input gradient (nn.Embedding padding_idx)
G = 4


def settings_for(method: str) -> FastSettings:
    return FastSettings.from_config(
        compose_and_validate([*PATHS, *METHODS[method]], config_name="testbed2_cpu")
    )


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> list[torch.nn.Module]:
    """SEEDS tiny Qwen2 policies with different weights (the tiny model, perturbed per seed)."""
    from transformers import AutoModelForCausalLM

    from recipe.models.tiny import build_tiny_qwen2

    path = build_tiny_qwen2(tmp_path_factory.mktemp("seeds") / "tiny")
    out = []
    for seed in range(SEEDS):
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa")
        generator = torch.Generator().manual_seed(100 + seed)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.05 * torch.randn(p.shape, generator=generator))
        out.append(model.eval())
    return out


def _groups(seed: int) -> list[Group]:
    """A fixed step batch of 3 prompts x G responses of varied lengths and mixed scores."""
    gen = torch.Generator().manual_seed(seed)
    groups = []
    for p in range(3):
        prompt_len = 3 + int(torch.randint(0, 4, (1,), generator=gen))
        ids = tuple(torch.randint(3, 250, (prompt_len,), generator=gen).tolist())
        responses = [torch.randint(3, 250, (1 + int(torch.randint(0, 5, (1,), generator=gen)),), generator=gen).tolist()
                     for _ in range(G)]  # fmt: skip
        scores = torch.randint(0, 2, (G,), generator=gen).float().tolist()
        log_probs = [(-torch.rand(len(r), generator=gen) * 3).tolist() for r in responses]
        groups.append(
            Group(
                Prompt(p, ids, "testbed2/add", "1", {}),
                f"{seed}-{p}",
                responses,
                log_probs,
                scores,
                [s > 0 for s in scores],
                [str(int(s)) for s in scores],
            )  # fmt: skip
        )
    return groups


def test_grouped_forward_equals_each_model(models) -> None:
    grouped = GroupedQwen2.from_models(models)
    batches = [batch_from_groups(_groups(s), PAD) for s in range(SEEDS)]
    with torch.no_grad():
        mine = seed_log_probs(grouped, batches, temperature=1.0, pad_token_id=PAD, group_size=G)
        for s in range(SEEDS):
            alone = response_log_probs(models[s], batches[s], 1.0, group_size=G)
            assert mine[s].shape == alone.shape
            assert torch.allclose(mine[s], alone, atol=1e-5, rtol=0)
            # and not merely close to any seed's: the seeds' weights differ by far more than the tolerance
            other = response_log_probs(models[(s + 1) % SEEDS], batches[s], 1.0, group_size=G)
            assert not torch.allclose(mine[s], other, atol=1e-3)


@pytest.mark.parametrize("method", ["grpo", "copo_soft_with_zero"])
def test_three_batched_steps_equal_each_seed_alone(models, method: str) -> None:
    settings = settings_for(method)
    steps = 3
    batches = {
        (s, k): batch_from_groups(_groups(10 * s + k), PAD) for s in range(SEEDS) for k in range(steps)
    }
    # today's single-seed trainer, one seed at a time
    alone: list[list[dict]] = []
    weights_alone = []
    for s in range(SEEDS):
        model = copy.deepcopy(models[s])
        optimizer, scheduler = build_optimizer(model, settings)
        rows = [train_on_batch(model, optimizer, scheduler, batches[(s, k)], settings, k + 1, group_size=G)
                for k in range(steps)]  # fmt: skip
        alone.append(rows)
        weights_alone.append(dict(model.named_parameters()))
    # the seeds together
    grouped = GroupedQwen2.from_models(models)
    optimizer, scheduler = build_optimizer(grouped, settings)
    together = [
        train_seeds(
            grouped, optimizer, scheduler, [batches[(s, k)] for s in range(SEEDS)], settings, k + 1, 0, G
        )
        for k in range(steps)
    ]
    for s in range(SEEDS):
        for k in range(steps):
            a, b = alone[s][k], together[k][s]
            assert torch.equal(a["_advantages"], b["_advantages"])
            assert b[names.ACTOR_PG_LOSS] == pytest.approx(a[names.ACTOR_PG_LOSS], rel=1e-6, abs=1e-9)
            assert b[names.ACTOR_GRAD_NORM] == pytest.approx(a[names.ACTOR_GRAD_NORM], rel=1e-5)
            assert b[names.ACTOR_LR] == a[names.ACTOR_LR]
            assert set(a) == set(b)
        state = grouped.state_dict_of(s)
        moved = 0.0
        for name, w in weights_alone[s].items():
            assert torch.allclose(state[name], w.detach(), atol=2e-5, rtol=0), name
            start = dict(models[s].named_parameters())[name].detach()
            moved = max(moved, float((w.detach() - start).abs().max()))
        assert moved > 1e-3  # the steps moved the weights by far more than the tolerance


def test_batched_sampling_draws_each_seeds_own_tokens(models) -> None:
    from recipe.cpu_backend.sampling import SamplingParams

    params = SamplingParams(temperature=1.0, max_tokens=6)
    grouped = GroupedQwen2.from_models(models)
    prompts = [[[10 + s, 11, 12, 13], [20, 21 + s], [30, 31, 32]][: 3 - (s == 1)] for s in range(SEEDS)]
    eos, pad = [258], PAD
    together = sample_seeds(
        grouped, prompts, 3, params, eos_token_ids=eos, pad_token_id=pad,
        generators=[torch.Generator().manual_seed(s) for s in range(SEEDS)],
    )  # fmt: skip
    for s in range(SEEDS):
        alone = sample_forked(models[s], prompts[s], 3, params, eos_token_ids=eos, pad_token_id=pad,
                              generator=torch.Generator().manual_seed(s))  # fmt: skip
        assert len(together[s]) == len(alone)
        for mine, theirs in zip(together[s], alone, strict=True):
            for a, b in zip(mine, theirs, strict=True):
                assert a.token_ids == b.token_ids
                assert a.finished_by_eos == b.finished_by_eos
                assert torch.allclose(torch.tensor(a.log_probs), torch.tensor(b.log_probs), atol=1e-5)


def _tiny_run_configs(tmp_path, tiny_dir, seeds: list[int], method: str, *extra: str) -> list:
    """Composed configs of a tiny testbed v2 fast run (parity reward: mixed groups), one per seed."""
    from recipe.study.fast.seeds import with_seed
    from recipe.study.testbed.mixed import MixedTaskSpec
    from tests.e2e.cpu_run import PARITY_REWARD

    data = tmp_path / "data"
    if not (data / "train.parquet").is_file():
        MixedTaskSpec(train_per_task=16, val_per_task=4).make_splits().write(data)
    base = compose_and_validate(
        [
            f"actor_rollout_ref.model.path={tiny_dir}",
            f"data.train_files={data / 'train.parquet'}",
            f"data.val_files={data / 'val.parquet'}",
            "data.seed=0",
            "actor_rollout_ref.rollout.seed=0",
            "data.train_batch_size=4",
            "data.max_prompt_length=160",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.optim.lr=0.003",
            "actor_rollout_ref.actor.optim.lr_warmup_steps=1",
            f"reward.custom_reward_function.path={PARITY_REWARD}",
            "trainer.total_training_steps=3",
            "trainer.test_freq=2",
            *METHODS[method],
            *extra,
        ],
        config_name="testbed2_cpu",
    )
    return [with_seed(base, s) for s in seeds]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory):
    from recipe.models.tiny import build_tiny_qwen2

    return build_tiny_qwen2(tmp_path_factory.mktemp("seeds_run") / "tiny")


@pytest.mark.parametrize(
    ("method", "extra"),
    [("copo_soft_with_zero", ()), ("grpo", ("algorithm.rollout_correction.bypass_mode=false",))],
)
def test_batched_steps_equal_fast_runs_seed_by_seed(tmp_path, tiny_dir, method: str, extra: tuple) -> None:
    """Three steps of ManySeeds(0, 1, 2) against three FastRun's: rows, weights and validation."""
    from recipe.study.fast.run import FastRun
    from recipe.study.fast.seeds import ManySeeds

    configs = _tiny_run_configs(tmp_path, tiny_dir, [0, 1, 2], method, *extra)
    together = ManySeeds(configs)
    alone = [FastRun(c) for c in configs]
    assert together.settings[0].reuse_rollout_log_probs == (method != "grpo")
    for step in (1, 2, 3):
        rows = together.step(step)
        for i, run in enumerate(alone):
            mine, theirs = rows[i], run.step(step)
            assert set(mine) == set(theirs)
            for key, value in theirs.items():
                assert mine[key] == pytest.approx(value, rel=1e-5, abs=1e-6, nan_ok=True), (step, i, key)
            assert theirs[names.ACTOR_GRAD_NORM] > 0.0  # a real update, not a no-op
    for i, run in enumerate(alone):
        state = together.model.state_dict_of(i)
        for name, w in run.model.named_parameters():
            assert torch.allclose(state[name], w.detach(), atol=2e-5, rtol=0), (i, name)
        assert (together.validate(3)[i] == run.validate(3)).all()
    # the seeds are different runs: different data and samples, so different weights
    assert not torch.allclose(
        together.model.state_dict_of(0)["model.norm.weight"],
        together.model.state_dict_of(1)["model.norm.weight"],
    )


def test_run_seeds_writes_each_seeds_run_folder(tmp_path, tiny_dir) -> None:
    from recipe.study.fast.run import RESULT, VALIDATION, run
    from recipe.study.fast.seeds import run_seeds
    from recipe.tracking.jsonl import read_metrics_jsonl

    configs = _tiny_run_configs(tmp_path, tiny_dir, [4, 5], "grpo")
    results = run_seeds(configs, [tmp_path / "b4", tmp_path / "b5"])
    run(configs[1], tmp_path / "a5")
    batched, single = (read_metrics_jsonl(tmp_path / d / "metrics.jsonl") for d in ("b5", "a5"))
    assert [r["step"] for r in batched] == [r["step"] for r in single] == [0, 1, 2, 3]
    for b, a in zip(batched, single, strict=True):
        assert set(b) == set(a)
        for key, value in a.items():
            if value is None:  # NaN (no wrong answer of that kind) is written as null
                assert b[key] is None, key
            elif not key.startswith("perf/") and key != names.STEP_TIME:
                assert b[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    b, a = np.load(tmp_path / "b5" / VALIDATION), np.load(tmp_path / "a5" / VALIDATION)
    assert b["steps"].tolist() == a["steps"].tolist() == [0, 2, 3] and (b["correct"] == a["correct"]).all()
    assert results[0]["seeds_in_batch"] == 2 and (tmp_path / "b4" / RESULT).is_file()


def test_batched_sampling_with_rows_finishing_at_different_steps(models) -> None:
    """Half the vocabulary ends a response: rows finish at every step, differently per seed, and leave the batch."""
    from recipe.cpu_backend.sampling import SamplingParams

    params = SamplingParams(temperature=1.0, max_tokens=8)
    grouped = GroupedQwen2.from_models(models)
    prompts = [[[10 + s, 11, 12, 13], [20, 21 + s], [30, 31, 32], [40 + s]] for s in range(SEEDS)]
    eos = list(range(130, 259))
    together = sample_seeds(
        grouped, prompts, 4, params, eos_token_ids=eos, pad_token_id=PAD,
        generators=[torch.Generator().manual_seed(7 + s) for s in range(SEEDS)],
    )  # fmt: skip
    lengths = set()
    for s in range(SEEDS):
        alone = sample_forked(models[s], prompts[s], 4, params, eos_token_ids=eos, pad_token_id=PAD,
                              generator=torch.Generator().manual_seed(7 + s))  # fmt: skip
        for mine, theirs in zip(together[s], alone, strict=True):
            for a, b in zip(mine, theirs, strict=True):
                assert (a.token_ids, a.finished_by_eos) == (b.token_ids, b.finished_by_eos)
                assert torch.allclose(torch.tensor(a.log_probs), torch.tensor(b.log_probs), atol=1e-5)
                lengths.add(len(a.token_ids))
    assert len(lengths) >= 4  # rows did finish at many different steps


@pytest.mark.parametrize(
    ("method", "second_extra", "match"),
    [
        ("dapo_filter", (), "filter_groups"),
        ("grpo", ("actor_rollout_ref.actor.optim.lr=0.001",), "differ in more than"),
    ],
)
def test_many_seeds_refuses_what_it_does_not_batch(tmp_path, tiny_dir, method, second_extra, match) -> None:
    from recipe.study.fast.seeds import ManySeeds
    from recipe.study.fast.settings import FastConfigError

    first = _tiny_run_configs(tmp_path, tiny_dir, [0], method)
    second = _tiny_run_configs(tmp_path, tiny_dir, [1], method, *second_extra)
    with pytest.raises(FastConfigError, match=match):
        ManySeeds(first + second)
