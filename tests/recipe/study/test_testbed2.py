"""Testbed v2 (mixed-difficulty tasks) and its study code: jobs, collection, report, docs fragments."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from recipe.study.common import analysis, collect, docs, jobs
from recipe.study.common.collect import PlannedRun, ValProblem
from recipe.study.driver import SUMMARY
from recipe.study.testbed import build as tb_build
from recipe.study.testbed.mixed import MixedTask, MixedTaskSpec, level_of, original_id, verl_rows
from recipe.study.testbed2 import report
from recipe.study.testbed2.plan import PLAN


def test_mixed_splits_are_disjoint_balanced_and_keep_the_level_shares() -> None:
    spec = MixedTaskSpec(train_per_task=120, val_per_task=60)
    splits = spec.make_splits()
    assert len(splits.val) == 120 and len(splits.train) == 240
    val_keys = {p.key for _, p in splits.val}
    train_keys = {p.key for _, p in splits.train}
    assert len(val_keys) == 120 and len(train_keys) == 240 and not val_keys & train_keys
    stream = splits.sft_stream()
    sft = [next(stream) for _ in range(2000)]
    assert not {p.key for p in sft} & (val_keys | train_keys)
    for task in spec.tasks:
        mine = [p for name, p in splits.val if name == task.name]
        counts = [sum(p.level == level for p in mine) for level in task.levels]
        assert counts == task.counts(60) and sum(counts) == 60
    assert {p.level for p in sft} == {lvl for t in spec.tasks for lvl in t.levels} | set(spec.sft_only_levels)
    assert all(p.messages()[0]["content"].startswith(p.question + "\n") for p in sft[:20])  # + instruction


def test_rows_name_the_task_and_the_level_is_recoverable() -> None:
    spec = MixedTaskSpec(train_per_task=8, val_per_task=8)
    splits = spec.make_splits()
    rows = verl_rows(spec, splits.val, "test")
    for row, (name, p) in zip(rows, splits.val, strict=True):
        assert row["data_source"] == f"testbed2/{name}"
        assert row["prompt"] == p.messages() and p.messages()[0]["content"].startswith(p.question)
        assert row["reward_model"]["ground_truth"] == p.answer
        op, m, n = p.level
        assert level_of(row["extra_info"]["original_id"]) == f"{op}{min(m, n)}x{max(m, n)}"
    assert original_id(splits.val[0][1]).startswith("add:")
    bare = MixedTaskSpec(train_per_task=8, val_per_task=8, instruction=False)
    row = verl_rows(bare, bare.make_splits().val, "test")[0]
    assert row["prompt"][0]["content"] == bare.make_splits().val[0][1].question
    assert row["extra_info"]["prompt_template"] == "question"


def test_spec_refuses_bad_tasks() -> None:
    with pytest.raises(ValueError, match="share one op"):
        MixedTaskSpec(
            tasks=(MixedTask("x", (("add", 2, 2), ("max", 2, 2)), (1.0, 1.0)),), sft_task_weights=(1.0,)
        )
    with pytest.raises(ValueError, match="too many"):
        MixedTaskSpec(train_per_task=20000)


def test_v2_has_its_own_cache_key_and_v1_keeps_its_own() -> None:
    assert PLAN.testbed.key() != tb_build.TestbedSpec().key()
    # v1's key hashes only v1's spec: the committed 2026-11-24 study's testbed is still the default
    assert "tasks" not in tb_build.TestbedSpec().as_dict()["task"]


@pytest.mark.parametrize("method", PLAN.methods)
def test_both_trainers_get_overrides_that_compose(method: str, tmp_path: Path) -> None:
    from recipe.copo.config_check import compose_and_validate

    testbed = tb_build.Testbed(tmp_path / "tb", "k")
    fast = jobs.fast_jobs(testbed, [(method, 3, 1e-4)], tmp_path / "runs")[0]
    real = jobs.real_jobs(testbed, [(method, 3, 1e-4)], tmp_path / "real")[0]
    assert fast.command[2:4] == ["recipe.study.fast.run", str(tmp_path / "runs" / f"{method}-s3")]
    assert "recipe.copo.main_copo" in real.command
    shared = jobs.overrides(testbed, method, 3, 1e-4)
    assert fast.command[-len(shared) :] == shared
    config = compose_and_validate(shared, config_name=PLAN.config_name)
    assert config.actor_rollout_ref.actor.optim.lr == 1e-4 and config.data.seed == 3
    assert fast.fingerprint["lr"] == 1e-4 and fast.steps == 100


def _fake_run(path: Path, method: str, seed: int, gain: float, problems: int = 8) -> None:
    """A finished fast run: 20 steps, validation at 0, 10, 20 over ``problems`` problems (k = 4)."""
    path.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    correct = np.stack([rng.integers(0, 5, problems) for _ in range(3)]).astype(np.int16)
    correct[2] = np.minimum(4, correct[0] + int(gain * 4))
    np.savez(path / "validation.npz", steps=np.array([0, 10, 20]), correct=correct, n=4)
    rows = []
    for step in range(21):
        row: dict = {"step": step}
        if step in (0, 10, 20):
            v = correct[step // 10]
            row["val-core/testbed2/add/acc/mean@4"] = float(v[: problems // 2].mean() / 4)
            row["val-core/testbed2/max/acc/mean@4"] = float(v[problems // 2 :].mean() / 4)
        if step > 0:
            row.update(
                {"signal/num_responses": 128.0, "signal/frac_nonzero_adv": 0.5, "perf/step_cpu_s": 0.5}
            )
            for task in ("testbed2/add", "testbed2/max", "all"):
                p = f"groups/{task}/"
                row.update(
                    {
                        p + "count": 8.0,
                        p + "all_correct": 0.25,
                        p + "all_wrong": 0.25,
                        p + "zero_variance": 0.5,
                        p + "accuracy": 0.5,
                    }
                )
        rows.append(row)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "result.json").write_text(json.dumps({"cpu_s": 12.0, "wall_s": 20.0}))
    (path / SUMMARY).write_text(json.dumps({"wall_s": 21.0, "steps": 20}))


def test_collect_and_report_on_fake_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    problems = [ValProblem(i, "add" if i < 4 else "max", "add2x2" if i < 4 else "max2x2") for i in range(8)]
    runs = []
    for seed in range(4):
        for method, gain in (
            ("grpo", 0.25),
            ("copo_soft_with_zero", 0.5),
            ("copo_soft", 0.25),
            ("dapo_filter", 0.5),
        ):
            path = tmp_path / "runs" / f"{method}-s{seed}"
            _fake_run(path, method, seed, gain)
            runs.append(PlannedRun("confirmatory", "fast", method, seed, 1e-4, path))
    out = tmp_path / "docs"
    written = collect.collect(PLAN, runs, problems, out)
    table = pd.read_csv(out / "problems.csv")
    assert list(table.columns[:3]) == ["row", "task", "level"] and len(table) == 8
    data = np.load(tmp_path / "runs" / "grpo-s0" / "validation.npz")
    units = data["correct"][0] + 2 * data["correct"][1] + data["correct"][2]
    assert table["grpo-s0"].tolist() == units.tolist()
    # the overall AUC of runs.csv is the mean of the per-problem AUCs (equal task sizes)
    run0 = pd.read_csv(out / "runs.csv").set_index("run").loc["grpo-s0"]
    assert run0.auc == pytest.approx(float(np.mean(units / (2 * 4 * 2))), abs=1e-5)
    assert written["blocks"][0]["zero_variance"] == 0.5
    monkeypatch.setattr(analysis, "RESAMPLES", 500)
    fragments = report.report(out)
    assert {"criteria", "methods", "comparisons", "per_task"} <= set(fragments)
    assert "copo_soft_with_zero - grpo" in fragments["comparisons"]
    assert report.report(out) == fragments  # deterministic: the docs test can compare text


def test_learning_rate_rule_takes_the_best_mean_auc_and_the_smaller_on_ties() -> None:
    tuning = pd.DataFrame(
        [
            {"method": m, "lr": lr, "seed": s, "auc": auc}
            for m in PLAN.methods
            for lr, auc in ((3e-5, 0.5), (1e-4, 0.6 if m != "grpo" else 0.5), (3e-4, 0.55))
            for s in (0, 1)
        ]
    )
    chosen = analysis.choose_learning_rates(PLAN, tuning)
    assert chosen["grpo"] == 3e-4 and chosen["copo_soft"] == 1e-4
    tie = pd.DataFrame(
        [{"method": m, "lr": lr, "seed": 0, "auc": 0.5} for m in PLAN.methods for lr in (1e-4, 3e-5)]
    )
    assert set(analysis.choose_learning_rates(PLAN, tie).values()) == {3e-5}


def test_docs_fragments_are_replaced_and_read_back(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "a\n<!-- generated: testbed2/x -->\nold\n<!-- end generated -->\nb\n<!-- generated: other/y -->\nkeep\n<!-- end generated -->\n"
    )
    changed = docs.update_docs({"x": "new\nlines\n"}, docs=(doc,))
    assert changed == [doc]
    assert docs.fragments_in(doc.read_text()) == {"testbed2/x": "new\nlines\n", "other/y": "keep\n"}
    assert docs.update_docs({"x": "new\nlines\n"}, docs=(doc,)) == []


def test_usage_wrapper_records_cpu_seconds_and_passes_the_exit_status(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = tmp_path / "usage.json"
    burn = "import sys, time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\nsys.exit(3)"
    rc = subprocess.call(
        [sys.executable, "-m", "recipe.study.common.usage", str(out), "--", sys.executable, "-c", burn]
    )
    usage = json.loads(out.read_text())
    assert rc == 3 and usage["returncode"] == 3
    assert usage["cpu_s"] >= 0.3 and usage["wall_s"] >= 0.3


def test_confirmatory_runs_wait_for_a_committed_plan(tmp_path: Path) -> None:
    import subprocess

    from recipe.study import machine

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    git("config", "user.email", "t@t")
    git("config", "user.name", "t")
    plan_doc = tmp_path / "PLAN.md"
    plan_doc.write_text("plan\n")
    assert not machine.committed(plan_doc, root=tmp_path)  # untracked
    git("add", "PLAN.md")
    git("commit", "-qm", "plan")
    assert machine.committed(plan_doc, root=tmp_path)
    plan_doc.write_text("plan, edited after the fact\n")
    assert not machine.committed(plan_doc, root=tmp_path)


def test_exploration_resplits_the_held_out_pool_without_overlap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from recipe.study.testbed2 import exploration

    spec = MixedTaskSpec(train_per_task=60, val_per_task=30)
    spec.make_splits().write(tmp_path / "tb" / "data")
    testbed = tb_build.Testbed(tmp_path / "tb", "k")
    monkeypatch.setattr(exploration, "LEARNABLE_VAL", {"add2x2": 6, "max2x2": 4})
    train, val = exploration.prepare_data(testbed, "learnable", tmp_path / "data")
    v, t = pd.read_parquet(val), pd.read_parquet(train)
    levels = [level_of(e["original_id"]) for e in v.extra_info]
    assert sorted(levels) == ["add2x2"] * 6 + ["max2x2"] * 4
    ids = lambda frame: {e["original_id"] for e in frame.extra_info}  # noqa: E731
    pool = ids(pd.read_parquet(testbed.data / "val.parquet")) | ids(
        pd.read_parquet(testbed.data / "train.parquet")
    )
    assert not ids(v) & ids(t) and ids(v) | ids(t) <= pool
    assert {level_of(e["original_id"]) for e in t.extra_info} == {"add2x2", "max2x2"}
    again = exploration.prepare_data(testbed, "learnable", tmp_path / "data")  # cached, deterministic
    assert again == (train, val)
    small, small_val = exploration.prepare_data(testbed, "small16", tmp_path / "data")
    assert len(pd.read_parquet(small)) == 16 and pd.read_parquet(small).equals(pd.read_parquet(small_val))


def test_every_probe_composes() -> None:
    from recipe.copo.config_check import compose_and_validate
    from recipe.study.testbed2 import exploration

    for probe in exploration.PROBES:
        overrides = [
            "actor_rollout_ref.model.path=/m", "data.train_files=/t", "data.val_files=/v", f"data.seed={probe.seed}",
            f"actor_rollout_ref.rollout.seed={probe.seed}", f"actor_rollout_ref.actor.optim.lr={probe.lr}",
            *exploration.METHODS["grpo"], *probe.overrides,
        ]  # fmt: skip
        config = compose_and_validate(overrides, config_name=PLAN.config_name)
        assert config.algorithm.adv_estimator == "grpo" and probe.seed not in PLAN.confirmatory_seeds


def test_the_stopped_plan_runs_no_more_confirmatory_runs() -> None:
    from recipe.study.testbed2 import cli

    assert PLAN.confirmatory_stopped
    with pytest.raises(SystemExit, match="stopped"):
        cli.main(["run", "--dry-run"])
