"""A testbed study's pre-registered design as one frozen object (``StudyPlan``).

The collection, the report, the plots and the command line take the plan as an argument, so a study
(testbed v2, v3, ...) is a plan instance plus the little that is its own (its census, its text). The
plan states what docs/STUDY_PLAN.md states in prose: the testbed, the methods and their comparisons,
the seeds of each phase, the learning-rate grid and the endpoint's parameters. The learning rates the
tuning chose live in the plan's ``learning_rates_file``, written by the ``pilot-summarize`` phase and
committed before the confirmatory runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from recipe.files import REPO_ROOT
from recipe.study.driver import NotReady
from recipe.study.testbed.build import ContinuedSpec, Testbed, TestbedSpec

STUDY_PLAN_DOC = REPO_ROOT / "docs" / "STUDY_PLAN.md"


@dataclass(frozen=True)
class StudyPlan:
    """One pre-registered testbed study (every field is read by the runs, the tuning or the analysis)."""

    name: str  # "testbed2": the docs' block prefix, the rows' data_source prefix, folders and figure names
    testbed: TestbedSpec | ContinuedSpec
    config_name: str  # the workload yaml in recipe/copo/config/
    tasks: tuple[str, ...]  # the testbed's tasks (the rows' data_source after ``name/``)
    methods: tuple[str, ...]  # every method the study tunes
    baseline: str
    primary: tuple[str, str]  # (treatment, control)
    secondary: tuple[tuple[str, str], ...]  # the Holm-corrected family, each (treatment, control)
    tuning_seeds: tuple[int, ...]
    pilot_seeds: tuple[int, ...]  # with the tuning seeds at the chosen rates: the pilot of the power estimate
    confirmatory_seeds: tuple[int, ...]
    real_trainer_seeds: tuple[int, ...]  # the confirmation through verl's trainer: confirmatory seeds
    lr_grid: tuple[float, ...]
    learning_rates_file: Path
    rate_rule: str  # how the tuning chooses a rate (written beside the rates)
    alpha: float = 0.05
    power: float = 0.80
    block_steps: int = 10  # the regime criteria (zero-variance, all-correct, all-wrong shares) per block
    gain_target: float = 0.10  # testbed criterion: GRPO's final - start validation accuracy, mean over seeds
    gain_floor: float = 0.05  # ... with its 95% interval above this
    zero_variance_min: float = 0.30
    all_correct_min: float = 0.10
    all_wrong_min: float = 0.10
    power_seeds: tuple[int, ...] = ()  # seed counts the power is also stated for
    # Time-based stop: no confirmatory run starts after this (ISO time); the analysis takes the seeds
    # whose runs of every method finished.
    confirmatory_deadline_utc: str | None = None
    confirmatory_stopped: bool = False  # the plan's confirmatory phase was stopped: no run may start
    study_doc: Path = STUDY_PLAN_DOC  # the prose plan that must be committed before confirmatory runs
    # The runs' data as a view of the built testbed (testbed v4: one regime's level mixture of v3's
    # problems, its own folder whose model is the testbed's); (testbed, dry_run) -> the folder the runs
    # read. None: the testbed's own data.
    data: Callable[[Testbed, bool], Testbed] | None = None
    # Methods whose fast runs are budgeted in generated samples, not steps (recipe/study/fast/budget.py):
    # testbed v4's compute-matched DAPO. Empty: every run trains the workload's steps (v2, v3).
    sample_matched: tuple[str, ...] = ()
    # The methods each phase runs. Empty: the pilot runs the primary pair and the confirmatory phase every
    # method (v2, v3). Testbed v4 pilots every method and confirms three (docs/STUDY_PLAN.md, "Decided").
    pilot_methods: tuple[str, ...] = ()
    confirmatory_methods: tuple[str, ...] = ()
    # Comparisons stated on the tuning and pilot seeds without a test (testbed v4: the methods that are
    # tuned and piloted but not confirmatory, each against the baseline), each (treatment, control).
    descriptive: tuple[tuple[str, str], ...] = ()
    # The learning-rate rule extends the grid by a factor of 2 beyond an edge the chosen rate sits on,
    # until it lies inside (testbed v4); False: the grid as it is (v2, v3).
    extend_lr_grid: bool = False
    docs_folder: Path | None = None  # the committed CSVs' folder; None: docs/study_cpu/<name>

    def __post_init__(self) -> None:
        # frozen: the defaults of the phase method sets are filled in once, here
        if not self.pilot_methods:
            object.__setattr__(self, "pilot_methods", tuple(self.primary))
        if not self.confirmatory_methods:
            object.__setattr__(self, "confirmatory_methods", tuple(self.methods))
        problems = []
        for label, group in (("pilot", self.pilot_methods), ("confirmatory", self.confirmatory_methods)):
            problems += [f"{label} method {m} is not tuned" for m in group if m not in self.methods]
        for treatment, control in (self.primary, *self.secondary):
            problems += [f"{m} is compared but not confirmatory" for m in (treatment, control)
                         if m not in self.confirmatory_methods]  # fmt: skip
        for treatment, control in self.descriptive:
            problems += [f"{m} is described but not piloted" for m in (treatment, control)
                         if m not in self.pilot_methods]  # fmt: skip
        if problems:
            raise ValueError(f"plan {self.name}: " + "; ".join(problems))

    @property
    def real_trainer_methods(self) -> tuple[str, str]:
        return self.primary

    @property
    def source_prefix(self) -> str:
        """The rows' ``data_source`` before the task name (``testbed2/``)."""
        return f"{self.name}/"

    @property
    def doc_prefix(self) -> str:
        """The docs' generated blocks of this study are named ``<doc_prefix><fragment>``."""
        return f"{self.name}/"

    @property
    def runs_dir(self) -> Path:
        return REPO_ROOT / "runs" / f"study_{self.name}"

    @property
    def docs_dir(self) -> Path:
        return REPO_ROOT / "docs" / "study_cpu" / self.name if self.docs_folder is None else self.docs_folder

    def learning_rates(self) -> dict[str, float]:
        """The tuned learning rate of every method (raises when the tuning has not been summarised)."""
        if not self.learning_rates_file.is_file():
            raise NotReady(
                f"{self.learning_rates_file} is missing: run study {self.name}'s `tune` and `pilot-summarize` "
                "phases first (docs/STUDY_PLAN.md, tuning)"
            )
        rates = json.loads(self.learning_rates_file.read_text())["learning_rates"]
        missing = [m for m in self.methods if m not in rates]
        if missing:
            raise ValueError(f"{self.learning_rates_file}: no learning rate for {missing}")
        return {m: float(rates[m]) for m in self.methods}
