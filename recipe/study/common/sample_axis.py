"""A fast run budgeted in generated samples (``+fast.budget_in_samples``, recipe/study/fast/budget.py) read on
the other methods' axis: docs/STUDY_PLAN.md, "Compute-matched DAPO, how it is read".

Such a run validates at the first steps whose cumulative generated samples reach the counts at which a
method of a fixed batch validates, and its ``validation.npz`` says where each validation stands on that
method's axis: ``budget_index[j]`` (a validation) stands at step ``budget_steps[j]`` (generated samples /
``train_batch_size x n``). The trainer writes them, so the rule lives in one place; here they only
re-key the curve and the problem counts, so that the run's curve, AUC and problem units are on the same
axis as every other run's. A validation that reached two counts at once (one DAPO step generating more
than ``test_freq`` batches) stands at both. Runs without the budget are left as they are (None).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

VALIDATION = "validation.npz"


def step_equivalents(run_dir: Path) -> dict[int, list[int]] | None:
    """validated step -> the step-budget steps it stands for (None: a run budgeted in steps, or a real
    trainer's run, which writes no ``validation.npz``)."""
    if not (run_dir / VALIDATION).is_file():
        return None
    data = np.load(run_dir / VALIDATION)
    if "budget_steps" not in data.files:
        return None
    steps = data["steps"].tolist()
    out: dict[int, list[int]] = {int(s): [] for s in steps}
    for at, index in zip(data["budget_steps"].tolist(), data["budget_index"].tolist(), strict=True):
        out[int(steps[index])].append(int(at))
    if any(not at for at in out.values()):
        raise ValueError(f"{run_dir}: a validation stands at no step of the budget: {out}")
    return out


def on_step_axis(
    curve: dict[int, dict[str, float]], equivalents: dict[int, list[int]] | None
) -> dict[int, dict[str, float]]:
    """A run's validation curve (step -> values) placed at its step equivalents (unchanged without any)."""
    if equivalents is None:
        return curve
    return {e: values for step, values in curve.items() for e in equivalents[step]}


def units_on_step_axis(
    correct: np.ndarray, steps: np.ndarray, equivalents: dict[int, list[int]] | None
) -> tuple[np.ndarray, np.ndarray]:
    """``validation.npz``'s (V, P) counts and (V,) steps placed at the step equivalents (unchanged without any)."""
    if equivalents is None:
        return correct, steps
    index = [(e, i) for i, s in enumerate(steps.tolist()) for e in equivalents[int(s)]]
    return correct[[i for _, i in index]], np.array([e for e, _ in index])
