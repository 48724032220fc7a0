"""Testbed v3 (v2's policy + a noisy SFT continuation, data re-split from v2's held-out pool) and its study code."""

from __future__ import annotations

import json
import random
from collections import Counter
from itertools import islice
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from recipe.study.common import analysis, collect
from recipe.study.common.collect import PlannedRun, ValProblem
from recipe.study.common.testbeds import TESTBED_V2
from recipe.study.driver import SUMMARY
from recipe.study.testbed import build as tb_build
from recipe.study.testbed.mixed import MixedTaskSpec
from recipe.study.testbed.noisy import NoisyTaskSpec, ShownProblem, corrupt
from recipe.study.testbed.sft import SFTSpec
from recipe.study.testbed3 import report
from recipe.study.testbed3.plan import PLAN, TESTBED_V3


def test_corrupt_changes_exactly_one_digit_and_keeps_the_length() -> None:
    rng = random.Random(0)
    for answer in ("7", "10", "999", "12345", "90000"):
        for _ in range(200):
            shown = corrupt(answer, rng)
            assert shown != answer and len(shown) == len(answer) and shown.isdigit()
            assert sum(a != b for a, b in zip(answer, shown, strict=True)) == 1
            assert len(shown) == 1 or shown[0] != "0"
    with pytest.raises(ValueError, match="not a non-negative integer"):
        corrupt("-3", rng)


def _small(**kw: object) -> NoisyTaskSpec:
    return NoisyTaskSpec(train_per_task=60, val_per_task=30, **kw)  # type: ignore[arg-type]


def test_the_stream_corrupts_each_level_at_its_rate_and_never_the_rl_answers() -> None:
    spec = _small(sft_noise=((("max", 3, 3), 0.4),))
    splits = spec.make_splits()
    stream = list(islice(splits.sft_stream(), 6000))
    noisy = [p for p in stream if p.level == ("max", 3, 3)]
    shown = [p for p in noisy if isinstance(p, ShownProblem)]
    assert abs(len(shown) / len(noisy) - 0.4) < 0.05
    assert all(p.shown != p.answer and p.target == "\\boxed{" + p.shown + "}" for p in shown)
    assert not any(isinstance(p, ShownProblem) for p in stream if p.level != ("max", 3, 3))
    # the RL problems (reward = the true answer) are plain problems
    assert not any(isinstance(p, ShownProblem) for _, p in splits.val + splits.train)


def test_the_resplit_keeps_the_pool_held_out_from_the_stream() -> None:
    levels = ((("max", 2, 2), 5), (("max", 5, 5), 6))
    spec = _small(rl_levels=levels)
    plain = MixedTaskSpec(train_per_task=60, val_per_task=30).make_splits()
    pool = {p.key for _, p in plain.val + plain.train}
    splits = spec.make_splits()
    val, train = {p.key for _, p in splits.val}, {p.key for _, p in splits.train}
    assert not val & train and val | train <= pool
    assert Counter(p.level for _, p in splits.val) == {("max", 2, 2): 5, ("max", 5, 5): 6}
    in_pool = Counter(p.level for _, p in plain.val + plain.train)
    assert len(train) == in_pool[("max", 2, 2)] + in_pool[("max", 5, 5)] - 11
    assert not {p.key for p in islice(splits.sft_stream(), 5000)} & pool
    # the stream does not depend on the re-split
    a = [p.key for p in islice(_small().make_splits().sft_stream(), 200)]
    assert a == [p.key for p in islice(spec.make_splits().sft_stream(), 200)]
    with pytest.raises(ValueError, match="leave some"):
        _small(rl_levels=((("max", 2, 2), 10_000),))


def test_a_continuation_must_draw_the_base_pool() -> None:
    good = NoisyTaskSpec(sft_noise=((("max", 3, 3), 0.4),))
    tb_build.ContinuedSpec(TESTBED_V2, good, SFTSpec(steps=10))
    with pytest.raises(ValueError, match="must draw the base"):
        tb_build.ContinuedSpec(TESTBED_V2, NoisyTaskSpec(seed=1), SFTSpec(steps=10))


def test_v3_has_its_own_key_and_v2_keeps_its_own() -> None:
    v2 = TESTBED_V2.key()
    assert TESTBED_V3.key() not in (v2, tb_build.TestbedSpec().key())
    assert "continued" in TESTBED_V3.as_dict() and "continued" not in TESTBED_V2.as_dict()
    splits = TESTBED_V3.task.make_splits()
    assert len(splits.val) == 1024 and len(splits.train) == 512
    rows = {TESTBED_V3.task.source_of(t) for t in TESTBED_V3.task.tasks}
    assert rows == {"testbed3/add", "testbed3/max"}


def test_a_continued_build_starts_from_the_base_policy(tmp_path: Path) -> None:
    """A tiny base (v2-shaped tasks, 3 SFT steps), continued 2 steps: its own folder, data and manifest."""
    base = tb_build.TestbedSpec(
        task=MixedTaskSpec(train_per_task=60, val_per_task=30),
        model=tb_build.ModelShape(
            hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=32
        ),
        sft=SFTSpec(steps=3, batch_size=4, warmup_steps=1),
    )
    spec = tb_build.ContinuedSpec(
        base,
        NoisyTaskSpec(
            train_per_task=60,
            val_per_task=30,
            sft_noise=((("max", 3, 3), 0.5),),
            rl_levels=((("max", 2, 2), 4),),
        ),
        SFTSpec(steps=2, batch_size=4, warmup_steps=1),
    )
    built = tb_build.ensure_testbed(spec, root=tmp_path)
    manifest = built.manifest()
    base_built = tb_build.ensure_testbed(base, root=tmp_path)
    assert manifest["base"] == base_built.key and built.key != base_built.key
    assert manifest["base_weights_sha256"] == base_built.manifest()["weights_sha256"]
    assert manifest["weights_sha256"] != manifest["base_weights_sha256"]  # it trained
    val = pd.read_parquet(built.data / "val.parquet")
    assert len(val) == 4 and set(val.data_source) == {"testbed3/max"}


