"""The regime map (testbed v4; docs/STUDY_PLAN.md, "Amendment: regime map (issue 37)"): one plan per regime.

Testbed v4 is testbed v3's policy (``TESTBED_V3``, cached) on v3's held-out max problems, re-weighted
by level (``data``). One knob sets where the headroom sits: a regime's **target share of all-wrong
groups at step 0** (G = 8, T = 1), turned into a level mixture by the maximum-entropy rule
(``mixture``) from the per-level all-wrong rates measured on v3's validation problems
(``docs/study_cpu/testbed4/rates.csv``, ``study_testbed4.py rates``). The training and validation
problems of a regime follow its mixture. Each regime is a ``StudyPlan`` (``PLANS``) whose ``data`` is
that regime's folder; the workload is ``recipe/copo/config/regimes_cpu.yaml`` (G = 8, 64 prompts a step).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path

from recipe.files import REPO_ROOT
from recipe.study.common.plan import StudyPlan
from recipe.study.common.testbeds import TESTBED_V3
from recipe.study.testbed.build import Testbed
from recipe.study.testbed4.data import RegimeData, ensure_regime
from recipe.study.testbed4.mixture import max_entropy_mixture


@dataclass(frozen=True)
class Regime:
    """One regime: its name and the knob, the target share of all-wrong groups at step 0 (G = 8)."""

    name: str
    all_wrong: float


REGIMES = (Regime("r15", 0.15), Regime("r40", 0.40), Regime("r65", 0.65))
LEVELS = ("max2x2", "max3x3", "max4x4", "max5x5")  # testbed v3's levels, easiest first
CONFIG_NAME = "regimes_cpu"
G = 8  # the group size the knob is measured at (= the workload's actor_rollout_ref.rollout.n)
VAL_PROBLEMS = 384  # per regime, distinct (v3 holds 256 per level: fits any weight up to 2/3)
TRAIN_ROWS = 1024  # per regime: 16 steps of 64 prompts per epoch (a heavy level's problems repeat)
RATES_SEED, CENSUS_SEED = 0, 1  # the rates and the check draw different random numbers
DOCS = REPO_ROOT / "docs" / "study_cpu" / "testbed4"
RATES_CSV = DOCS / "rates.csv"  # per level of v3's validation problems: groups of G at step 0
CENSUS_CSV = DOCS / "census.csv"  # per regime's training rows: the share the knob reaches
COST_CSV = DOCS / "cost.csv"  # CPU seconds per training step and per validation (GRPO, this machine)
METHODS = ("grpo", "copo_soft_with_zero", "copo_soft", "dapo_filter", "copo_variant_nonpositive")
CONFIRMATORY_METHODS = ("grpo", "copo_soft_with_zero", "copo_variant_nonpositive")


def measured_rates(path: Path = RATES_CSV) -> list[float]:
    """The all-wrong rate at G of each of ``LEVELS`` (from the committed ``rates.csv``)."""
    import pandas as pd

    frame = pd.read_csv(path).set_index("dataset")
    missing = [level for level in LEVELS if level not in frame.index]
    if missing:
        raise ValueError(f"{path}: no rate for {missing}; run `study_testbed4.py rates`")
    return [float(frame.loc[level, "frac_all_wrong"]) for level in LEVELS]


def regime_weights(regime: Regime, rates: list[float] | None = None) -> list[float]:
    """The regime's level mixture (``LEVELS`` order): the knob through the maximum-entropy rule."""
    return max_entropy_mixture(measured_rates() if rates is None else rates, regime.all_wrong)


def plan_name(regime: Regime) -> str:
    return f"testbed4_{regime.name}"


def regime_data(regime: Regime, base_key: str, rates: list[float] | None = None) -> RegimeData:
    return RegimeData(
        base_key=base_key,
        source=f"{plan_name(regime)}/max",
        levels=LEVELS,
        weights=tuple(regime_weights(regime, rates)),
        val_problems=VAL_PROBLEMS,
        train_rows=TRAIN_ROWS,
    )


def regime_testbed(regime: Regime, base: Testbed, dry_run: bool = False) -> Testbed:
    """The regime's data folder on the built v3 testbed (located only, on a dry run)."""
    from recipe.cache import cache_root

    spec = regime_data(regime, base.key)
    if dry_run:
        return Testbed(cache_root() / "testbed4" / spec.key(), spec.key())
    return ensure_regime(spec, base)


def make_plan(regime: Regime) -> StudyPlan:
    return StudyPlan(
        name=plan_name(regime),
        testbed=TESTBED_V3,
        data=partial(regime_testbed, regime),
        config_name=CONFIG_NAME,
        tasks=("max",),
        methods=METHODS,
        baseline="grpo",
        primary=("copo_soft_with_zero", "grpo"),  # the paper's setting against GRPO, in each regime
        # the accepted reduction (docs/STUDY_PLAN.md, "Decided"): three methods confirmatory; Holm within
        # each regime over this project's variant against GRPO and against the paper's setting
        confirmatory_methods=CONFIRMATORY_METHODS,
        secondary=(
            ("copo_variant_nonpositive", "grpo"),
            ("copo_variant_nonpositive", "copo_soft_with_zero"),
        ),
        # every method is tuned and piloted; soft and compute-matched DAPO are described on the tuning and
        # pilot seeds against GRPO, without a test
        pilot_methods=METHODS,
        descriptive=(("copo_soft", "grpo"), ("dapo_filter", "grpo")),
        # compute-matched DAPO (the amendment): its runs stop and validate at the other methods' generated
        # samples (46,080; 0, 15,360, 30,720, 46,080), not their steps
        sample_matched=("dapo_filter",),
        tuning_seeds=(4000,),  # disjoint from every confirmatory seed
        pilot_seeds=(4001, 4002),
        confirmatory_seeds=tuple(range(400, 420)),  # 20 seeds, never used before
        real_trainer_seeds=(400, 401, 402),  # item 6: >= 3 seeds, best and worst regime
        lr_grid=(1e-4, 2e-4, 4e-4),
        extend_lr_grid=True,  # per method and regime, beyond an edge the chosen rate sits on (x 2)
        learning_rates_file=Path(__file__).with_name(f"learning_rates_{regime.name}.json"),
        docs_folder=DOCS / regime.name,  # beside the testbed's own CSVs
        rate_rule="highest mean AUC over the tuning seeds (ties: the smaller rate); a rate on the grid's "
        "edge extends the grid by a factor of 2 beyond it for that method and regime",
        power_seeds=(20, 10),
        # testbed criterion (the amendment): GRPO gains >= 5 points, its 95% interval above 0
        gain_target=0.05,
        gain_floor=0.0,
        # no block criteria: the knob sets the step-0 all-wrong share (the census checks it, within 5
        # points of the target) and the shares over training are reported, not required
        zero_variance_min=0.0,
        all_correct_min=0.0,
        all_wrong_min=0.0,
    )


PLANS = {r.name: make_plan(r) for r in REGIMES}
