"""Testbed v4's figures, from its committed CSVs (docs/study_cpu/testbed4/): the docs' ``testbed4/*`` blocks.

- ``rates``: per level of v3's validation problems, groups of G at step 0 (``rates.csv``);
- ``regimes``: per regime, the knob, the mixture it gives, the predicted and the measured step-0 shares
  of all-wrong, all-correct and mixed groups on the regime's training rows (``regimes.csv``, ``census.csv``);
- ``cost``: CPU seconds per training step and per validation at the regimes' workload (``cost.csv``),
  and what the study costs from them (``budget``);
- ``probe``: GRPO's gain per regime on the tuning seed (``probe.csv``; tuning data, not a result);
- ``regime_map``, ``when_to_use``: the comparisons across the regimes, from each regime's ``<regime>/runs.csv``
  (``regime_map``; once every regime's confirmatory runs are in).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from recipe.study.census import CENSUS_COLUMNS as SHARED_CENSUS_COLUMNS
from recipe.study.common.reporting import pct, read
from recipe.study.testbed4 import budget, probe, regime_map
from recipe.study.testbed4 import plan as p

REGIME_COLUMNS = ["regime", "target", "level", "weight", "rate", "val_count", "train_count"]
CENSUS_COLUMNS = ["regime", *SHARED_CENSUS_COLUMNS]  # the shared census's columns, per regime


def rates_markdown(rates: pd.DataFrame) -> str:
    lines = [
        "| level | problems | accuracy at T = 1 (%) | all correct (%) | all wrong (%) | mixed (%) |",
        "|---|---|---|---|---|---|",
    ]
    for _, r in rates.iterrows():
        lines.append(
            f"| {r.dataset} | {r.groups} | {pct(r.accuracy)} | {pct(r.frac_all_correct)} | "
            f"{pct(r.frac_all_wrong)} | {pct(r.frac_mixed)} |"
        )
    g = int(rates.k.iloc[0])
    lines += ["", f"Testbed v3's policy at step 0, G = {g} samples at T = 1 of every v3 validation problem."]
    return "\n".join(lines) + "\n"


def regimes_markdown(regimes: pd.DataFrame, census: pd.DataFrame | None) -> str:
    levels = list(dict.fromkeys(regimes.level))
    head = " | ".join(f"{lv} (%)" for lv in levels)
    lines = [
        f"| regime | target all wrong (%) | {head} | predicted all wrong (%) | "
        "measured: all wrong (%) | all correct (%) | mixed (%) | groups |",
        "|---|---|" + "---|" * len(levels) + "---|---|---|---|---|",
    ]
    for name, mine in regimes.groupby("regime", sort=False):
        weights = " | ".join(pct(w) for w in mine.weight)
        predicted = float((mine.weight * mine.rate).sum())
        row = f"| {name} | {pct(mine.target.iloc[0])} | {weights} | {pct(predicted)} | "
        if census is not None and name in set(census.regime):
            c = census[(census.regime == name) & (census.dataset == "all")].iloc[0]
            row += f"{pct(c.frac_all_wrong)} | {pct(c.frac_all_correct)} | {pct(c.frac_mixed)} | {c.groups} |"
        else:
            row += "not measured | | | |"
        lines.append(row)
    first = regimes[regimes.regime == regimes.regime.iloc[0]]
    lines += [
        "",
        f"Level shares of each regime's validation ({int(first.val_count.sum())} problems) and training "
        f"({int(first.train_count.sum())} rows) sets. Predicted: the levels' rates above, weighted.",
    ]
    if census is not None:
        lines[-1] += (
            f" Measured: step 0, G = {int(census.k.iloc[0])} samples at T = 1 of every training row of the "
            "regime (other random numbers than the rates')."
        )
    return "\n".join(lines) + "\n"


def report(docs: Path) -> dict[str, str]:
    """``testbed4/*`` fragments from the CSVs in ``docs`` (missing CSVs: their fragments are left out)."""
    out: dict[str, str] = {}
    rates, regimes, census, cost, probe_ = (
        read(docs, n) for n in ("rates.csv", "regimes.csv", "census.csv", "cost.csv", "probe.csv")
    )
    if rates is not None:
        out["rates"] = rates_markdown(rates)
    if regimes is not None:
        out["regimes"] = regimes_markdown(regimes, census)
    if cost is not None:
        out["cost"] = budget.cost_markdown(cost)
        out["budget"] = budget.budget_markdown(cost)
        out["budget_reading"] = budget.reading_markdown(cost)
    if probe_ is not None:
        out["probe"] = probe.probe_markdown(probe_)
    targets = {r.name: r.all_wrong for r in p.REGIMES}
    out.update(regime_map.fragments(p.PLANS, targets, docs))  # once every regime's confirmatory runs are in
    return out
