"""The testbed studies' report helpers: number formats, the paired comparison record, per-problem AUC
and reading a CSV of the docs folder (shared by the v2 and v3 reports).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from recipe import stats as paired


def pct(x: float, signed: bool = False) -> str:
    """A share as percentage points with one decimal (``+1.2`` when signed)."""
    return "n/a" if x is None or not math.isfinite(x) else (f"{100 * x:+.1f}" if signed else f"{100 * x:.1f}")


def interval(mean: float, low: float, high: float, signed: bool = True) -> str:
    return f"{pct(mean, signed)} [{pct(low, signed)}, {pct(high, signed)}]"


def pvalue(p: float) -> str:
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def p_is(p: float, name: str = "p") -> str:
    """``p = 0.041`` or ``p < 0.001`` (prose; tables use :func:`pvalue`)."""
    return f"{name} < 0.001" if p < 0.001 else f"{name} = {p:.3f}"


@dataclass
class Comparison:
    treatment: str
    control: str
    endpoint: str
    test: paired.PairedT
    holm_p: float | None = None
    boot: tuple[float, float, float] | None = None

    @property
    def name(self) -> str:
        return f"{self.treatment} - {self.control}"


def problem_auc(problems: pd.DataFrame, meta: dict[str, int], run: str) -> np.ndarray:
    """(P,) per-problem AUC of ``run`` from its integer units."""
    return problems[run].to_numpy(dtype=np.float64) / (2 * meta["k"] * (meta["validations"] - 1))


def read(docs: Path, name: str) -> pd.DataFrame | None:
    path = docs / name
    return pd.read_csv(path) if path.is_file() else None
