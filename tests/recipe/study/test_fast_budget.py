"""The fast trainer's budget in generated samples (recipe/study/fast/budget.py, ``+fast.budget_in_samples``):
compute-matched DAPO (docs/STUDY_PLAN.md, "Amendment: regime map (issue 37)").

Tiny runs (the tiny Qwen2, the parity reward, G = 2 so that half the groups have zero variance and
DAPO's filter generates about twice a fixed batch a step). The budgeted DAPO run's stop and validation
steps are checked against an independent loop over the run's own per-step generated-sample counts; GRPO
with the budget trains exactly what it trains without it; without the budget the files are as before.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from recipe.copo.config_check import compose_and_validate
from recipe.study.fast.budget import SampleBudget
from recipe.study.fast.settings import FastConfigError, FastSettings
from recipe.study.methods import METHODS
from recipe.tracking import names

BUDGET = "+fast.budget_in_samples=true"
STEPS, TEST_FREQ, BATCH, G = 8, 2, 4, 2  # budget 8 x 4 x 2 = 64 samples; milestones 16, 32, 48, 64
# wall and CPU seconds and the row's write time: the only values two identical runs may differ in
PERF = ("perf/", "timing_s/", "timestamp")


def _config(data: Path, model: Path, method: str, *extra: str):
    from tests.e2e.cpu_run import PARITY_REWARD

    return compose_and_validate(
        [
            f"actor_rollout_ref.model.path={model}",
            f"data.train_files={data / 'train.parquet'}",
            f"data.val_files={data / 'val.parquet'}",
            "data.seed=0",
            "actor_rollout_ref.rollout.seed=0",
            f"data.train_batch_size={BATCH}",
            "data.max_prompt_length=160",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={BATCH}",
            f"actor_rollout_ref.rollout.n={G}",
            f"reward.custom_reward_function.path={PARITY_REWARD}",
            f"trainer.total_training_steps={STEPS}",
            f"trainer.test_freq={TEST_FREQ}",
            *METHODS[method],
            *extra,
        ],
        config_name="testbed2_cpu",
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Four tiny runs: DAPO with the budget, GRPO with and without it, DAPO without it."""
    from recipe.models.tiny import build_tiny_qwen2
    from recipe.study.fast.run import run
    from recipe.study.testbed.mixed import MixedTaskSpec

    root = tmp_path_factory.mktemp("budget")
    MixedTaskSpec(train_per_task=32, val_per_task=4).make_splits().write(root / "data")
    model = build_tiny_qwen2(root / "tiny")
    out = {}
    for name, method, extra in [
        ("dapo_budget", "dapo_filter", (BUDGET,)),
        ("dapo", "dapo_filter", ()),
        ("grpo_budget", "grpo", (BUDGET,)),
        ("grpo", "grpo", ()),
    ]:
        run(_config(root / "data", Path(model), method, *extra), root / name)
        out[name] = root / name
    return out


def _rows(run_dir: Path) -> list[dict]:
    from recipe.tracking.jsonl import read_metrics_jsonl

    return read_metrics_jsonl(run_dir / "metrics.jsonl")


def _validated(rows: list[dict]) -> list[int]:
    return [int(r["step"]) for r in rows if any(k.startswith(names.VAL_PREFIX) for k in r)]


def _without_perf(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(PERF)} for r in rows]


def test_the_regimes_budget_is_the_other_methods_samples_at_their_validation_steps() -> None:
    paths = ["actor_rollout_ref.model.path=/m", "data.train_files=/t", "data.val_files=/v", "data.seed=3"]
    paths += ["actor_rollout_ref.rollout.seed=3"]
    config = compose_and_validate([*paths, *METHODS["dapo_filter"], BUDGET], config_name="regimes_cpu")
    budget = FastSettings.from_config(config).sample_budget
    # the plan's decided budget (docs/STUDY_PLAN.md, "Decided"): 90 steps of 64 prompts x 8, validations every 30
    assert budget is not None and budget.total == 90 * 64 * 8 == 46_080
    assert budget.milestones() == [30 * 512, 60 * 512, 90 * 512]
    plain = compose_and_validate([*paths, *METHODS["dapo_filter"]], config_name="regimes_cpu")
    assert FastSettings.from_config(plain).sample_budget is None  # off unless asked for


@pytest.mark.parametrize("override", ["+fast.budget_in_sample=true", "+fast.budget_in_samples=1"])
def test_a_misspelt_or_non_boolean_budget_key_is_refused(override: str) -> None:
    paths = ["actor_rollout_ref.model.path=/m", "data.train_files=/t", "data.val_files=/v", "data.seed=3"]
    config = compose_and_validate([*paths, "actor_rollout_ref.rollout.seed=3", override], "testbed2_cpu")
    with pytest.raises(FastConfigError, match=r"fast\.budget_in_sample"):
        FastSettings.from_config(config)