def _fake_run(path: Path, seed: int, gain: float, problems: int = 8) -> None:
    path.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    correct = np.stack([rng.integers(0, 4, problems) for _ in range(3)]).astype(np.int16)
    correct[2] = np.minimum(4, correct[0] + int(gain * 4))
    np.savez(path / "validation.npz", steps=np.array([0, 10, 20]), correct=correct, n=4)
    rows = []
    for step in range(21):
        row: dict = {"step": step}
        if step in (0, 10, 20):
            row["val-core/testbed3/max/acc/mean@4"] = float(correct[step // 10].mean() / 4)
        if step > 0:
            row.update({"signal/num_responses": 64.0, "signal/frac_nonzero_adv": 0.5, "perf/step_cpu_s": 0.5})
            for task in ("testbed3/max", "all"):
                p = f"groups/{task}/"
                row.update(
                    {
                        p + "count": 16.0,
                        p + "all_correct": 0.2,
                        p + "all_wrong": 0.3,
                        p + "zero_variance": 0.5,
                        p + "accuracy": 0.5,
                    }
                )
        rows.append(row)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "result.json").write_text(json.dumps({"cpu_s": 12.0, "wall_s": 20.0}))
    (path / SUMMARY).write_text(json.dumps({"wall_s": 21.0, "steps": 20}))


def test_collect_and_report_on_fake_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    problems = [ValProblem(i, "max", "max2x2" if i < 4 else "max3x3") for i in range(8)]
    runs = []
    for seed in range(4):
        for method, gain in (
            ("grpo", 0.25),
            ("copo_soft_with_zero", 0.5),
            ("copo_soft", 0.25),
            ("dapo_filter", 0.5),
        ):
            path = tmp_path / "runs" / f"{method}-s{seed}"
            _fake_run(path, seed, gain)
            runs.append(PlannedRun("confirmatory", "fast", method, seed, 1e-4, path))
    out = tmp_path / "docs"
    collect.collect(PLAN, runs, problems, out)
    blocks = pd.read_csv(out / "blocks.csv")
    assert set(blocks.task) == {"max", "all"} and (blocks.all_wrong == 0.3).all()
    monkeypatch.setattr(analysis, "RESAMPLES", 300)
    fragments = report.report(out)
    assert {"criteria", "methods", "comparisons", "per_level", "oneline"} <= set(fragments)
    # per level: the primary difference equals the mean over seeds of the per-level AUC differences
    table = report.level_auc(
        pd.read_csv(out / "problems.csv"), {"k": 4, "validations": 3}, pd.read_csv(out / "runs.csv")
    )
    d = (
        table[table.method == "copo_soft_with_zero"].set_index("seed").max3x3
        - table[table.method == "grpo"].set_index("seed").max3x3
    )
    assert f"{100 * d.mean():+.1f}" in fragments["per_level"]
    assert report.report(out) == fragments
    from recipe.study.common import plots

    plots.plot_all(PLAN, out)
    assert (out / "testbed3_accuracy.png").stat().st_size > 0 and (out / "testbed3_regime.png").is_file()


def test_tuning_and_pilot_blocks_on_fake_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    problems = [ValProblem(i, "max", "max2x2" if i < 4 else "max3x3") for i in range(8)]
    runs = []
    for method in PLAN.methods:
        for lr, gain in ((1e-4, 0.5), (2e-4, 0.25)):
            path = tmp_path / "runs" / "tuning" / f"{method}-lr{lr:g}-s3000"
            _fake_run(path, 3000, gain)
            runs.append(PlannedRun("tuning", "fast", method, 3000, lr, path))
    for seed in PLAN.pilot_seeds:
        for method in PLAN.pilot_methods:
            path = tmp_path / "runs" / "pilot" / f"{method}-s{seed}"
            _fake_run(path, seed, 0.5 if method == "grpo" else 0.25)
            runs.append(PlannedRun("pilot", "fast", method, seed, 1e-4, path))
    out = tmp_path / "docs"
    collect.collect(PLAN, runs, problems, out, prefix="pilot_")
    tuning = pd.read_csv(out / "pilot_runs.csv").query("phase == 'tuning'")
    assert set(analysis.choose_learning_rates(PLAN, tuning).values()) == {1e-4}
    fragments = report.report(out)
    assert {"tuning", "tuning_criteria", "pilot", "budget"} <= set(fragments)
    assert f"Pilot ({1 + len(PLAN.pilot_seeds)} paired seeds" in fragments["pilot"]
    assert "GRPO's validation accuracy gain" in fragments["tuning_criteria"]


def test_only_seeds_with_every_method_finished_are_analysed(tmp_path: Path) -> None:
    from recipe.study.common.cli import complete_seeds

    runs = [PlannedRun("confirmatory", "fast", m, 100, 1e-4, tmp_path) for m in PLAN.methods]
    runs += [PlannedRun("confirmatory", "fast", m, 101, 1e-4, tmp_path) for m in PLAN.methods[:2]]
    assert {(r.seed, r.method) for r in complete_seeds(PLAN, runs)} == {(100, m) for m in PLAN.methods}
