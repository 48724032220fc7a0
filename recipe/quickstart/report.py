"""What the quickstart prints: one line per training step, and validation before against after.

The before/after comparison pairs the prompts of verl's validation dumps
(``trainer.validation_data_dir``: ``0.jsonl`` before training, ``<steps>.jsonl`` after), with a
percentile-bootstrap interval of the mean difference and an exact McNemar test (``recipe.stats``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from recipe.stats import bootstrap_ci, mcnemar_p
from recipe.tracking import names

SCORE_KEY = names.SCORE_MEAN
REWARD_KEY = names.REWARD_MEAN
STEP_TIME_KEY = names.STEP_TIME
# COPO's consistency entropy of the groups' answers (bits); verl's token entropy for other algos.
ENTROPY_KEYS = ((names.COPO_ENTROPY_MEAN, "answer-entropy"), (names.TOKEN_ENTROPY, "token-entropy"))
ZERO_VAR_KEYS = (names.SIGNAL_FRAC_ZERO_VARIANCE,)


def _first(row: dict[str, Any], keys: tuple[str, ...]) -> float | None:
    for key in keys:
        if key in row and row[key] is not None:
            return float(row[key])
    return None


def zero_variance_fraction(row: dict[str, Any]) -> float | None:
    """Share of groups whose rewards are all equal (logged by recipe/copo/trainer.py for every estimator)."""
    return _first(row, ZERO_VAR_KEYS)


def fmt(value: float | None, spec: str = ".3f") -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def progress_line(row: dict[str, Any], total: int, step_times: list[float], label: str = "quickstart") -> str:
    """One progress line; the ETA is the mean step time so far times the steps left."""
    step = int(row["step"])
    step_time = row.get(STEP_TIME_KEY)
    eta = sum(step_times) / len(step_times) * (total - step) if step_times else None
    entropy_name, entropy = next(
        ((name, row[key]) for key, name in ENTROPY_KEYS if row.get(key) is not None), ("entropy", None)
    )
    return (
        f"[{label}] step {step}/{total}  reward {fmt(row.get(REWARD_KEY, row.get(SCORE_KEY)))}"
        f"  acc {fmt(row.get(SCORE_KEY))}  zero-var {fmt(zero_variance_fraction(row), '.2f')}"
        f"  {entropy_name} {fmt(entropy)}  step {fmt(step_time, '.1f')}s  ETA {fmt(eta, '.0f')}s"
    )


def validation_verdict(
    before: float | None, after: float | None, ci: tuple[float, float] | None = None
) -> str:
    """How the printed summary reads the validation accuracy before and after training.

    ``ci`` is the 95% interval of (after - before) over the same prompts; "improved" needs it to
    exclude 0, else a higher accuracy is reported as within noise.
    """
    if before is None:
        return "no validation before training in this run (trainer.val_before_train=false)"
    if after is None:
        return (
            "no validation after training (the run stopped early, or trainer.test_freq skips the last step)"
        )
    if after > before:
        if ci is None:
            return "higher (no per-prompt scores to tell it from noise)"
        return "improved" if ci[0] > 0 else "higher, but within noise (the 95% CI includes 0)"
    return "did not improve (short runs are noisy; try --steps 20)"


def read_val_scores(path: Path) -> dict[tuple[str, int], float]:
    """Per-prompt greedy validation scores from verl's dump (``trainer.validation_data_dir``/<step>.jsonl).

    Keyed by (prompt text, occurrence): a validation set may hold the same problem twice.
    """
    scores: dict[tuple[str, int], float] = {}
    seen: dict[str, int] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            text = str(row["input"])
            seen[text] = seen.get(text, 0) + 1
            scores[(text, seen[text])] = float(row["score"])
    return scores


def validation_comparison(val_dir: Path, steps: int) -> dict[str, Any] | None:
    """Paired before/after comparison over the prompts validated at step 0 and at step ``steps``."""
    first, last = val_dir / "0.jsonl", val_dir / f"{steps}.jsonl"
    if not (first.is_file() and last.is_file()):
        return None
    before, after = read_val_scores(first), read_val_scores(last)
    prompts = sorted(set(before) & set(after))
    if not prompts:
        return None
    b = [before[p] for p in prompts]
    a = [after[p] for p in prompts]
    interval = bootstrap_ci([y - x for x, y in zip(b, a, strict=True)])
    improved = sum(1 for x, y in zip(b, a, strict=True) if y > x)
    worsened = sum(1 for x, y in zip(b, a, strict=True) if y < x)
    return {
        "prompts": len(prompts),
        "before": sum(b) / len(b),
        "after": sum(a) / len(a),
        "diff": interval.mean,
        "ci95": [interval.low, interval.high],
        "improved": improved,
        "worsened": worsened,
        "mcnemar_p": mcnemar_p(improved, worsened),
    }