def test_a_step_that_crosses_two_milestones_validates_once_for_both() -> None:
    budget = SampleBudget(per_step=10, steps=6, test_freq=2)
    assert budget.milestones() == [20, 40, 60]
    assert (
        budget.crossed(15, 45) == [20, 40] and budget.crossed(40, 59) == [] and budget.crossed(59, 60) == [60]
    )
    assert not budget.exhausted(59) and budget.exhausted(60)
    assert SampleBudget(per_step=10, steps=5, test_freq=2).milestones() == [20, 40, 50]  # and after the last


def test_budgeted_dapo_stops_and_validates_at_the_first_steps_reaching_the_samples(runs) -> None:
    rows = _rows(runs["dapo_budget"])
    per_step = [int(r[names.GENERATED_SAMPLES]) for r in rows[1:]]
    # the independent loop: the milestones are the step budget's validation steps times a fixed batch
    budget, milestones = STEPS * BATCH * G, [s * BATCH * G for s in range(TEST_FREQ, STEPS + 1, TEST_FREQ)]
    cumulative, stop, expected_val, pending = 0, None, [0], list(milestones)
    for step, generated in enumerate(per_step, start=1):
        cumulative += generated
        if pending and cumulative >= pending[0]:
            expected_val.append(step)
            while pending and cumulative >= pending[0]:
                pending.pop(0)
        if cumulative >= budget:
            stop = step
            break
    # the check has teeth only if DAPO generated more than a fixed batch: it stops before the step budget
    assert stop is not None and stop < STEPS, per_step
    assert [int(r["step"]) for r in rows] == list(range(stop + 1))  # no step after the budget
    assert _validated(rows) == expected_val
    assert [int(r[names.CUMULATIVE_GENERATED_SAMPLES]) for r in rows] == np.cumsum([0, *per_step]).tolist()
    val = np.load(runs["dapo_budget"] / "validation.npz")
    assert val["steps"].tolist() == expected_val
    at_val = {int(r["step"]): int(r[names.CUMULATIVE_GENERATED_SAMPLES]) for r in rows}
    assert val["generated_samples"].tolist() == [at_val[s] for s in expected_val]
    # each validation's place on the step budget's axis: the budget's validation steps it first reached
    axis = [0, *range(TEST_FREQ, STEPS + 1, TEST_FREQ)]
    first = [0, *_first_steps_reaching(per_step, [s * BATCH * G for s in axis[1:]])]
    assert val["budget_steps"].tolist() == axis
    assert [int(val["steps"][i]) for i in val["budget_index"]] == first
    result = json.loads((runs["dapo_budget"] / "result.json").read_text())
    assert (result["steps"], result["budget_samples"]) == (stop, budget)
    assert result["generated_samples"] == sum(per_step) >= budget


def test_budgeted_dapo_trains_as_unbudgeted_dapo_until_it_stops(runs) -> None:
    budgeted, plain = _without_perf(_rows(runs["dapo_budget"])), _without_perf(_rows(runs["dapo"]))
    assert len(plain) == STEPS + 1
    for b, p in zip(budgeted, plain, strict=False):  # the same training; only validation steps differ
        train_keys = [k for k in p if not k.startswith(names.VAL_PREFIX)]
        assert {k: b[k] for k in train_keys} == {k: p[k] for k in train_keys}


def test_grpo_with_the_budget_trains_and_validates_as_with_its_step_budget(runs) -> None:
    budgeted, plain = _rows(runs["grpo_budget"]), _rows(runs["grpo"])
    assert [r["step"] for r in budgeted] == [r["step"] for r in plain] == list(range(STEPS + 1))
    assert _validated(budgeted) == _validated(plain) == [0, 2, 4, 6, 8]
    assert [r[names.CUMULATIVE_GENERATED_SAMPLES] for r in budgeted] == [
        s * BATCH * G for s in range(STEPS + 1)
    ]
    assert {r[names.SAMPLE_BUDGET] for r in budgeted} == {STEPS * BATCH * G}
    added = (names.CUMULATIVE_GENERATED_SAMPLES, names.SAMPLE_BUDGET)
    strip = [{k: v for k, v in r.items() if k not in added} for r in budgeted]
    assert _without_perf(strip) == _without_perf(plain)
    a, b = np.load(runs["grpo_budget"] / "validation.npz"), np.load(runs["grpo"] / "validation.npz")
    assert np.array_equal(a["correct"], b["correct"]) and np.array_equal(a["steps"], b["steps"])


def test_without_the_budget_the_files_hold_what_they_held_before(runs) -> None:
    for name in ("grpo", "dapo"):
        rows = _rows(runs[name])
        assert not any(names.CUMULATIVE_GENERATED_SAMPLES in r or names.SAMPLE_BUDGET in r for r in rows)
        assert _validated(rows) == [0, 2, 4, 6, 8]
        assert sorted(np.load(runs[name] / "validation.npz").files) == ["correct", "n", "steps"]
        result = json.loads((runs[name] / "result.json").read_text())
        assert sorted(result) == ["cpu_s", "steps", "torch_threads", "wall_s"] and result["steps"] == STEPS


