"""Which methods each phase of a study plan runs (``StudyPlan.pilot_methods``, ``confirmatory_methods``):
testbed v4's plans pilot every method and confirm three; v2's and v3's keep the primary pair in the pilot
and every method in the confirmatory phase, exactly as before the fields existed."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from recipe.study.common import cli
from recipe.study.common.collect import PlannedRun
from recipe.study.common.plan import StudyPlan
from recipe.study.driver import SUMMARY
from recipe.study.testbed2.plan import PLAN as V2
from recipe.study.testbed3.plan import PLAN as V3
from recipe.study.testbed4 import plan as p


def _rates(plan: StudyPlan) -> dict[str, float]:
    return {m: 1e-4 * (i + 1) for i, m in enumerate(plan.methods)}


def _reference(methods: tuple[str, ...], seeds: tuple[int, ...], rates: dict[str, float]) -> list:
    """The loop reference: seed by seed, every method of the seed, at its rate."""
    out = []
    for seed in seeds:
        for method in methods:
            out.append((method, seed, rates[method]))
    return out


@pytest.mark.parametrize("plan", [V2, V3], ids=["v2", "v3"])
def test_v2_and_v3_pilot_the_primary_pair_and_confirm_every_method(plan: StudyPlan) -> None:
    rates = _rates(plan)
    pilot = cli.phase_plan(plan, "pilot", rates)
    assert pilot == _reference(plan.primary, plan.pilot_seeds, rates)
    confirmatory = cli.phase_plan(plan, "confirmatory", rates)
    assert confirmatory == _reference(plan.methods, plan.confirmatory_seeds, rates)
    real = cli.phase_plan(plan, "real", rates)
    assert real == _reference(plan.primary, plan.real_trainer_seeds, rates)
    assert plan.descriptive == () and not plan.extend_lr_grid


@pytest.mark.parametrize("regime", sorted(p.PLANS))
def test_testbed4_pilots_every_method_and_confirms_three(regime: str) -> None:
    plan = p.PLANS[regime]
    rates = _rates(plan)
    pilot = cli.phase_plan(plan, "pilot", rates)
    assert pilot == _reference(p.METHODS, (4001, 4002), rates) and len(pilot) == 10
    confirmatory = cli.phase_plan(plan, "confirmatory", rates)
    three = ("grpo", "copo_soft_with_zero", "copo_variant_nonpositive")
    assert confirmatory == _reference(three, tuple(range(400, 420)), rates) and len(confirmatory) == 60
    assert cli.phase_plan(plan, "real", rates) == _reference(plan.primary, (400, 401, 402), rates)
    assert plan.secondary == (
        ("copo_variant_nonpositive", "grpo"),
        ("copo_variant_nonpositive", "copo_soft_with_zero"),
    )
    assert plan.descriptive == (("copo_soft", "grpo"), ("dapo_filter", "grpo"))


def test_complete_seeds_asks_every_confirmatory_method_of_the_plan_and_no_other(tmp_path: Path) -> None:
    plan = p.PLANS["r40"]
    three = plan.confirmatory_methods
    runs = [PlannedRun("confirmatory", "fast", m, 400, 1e-4, tmp_path) for m in three]
    runs += [PlannedRun("confirmatory", "fast", m, 401, 1e-4, tmp_path) for m in three[:2]]
    assert {(r.seed, r.method) for r in cli.complete_seeds(plan, runs)} == {(400, m) for m in three}
    # v3 still asks all four of its methods
    v3 = [PlannedRun("confirmatory", "fast", m, 100, 1e-4, tmp_path) for m in three[:2]]
    assert cli.complete_seeds(V3, v3) == []


def test_planned_runs_find_each_phase_at_the_plans_methods(tmp_path: Path) -> None:
    plan = p.PLANS["r15"]
    rates = _rates(plan)
    for phase in ("pilot", "confirmatory"):
        for method in p.METHODS:  # every method finished a run of every seed of the phase
            for seed in cli.phase_methods_seeds(plan, phase)[1]:
                out = tmp_path / phase / f"{method}-s{seed}"
                out.mkdir(parents=True)
                (out / SUMMARY).write_text(json.dumps({"steps": 90}))
    found = cli.planned_runs(plan, tmp_path, rates)
    pilot = {(r.method, r.seed) for r in found if r.phase == "pilot"}
    confirmatory = {(r.method, r.seed) for r in found if r.phase == "confirmatory"}
    assert pilot == {(m, s) for m in p.METHODS for s in (4001, 4002)}
    assert confirmatory == {(m, s) for m in plan.confirmatory_methods for s in range(400, 420)}
    assert all(r.lr == rates[r.method] for r in found)


def test_a_plan_that_compares_a_method_it_does_not_run_is_refused() -> None:
    with pytest.raises(ValueError, match="copo_soft is compared but not confirmatory"):
        replace(p.PLANS["r15"], secondary=(("copo_soft", "grpo"),))
    with pytest.raises(ValueError, match="is described but not piloted"):
        replace(V3, descriptive=(("copo_soft", "grpo"),))
    with pytest.raises(ValueError, match="pilot method nope is not tuned"):
        replace(V3, pilot_methods=("nope",))
