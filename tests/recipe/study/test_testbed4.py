"""Testbed v4, the regime map: the knob's mixture, a regime's data, the workload, the plans and the budget."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from recipe.study.testbed import build as tb_build
from recipe.study.testbed.mixed import level_of
from recipe.study.testbed4 import budget, data, mixture
from recipe.study.testbed4 import plan as p

RATES = [0.004, 0.30, 0.05, 0.95]  # shaped like v3's levels at G = 8 (solved, learnable x2, unsolved)


# ----------------------------------------------------------------------------- the knob
@pytest.mark.parametrize("target", [0.15, 0.40, 0.65])
def test_the_mixture_reaches_the_target_with_every_level_present(target: float) -> None:
    w = mixture.max_entropy_mixture(RATES, target)
    assert math.isclose(sum(w), 1.0, abs_tol=1e-12) and min(w) > 0.01
    assert mixture.expected_share(w, RATES) == pytest.approx(target, abs=1e-9)


def _grid_max_entropy(rates: list[float], target: float, tol: float = 0.002) -> float:
    """The loop reference: the largest entropy of any mixture on a 1% grid of the simplex whose share is
    within ``tol`` of ``target`` (no tilt, no bisection)."""
    n = 100
    best = -1.0
    for a, b, c in itertools.product(range(n + 1), repeat=3):
        if a + b + c > n:
            continue
        w = [a / n, b / n, c / n, (n - a - b - c) / n]
        if abs(mixture.expected_share(w, rates) - target) <= tol:
            best = max(best, mixture.entropy(w))
    return best


@pytest.mark.parametrize("target", [0.15, 0.40, 0.65])
def test_the_mixture_is_the_maximum_entropy_one_against_a_grid_search(target: float) -> None:
    ours = mixture.entropy(mixture.max_entropy_mixture(RATES, target))
    # the grid's best lies within its resolution of the exact optimum, on either side
    assert ours == pytest.approx(_grid_max_entropy(RATES, target), abs=0.005)
    # and a mixture far from the tilt (all weight on two levels) reaching the target has less entropy
    two = [
        1 - (target - RATES[0]) / (RATES[3] - RATES[0]),
        0.0,
        0.0,
        (target - RATES[0]) / (RATES[3] - RATES[0]),
    ]
    assert mixture.expected_share(two, RATES) == pytest.approx(target) and mixture.entropy(two) < ours


def test_the_share_rises_with_the_knob_and_the_mixture_shifts_to_harder_levels() -> None:
    ws = [mixture.max_entropy_mixture(RATES, t) for t in (0.1, 0.3, 0.5, 0.7, 0.9)]
    hardest = [w[3] for w in ws]
    easiest = [w[0] for w in ws]
    assert hardest == sorted(hardest) and easiest == sorted(easiest, reverse=True)
    # equal rates give equal weights (the tilt of the uniform mixture keeps ties)
    w = mixture.max_entropy_mixture([0.1, 0.1, 0.5], 0.3)
    assert w[0] == pytest.approx(w[1]) and w[2] > w[0]


@pytest.mark.parametrize("target", [0.004, 0.95, 0.0, 1.0])
def test_a_target_outside_the_levels_rates_is_refused(target: float) -> None:
    with pytest.raises(ValueError, match="strictly between"):
        mixture.max_entropy_mixture(RATES, target)
    with pytest.raises(ValueError, match="shares"):
        mixture.max_entropy_mixture([0.2, 1.2], 0.5)


# ----------------------------------------------------------------------------- a regime's data
def test_level_counts_are_largest_remainders() -> None:
    for total, weights in ((384, [0.097, 0.174, 0.106, 0.623]), (10, [1, 1, 1]), (7, [0.5, 0.25, 0.25])):
        counts = data.level_counts(total, weights)
        exact = [total * w / sum(weights) for w in weights]
        assert sum(counts) == total
        assert all(math.floor(x) <= c <= math.floor(x) + 1 for c, x in zip(counts, exact, strict=True))
    assert data.level_counts(10, [0.55, 0.25, 0.2]) == [6, 2, 2]  # 5.5, 2.5, 2.0: remainders 0.5 (tie: first)


def _rows(per_level: int, split: str) -> list[dict[str, Any]]:
    rows = []
    for m in (2, 3):
        for i in range(per_level):
            a, b = 10 ** (m - 1) + i, 10 ** (m - 1) + 2 * i + 1
            rows.append(
                {
                    "data_source": "testbed3/max",
                    "prompt": [{"role": "user", "content": f"{a} {b}"}],
                    "reward_model": {"style": "rule", "ground_truth": str(max(a, b))},
                    "extra_info": {"split": split, "index": len(rows), "original_id": f"max:{a}|{b}"},
                }
            )
    return rows


def _spec(**kw: Any) -> data.RegimeData:
    args: dict[str, Any] = dict(
        base_key="base", source="testbed4_x/max", levels=("max2x2", "max3x3"), weights=(0.25, 0.75),
        val_problems=8, train_rows=20,
    )  # fmt: skip
    args.update(kw)
    return data.RegimeData(**args)


def test_regime_rows_follow_the_weights_relabel_and_repeat_evenly() -> None:
    spec = _spec()
    val = data.regime_rows(spec, _rows(6, "test"), spec.val_counts(), "test", repeat=False)
    ids = [r["extra_info"]["original_id"] for r in val]
    assert len(set(ids)) == len(ids) == 8  # distinct validation problems
    assert Counter(level_of(i) for i in ids) == {"max2x2": 2, "max3x3": 6}
    assert {r["data_source"] for r in val} == {"testbed4_x/max"}
    assert [r["extra_info"]["index"] for r in val] == list(range(8))
    train = data.regime_rows(spec, _rows(6, "train"), spec.train_counts(), "train", repeat=True)
    per_problem = Counter(r["extra_info"]["original_id"] for r in train)
    heavy = [c for i, c in per_problem.items() if level_of(i) == "max3x3"]  # 15 rows of its 6 problems
    assert sum(heavy) == 15 and len(heavy) == 6 and max(heavy) - min(heavy) <= 1
    with pytest.raises(ValueError, match="distinct problems"):
        data.regime_rows(spec, _rows(2, "test"), spec.val_counts(), "test", repeat=False)


def test_a_regime_folder_is_written_once_and_keyed_by_its_mixture(tmp_path: Path) -> None:
    base_root = tmp_path / "v3"
    (base_root / "model").mkdir(parents=True)
    (base_root / "data").mkdir()
    pd.DataFrame(_rows(6, "test")).to_parquet(base_root / "data" / "val.parquet")
    pd.DataFrame(_rows(6, "train")).to_parquet(base_root / "data" / "train.parquet")
    base = tb_build.Testbed(base_root, "base")
    spec = _spec()
    t = data.ensure_regime(spec, base, root=tmp_path / "regimes")
    assert t.model.resolve() == (base_root / "model").resolve() and (t.root / tb_build.MANIFEST).is_file()
    assert (
        len(pd.read_parquet(t.data / "val.parquet")) == 8
        and len(pd.read_parquet(t.data / "train.parquet")) == 20
    )
    stamp = (t.data / "train.parquet").stat().st_mtime_ns
    assert data.ensure_regime(spec, base, root=tmp_path / "regimes").root == t.root
    assert (t.data / "train.parquet").stat().st_mtime_ns == stamp  # cached, not rewritten
    assert _spec(weights=(0.5, 0.5)).key() != spec.key()
    with pytest.raises(ValueError, match="given testbed"):
        data.ensure_regime(_spec(base_key="other"), base, root=tmp_path / "regimes")


# ----------------------------------------------------------------------------- the workload and the plans
def test_the_regimes_workload_composes_at_the_papers_group_size() -> None:
    from recipe.copo.config_check import compose_and_validate
    from recipe.study.common.jobs import run_spec
    from recipe.study.fast.settings import FastSettings

    tb = tb_build.Testbed(Path("/nonexistent/regime"), "k")
    assert "copo_variant_nonpositive" in p.METHODS  # this project's variant (every method: test_testbed_runs)
    for method in ("grpo", "copo_variant_nonpositive"):
        spec = run_spec(tb, method, 400, 1e-4, config_name=p.CONFIG_NAME)
        config = compose_and_validate(spec.overrides(), config_name=p.CONFIG_NAME)
        s = FastSettings.from_config(config)
        assert s.n == p.G == 8 and s.batch_size >= 64 and s.steps == 90 and s.test_freq == 30
        assert config.data.train_files == str(tb.data / "train.parquet")
        variant = method == "copo_variant_nonpositive"
        assert (s.step is not None and s.step.copo.wrong_answer_global == "nonpositive") == variant


def _leaves(node: Any, path: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        return {k: v for key, child in node.items() for k, v in _leaves(child, f"{path}.{key}").items()}
    return {path: node}


def test_the_regimes_workload_is_v3s_with_only_the_group_size_batch_and_budget_changed() -> None:
    from omegaconf import OmegaConf

    from recipe.copo.config_check import compose

    mine = _leaves(OmegaConf.to_container(compose(config_name=p.CONFIG_NAME)))
    v3 = _leaves(OmegaConf.to_container(compose(config_name="testbed3_cpu")))
    changed = {k: (mine.get(k), v3.get(k)) for k in set(mine) | set(v3) if mine.get(k) != v3.get(k)}
    assert changed == {
        ".data.train_batch_size": (64, 16),
        ".actor_rollout_ref.rollout.n": (8, 4),
        ".actor_rollout_ref.actor.ppo_mini_batch_size": (64, 16),
        ".trainer.project_name": ("copo-testbed4", "copo-testbed3"),
        ".trainer.total_training_steps": (90, 150),  # the plan's accepted reduction ("Decided")
    }


def test_the_plans_keep_tuning_seeds_apart_and_state_twenty_confirmatory_seeds() -> None:
    assert [r.all_wrong for r in p.REGIMES] == [0.15, 0.40, 0.65]
    for name, plan in p.PLANS.items():
        assert plan.name == f"testbed4_{name}" and plan.data is not None
        assert len(plan.confirmatory_seeds) >= 20
        assert not set(plan.confirmatory_seeds) & set(plan.tuning_seeds + plan.pilot_seeds)
        assert plan.primary == ("copo_soft_with_zero", "grpo")
        assert set(m for pair in plan.secondary for m in pair) <= set(plan.methods)


def test_the_committed_regimes_follow_from_the_committed_rates() -> None:
    """regimes.csv is the knob applied to rates.csv (nothing hand-tuned)."""
    if not p.RATES_CSV.is_file():
        pytest.skip("rates.csv not measured yet")
    rates = p.measured_rates()
    regimes = pd.read_csv(p.DOCS / "regimes.csv")
    for regime in p.REGIMES:
        mine = regimes[regimes.regime == regime.name]
        spec = p.regime_data(regime, "-", rates)
        assert list(mine.weight) == pytest.approx(list(spec.weights), abs=1e-5)
        assert list(mine.val_count) == spec.val_counts() and list(mine.train_count) == spec.train_counts()
        assert mixture.expected_share(spec.weights, rates) == pytest.approx(regime.all_wrong, abs=1e-9)
        assert max(spec.val_counts()) <= 256  # v3 holds 256 validation problems per level


# ----------------------------------------------------------------------------- the budget
def _cost() -> pd.DataFrame:
    base = {"steps_measured": 3, "val_problems": 384, "planned_steps": 150, "test_freq": 30}
    base.update({"load1_start": 2.0, "load1_end": 2.5, "gflops": 50.0})
    return pd.DataFrame(
        [
            {"trainer": "single", "seeds_in_batch": 1, "step_cpu_s": 4.0, "val_cpu_s": 5.0, **base},
            {"trainer": "batched", "seeds_in_batch": 8, "step_cpu_s": 3.0, "val_cpu_s": 4.0, **base},
        ]
    )


def test_the_budget_prices_every_run_as_a_loop_over_the_design_does() -> None:
    cost = _cost()
    single, batched = 150 * 4.0 + 6 * 5.0, 150 * 3.0 + 6 * 4.0
    assert budget.DESIGNS[:-1] == budget.REDUCTIONS and budget.DESIGNS[-1] == budget.ACCEPTED
    for design in budget.DESIGNS:
        steps = round(150 * design.steps_factor)
        vals = len({*range(0, steps + 1, 30), steps})
        s1, s8 = steps * 4.0 + vals * 5.0, steps * 3.0 + vals * 4.0
        total_single = total_batched = 0.0
        tuned = [f"m{i}" for i in range(design.methods if design.tuned_methods is None else design.tuned_methods)]
        confirmed = [f"m{i}" for i in range(design.methods)]
        for _regime in range(design.regimes):
            for _method, _lr, _seed in itertools.product(tuned, range(design.rates), range(design.tuning_seeds)):
                total_single += s1
                total_batched += s1
            for method, _seed in itertools.product(confirmed, range(design.confirmatory_seeds)):
                batchable = confirmed.index(method) < design.batchable_methods
                total_single += s1
                total_batched += s8 if batchable else s1
            for _run in range(design.pilot_runs):
                total_single += s1
                total_batched += s1
        assert budget.study_cpu_hours(cost, design, False) == pytest.approx(total_single / 3600)
        assert budget.study_cpu_hours(cost, design, True) == pytest.approx(total_batched / 3600)
    assert budget.run_cpu_s(cost.iloc[0]) == single and budget.run_cpu_s(cost.iloc[1]) == batched
    # the accepted design (docs/STUDY_PLAN.md, "Decided"), per regime: 5 methods x 3 rates tuned, 5 methods x 2
    # pilot seeds, 3 methods x 20 confirmatory seeds, 90 steps with validations at 0, 30, 60, 90
    accepted = budget.ACCEPTED
    assert accepted.runs() == {"tuning": 3 * 15, "pilot": 3 * 10, "confirmatory": 3 * 60}
    assert budget.run_cpu_s(cost.iloc[0], accepted.steps_factor) == 90 * 4.0 + 4 * 5.0


# ----------------------------------------------------------------------------- the docs
def test_the_docs_testbed4_blocks_equal_their_derivation_from_the_csvs() -> None:
    from recipe.study.testbed4 import report
    from tests.recipe.study.doc_blocks import assert_blocks_derived, doc_blocks

    derived = report.report(p.DOCS)
    blocks = doc_blocks("testbed4/")
    assert (
        {name.split("/", 1)[1] for _, name in blocks}
        >= set(derived)
        >= {"rates", "regimes", "cost", "budget"}
    )
    assert_blocks_derived(blocks, derived)  # a phase not run yet: its block must state nothing


def test_the_probe_reads_a_runs_validation_and_judges_the_five_point_gain(tmp_path: Path) -> None:
    import json

    import numpy as np

    from recipe.study.testbed4 import probe

    plan = p.PLANS["r15"]
    rows = []
    for regime, final in (("r15", 3), ("r65", 1)):  # correct of 4 per problem at the last step
        run = tmp_path / regime
        run.mkdir()
        correct = np.array([[1, 1, 2, 2], [final, final, 2, 2]], dtype=np.int16)  # 2 steps x 4 problems
        np.savez_compressed(run / "validation.npz", steps=np.array([0, 150]), correct=correct, n=4)
        (run / "result.json").write_text(json.dumps({"cpu_s": 12.0}))
        rows += probe.curve_rows(regime, plan, run)
    frame = pd.DataFrame(rows)
    assert list(frame.accuracy) == pytest.approx([6 / 16, 10 / 16, 6 / 16, 6 / 16])
    assert set(frame.lr) == {plan.lr_grid[1]} and set(frame.seed) == {plan.tuning_seeds[0]}
    table = probe.probe_markdown(frame)
    assert "| r15 | 37.5 | 62.5 | +25.0 | yes | +0.0 | 12 |" in table  # by step 100: step 0 only here
    assert "| r65 | 37.5 | 37.5 | +0.0 | no | +0.0 | 12 |" in table
    assert "| r15 | 37.5 | 62.5 | +25.0 | yes | +25.0 | 12 |" in probe.probe_markdown(frame, short_budget=150)


def test_the_machine_log_names_the_commit_a_phase_ran_under(tmp_path: Path) -> None:
    import re

    from recipe.study.machine import head_commit
    from tests.paths import REPO

    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout (e.g. an exported tree)")
    assert re.fullmatch(r"[0-9a-f]{40}", head_commit() or "")
    assert head_commit(tmp_path) is None  # no checkout there


def test_adding_the_variant_leaves_the_earlier_studies_default_methods_alone() -> None:
    from recipe.study import smollm2
    from recipe.study.methods import DEFAULT_METHODS, METHODS
    from recipe.study.testbed import cli as v1_cli

    assert "copo_variant_nonpositive" in METHODS and "copo_variant_nonpositive" not in DEFAULT_METHODS
    assert set(DEFAULT_METHODS) < set(METHODS)
    smol = smollm2.build_parser().parse_args(["run", "--model", "/m", "--data", "/d"])
    assert smol.methods == list(DEFAULT_METHODS)
    v1 = v1_cli.build_parser().parse_args(["run"])
    assert v1.methods == list(DEFAULT_METHODS)


def test_a_regimes_shared_phase_runs_on_its_own_data_folder(tmp_path: Path, capsys: Any) -> None:
    """``study_testbed4.py r40 tune --dry-run``: the shared tuning phase of the r40 plan, every method at
    every rate of the grid, each run reading r40's data (not v3's) with the regimes' workload."""
    from recipe.study.testbed4 import cli

    if not p.RATES_CSV.is_file():
        pytest.skip("rates.csv not measured yet")
    assert cli.main(["r40", "tune", "--dry-run", "--runs", str(tmp_path)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[study] (")]
    assert len(lines) == len(p.METHODS) * len(p.PLANS["r40"].lr_grid) == 15
    key = p.regime_data(p.REGIMES[1], p.TESTBED_V3.key()).key()
    for line in lines:
        assert "--config-name regimes_cpu" in line and f"/testbed4/{key}/data/train.parquet" in line
        assert str(tmp_path / "tuning") in line


def test_the_plans_criteria_are_the_amendments() -> None:
    for plan in p.PLANS.values():
        assert (plan.gain_target, plan.gain_floor) == (0.05, 0.0)
        assert (plan.zero_variance_min, plan.all_correct_min, plan.all_wrong_min) == (0.0, 0.0, 0.0)
    census = pd.read_csv(p.CENSUS_CSV) if p.CENSUS_CSV.is_file() else None
    if census is not None:  # the committed census meets the knob's criterion: within 5 points of the target
        for regime in p.REGIMES:
            share = census[(census.regime == regime.name) & (census.dataset == "all")].frac_all_wrong.iloc[0]
            assert abs(share - regime.all_wrong) <= 0.05, regime


def test_only_dapo_runs_are_budgeted_in_generated_samples(tmp_path: Path) -> None:
    """Compute-matched DAPO (the amendment): the plans' dapo_filter runs carry the fast trainer's sample
    budget and finish by it (its value here 46,080 = 90 x 64 x 8; the rule: tests/recipe/study/test_fast_budget.py);
    every other method's runs are as before."""
    from recipe.study.common import cli
    from recipe.study.common.jobs import SAMPLE_BUDGET_OVERRIDE
    from recipe.study.testbed.build import Testbed

    plan = p.PLANS["r40"]
    assert plan.sample_matched == ("dapo_filter",)
    todo = [(m, 400, 1e-4) for m in plan.methods]
    jobs = cli.fast_jobs(plan, Testbed(tmp_path, "key"), todo, tmp_path / "runs")
    for job, (method, _, _) in zip(jobs, todo, strict=True):
        matched = method == "dapo_filter"
        assert (SAMPLE_BUDGET_OVERRIDE in job.command) == matched
        assert (SAMPLE_BUDGET_OVERRIDE in job.fingerprint["overrides"]) == matched
        assert job.by_samples == matched and job.steps == 90