def _first_steps_reaching(per_step: list[int], counts: list[int]) -> list[int]:
    """Independently: the first step whose cumulative generated samples reach each count."""
    cumulative = np.cumsum(per_step).tolist()
    return [next(i + 1 for i, c in enumerate(cumulative) if c >= count) for count in counts]


def test_the_collection_reads_budgeted_dapo_at_the_other_runs_validation_steps(runs) -> None:
    """The report's reading: each validation stands at the step whose samples it first reached, so the
    curve, its AUC and the problem units are on the step-budget axis (0, 2, 4, 6, 8 here)."""
    from recipe import stats
    from recipe.study.common.collect import PlannedRun, auc_units, run_row, validation_curve
    from recipe.study.common.sample_axis import step_equivalents, units_on_step_axis

    rows = _rows(runs["dapo_budget"])
    per_step = [int(r[names.GENERATED_SAMPLES]) for r in rows[1:]]
    axis = list(range(TEST_FREQ, STEPS + 1, TEST_FREQ))
    first = _first_steps_reaching(per_step, [s * BATCH * G for s in axis])
    row, curve = run_row(
        PlannedRun("pilot", "fast", "dapo_filter", 0, 1e-4, runs["dapo_budget"]), ["add", "max"]
    )
    assert sorted(curve) == [0, *axis] and row["val_steps"] == "0 2 4 6 8"
    trained = validation_curve(rows)  # keyed by the steps the run trained
    for equivalent, step in zip(axis, first, strict=True):
        assert curve[equivalent] == trained[step]
    assert row["steps"] == len(per_step) < STEPS
    assert row["auc"] == pytest.approx(stats.auc([0, *axis], [curve[s]["all"] for s in [0, *axis]]))
    plain, _ = run_row(PlannedRun("pilot", "fast", "grpo", 0, 1e-4, runs["grpo"]), ["add", "max"])
    assert plain["val_steps"] == "0 2 4 6 8"  # a run budgeted in steps: as before
    data = np.load(runs["dapo_budget"] / "validation.npz")
    placed, placed_steps = units_on_step_axis(
        data["correct"], data["steps"], step_equivalents(runs["dapo_budget"])
    )
    index = [0, *[data["steps"].tolist().index(s) for s in first]]
    assert placed_steps.tolist() == [0, *axis] and np.array_equal(placed, data["correct"][index])
    assert auc_units(placed, placed_steps).shape == (data["correct"].shape[1],)  # equally spaced: accepted


def test_a_validation_that_reached_two_counts_stands_at_both(tmp_path: Path) -> None:
    from recipe.study.common.sample_axis import step_equivalents, units_on_step_axis

    correct = np.array([[0, 1], [1, 1], [2, 0], [3, 3]])
    steps = np.array([0, 2, 5, 7])  # step 5's validation reached two counts (steps 4 and 6 of the budget)
    axis = {"budget_steps": np.array([0, 2, 4, 6, 8]), "budget_index": np.array([0, 1, 2, 2, 3])}
    np.savez(tmp_path / "validation.npz", steps=steps, correct=correct, n=4, **axis)
    equivalents = step_equivalents(tmp_path)
    assert equivalents == {0: [0], 2: [2], 5: [4, 6], 7: [8]}
    placed, placed_steps = units_on_step_axis(correct, steps, equivalents)
    assert placed_steps.tolist() == [0, 2, 4, 6, 8] and placed.tolist() == [
        [0, 1],
        [1, 1],
        [2, 0],
        [2, 0],
        [3, 3],
    ]
    np.savez(tmp_path / "validation.npz", steps=steps, correct=correct, n=4)
    assert step_equivalents(tmp_path) is None  # a run budgeted in steps is read as it is
    (tmp_path / "validation.npz").unlink()
    assert step_equivalents(tmp_path) is None  # so is a real trainer's run (metrics.jsonl only)


def test_main_copo_refuses_the_fast_trainers_budget_before_ray_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """verl's trainer would ignore the key and train the step budget: it is refused, not ignored."""
    import ray

    import recipe.copo.main_copo as main_copo
    from recipe.copo.config_check import compose

    started: list[str] = []
    monkeypatch.setattr(ray, "init", lambda *a, **k: started.append("ray.init"))
    monkeypatch.setattr(
        "recipe.cpu_backend.activation.activate", lambda *a, **k: started.append("cpu_backend")
    )
    config = compose([BUDGET, "trainer.device=cpu"], config_name="copo_cpu")
    with pytest.raises(ValueError, match=r"fast\.\*: settings of the fast study trainer"):
        main_copo.run_copo(config)
    assert started == []
