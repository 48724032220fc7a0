"""Finished fast runs on disk for the study tests: what the collection reads of a run folder (the
driver's ``summary.json``, ``metrics.jsonl`` with validation and training rows, ``result.json`` and,
when asked, ``validation.npz``), with a validation curve the test chooses."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from recipe.study.driver import SUMMARY

STEPS = (0, 30, 60, 90)


def write_run(
    path: Path,
    source: str,
    curve: Sequence[float],
    steps: Sequence[int] = STEPS,
    correct: np.ndarray | None = None,
    cpu_s: float = 12.0,
) -> None:
    """A finished run validated at ``steps`` with mean@k ``curve`` on task ``source`` (``testbed4_r15/max``);
    ``correct``: the (V, P) counts of ``validation.npz`` (out of 4), written when given."""
    path.mkdir(parents=True)
    at = dict(zip(steps, curve, strict=True))
    rows = []
    for step in range(int(steps[-1]) + 1):
        row: dict = {"step": step}
        if step in at:
            row[f"val-core/{source}/acc/mean@4"] = float(at[step])
        if step > 0:
            row.update({"signal/num_responses": 512.0, "signal/frac_nonzero_adv": 0.5, "perf/step_cpu_s": 0.5})
            for task in (source, "all"):
                p = f"groups/{task}/"
                row.update(
                    {p + "count": 64.0, p + "all_correct": 0.1, p + "all_wrong": 0.4, p + "zero_variance": 0.5,
                     p + "accuracy": 0.4}
                )  # fmt: skip
        rows.append(row)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "result.json").write_text(json.dumps({"cpu_s": cpu_s, "wall_s": cpu_s + 1}))
    (path / SUMMARY).write_text(json.dumps({"wall_s": cpu_s + 2, "steps": int(steps[-1])}))
    if correct is not None:
        np.savez(path / "validation.npz", steps=np.asarray(steps), correct=correct.astype(np.int16), n=4)


def auc_of(curve: Sequence[float], steps: Sequence[int] = STEPS) -> float:
    """The loop reference of the endpoint: trapezoids over the validation steps, divided by the last step."""
    area = 0.0
    for i in range(1, len(steps)):
        area += (curve[i] + curve[i - 1]) / 2 * (steps[i] - steps[i - 1])
    return area / (steps[-1] - steps[0])


def regime_cli_sandbox(tmp_path: Path, monkeypatch: Any, source: str) -> dict[str, str]:
    """A testbed of 4 validation problems (``source``, e.g. ``testbed4_r15/max``) in ``tmp_path / "tb"`` that the
    study CLI's phases read instead of the built one, and the docs' blocks captured in the returned dict
    (``{prefix + name: body}``), never written into the committed docs."""
    import pandas as pd

    from recipe.study.common import cli
    from recipe.study.common import docs as docs_module
    from recipe.study.testbed.build import Testbed

    val = tmp_path / "tb" / "data" / "val.parquet"
    val.parent.mkdir(parents=True)
    pd.DataFrame(
        [{"data_source": source, "extra_info": {"original_id": f"max:{10 + i}|{20 + i}"}} for i in range(4)]
    ).to_parquet(val)
    monkeypatch.setattr(cli, "testbed", lambda plan, dry_run=False: Testbed(tmp_path / "tb", "key"))
    written: dict[str, str] = {}
    monkeypatch.setattr(
        docs_module, "update_docs", lambda fragments, prefix: written.update({prefix + k: v for k, v in fragments.items()})
    )
    return written
