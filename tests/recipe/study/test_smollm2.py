"""recipe.study.smollm2 (the SmolLM2 study behind scripts/study_cpu.py: plan, resumability, summaries)
and the study figures, without training."""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from recipe.quickstart import run as qs
from recipe.study import smollm2 as study
from recipe.study.plots import plot_study
from recipe.tracking import plots as plot_run
from tests.e2e.stopping import sigterm_stops_stand_ins
from tests.paths import REPO


def _run_args(tmp_path: Path, **kw) -> argparse.Namespace:
    argv = ["run", "--model", "/m", "--data", "/d", "--runs", str(tmp_path / "runs")]
    for key, value in kw.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    args = study.build_parser().parse_args(argv)
    args.runs = args.runs.resolve()
    return args


def _hydra_overrides(cmd: list[str]) -> list[str]:
    """The main_copo overrides the quickstart builds from a study command line."""
    assert cmd[1:3] == ["-m", qs.MODULE]
    args, extra = qs.parse_args(cmd[3:])
    return qs.build_overrides(args, extra)


@pytest.mark.parametrize("method", list(study.METHODS))
def test_every_method_composes_with_verl_schema(tmp_path: Path, method: str) -> None:
    from recipe.copo.config_check import compose_and_validate

    args = _run_args(tmp_path)
    cmd = study.run_command(args, method, 1, tmp_path / "runs" / study.run_name(method, 1))
    overrides = _hydra_overrides(cmd)
    assert overrides[:2] == ["--config-name", "copo_cpu"]
    config = compose_and_validate(overrides[2:], config_name="copo_cpu")
    # shared budget and validation, method-specific algorithm
    assert config.trainer.total_training_steps == args.steps
    assert config.actor_rollout_ref.rollout.val_kwargs.n == 4
    assert config.data.seed == 1 and config.actor_rollout_ref.rollout.seed == 1
    assert config.trainer.resume_mode == "auto"
    # The published results' sampling, whatever copo_cpu.yaml's quickstart workload says today,
    # and the same as the census samples with.
    census = study.build_parser().parse_args(["census", "--model", "/m", "--data", "/d"])
    assert config.actor_rollout_ref.rollout.temperature == census.temperature == 1.0
    assert config.data.max_response_length == census.max_tokens == 64
    expected_estimator = "grpo" if method in ("grpo", "dapo_filter") else "copo"
    assert config.algorithm.adv_estimator == expected_estimator
    assert bool(config.algorithm.filter_groups.enable) == (method == "dapo_filter")
    # this project's variant is soft_with_zero with the wrong answers' global advantage capped at 0
    variant = method == "copo_variant_nonpositive"
    if method.startswith("copo_"):
        blend = "soft_with_zero" if variant else method.removeprefix("copo_")
        assert config.algorithm.copo.blend_mode == blend
        assert config.algorithm.copo.wrong_answer_global == ("nonpositive" if variant else "keep")
        assert (config.algorithm.copo.k, config.algorithm.copo.b) == (5, 1)


def test_plan_skips_finished_runs_and_pairs_the_seeds_of_a_method(tmp_path: Path, capsys) -> None:
    args = _run_args(tmp_path, steps=6)
    args.dry_run = True
    done = args.runs / "grpo-s0"
    done.mkdir(parents=True)
    (done / "summary.json").write_text(json.dumps({"steps": 6}))
    short = args.runs / "grpo-s1"  # interrupted: fewer steps than the budget -> rerun (resumes)
    short.mkdir(parents=True)
    (short / "summary.json").write_text(json.dumps({"steps": 3}))
    assert study.cmd_run(args) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[study] (")]
    names = [line.split(")")[1].split(":")[0].strip() for line in lines]
    assert names == [study.run_name(m, s) for m in study.DEFAULT_METHODS for s in (0, 1)]
    assert "done, skipped" in lines[0]
    # only the first method's runs validate the shared initial model at step 0
    assert all(
        ("val_before_train=false" in line) == (" --algo copo " in line or "dapo" in line)
        for line in lines[2:]
    )
    assert all("done, skipped" not in line for line in lines[1:])


def test_unknown_method_is_rejected() -> None:
    with pytest.raises(SystemExit, match="unknown method"):
        study.main(["summarize", "--methods", "grpo,ppo"])


def _write_run(runs: Path, name: str, rows: list[dict]) -> None:
    (runs / name).mkdir(parents=True)
    (runs / name / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _step(step: int, nonzero: float, correct: float, wrong: float, time_s: float, **extra) -> dict:
    return {
        "step": step,
        "critic/score/mean": 0.5,
        "signal/frac_nonzero_adv": nonzero,
        "signal/frac_groups_all_correct": correct,
        "signal/frac_groups_all_wrong": wrong,
        "signal/frac_groups_zero_variance": correct + wrong,
        "signal/num_responses": 32.0,
        "signal/num_groups": 8.0,
        "timing_s/step": time_s,
        **extra,
    }


def test_summaries_against_hand_computed_values(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    val = "val-core/reasoning_gym/x/acc/mean@4"
    other = "val-core/reasoning_gym/y/acc/mean@4"
    for seed, (v0, v2) in enumerate([(0.2, 0.4), (0.3, 0.2)]):
        _write_run(
            runs,
            f"grpo-s{seed}",
            [
                {"step": 0, val: v0, other: v0},
                _step(1, 0.5, 0.25, 0.25, 10.0),
                {**_step(2, 0.25, 0.5, 0.25, 20.0), val: v2, other: v2},
            ],
        )
    # DAPO: 3 evicted + 1 surplus group of 4 responses generated on top of the 32 kept ones
    _write_run(
        runs,
        "dapo_filter-s0",
        [
            {"step": 0, val: 0.1, other: 0.3},
            _step(
                1,
                1.0,
                0.0,
                0.0,
                30.0,
                **{
                    "training/filter_groups/evicted_samples": 3,
                    "training/filter_groups/discarded_surplus_samples": 1,
                },
            ),
        ],
    )
    # COPO run without its own step-0 validation: the seed's baseline (grpo-s1: 0.3) is copied in
    _write_run(runs, "copo_soft-s1", [{**_step(1, 1.0, 0.25, 0.25, 10.0), val: 0.5, other: 0.5}])
    # a run still starting (validation only, no training step) is left out
    _write_run(runs, "copo_global_only-s0", [{"step": 0, val: 0.9, other: 0.9}])
    methods = ["grpo", "dapo_filter", "copo_soft", "copo_global_only"]
    summary = study.summarize(runs, tmp_path / "docs", methods, [0, 1])
    assert [row["method"] for row in summary] == ["grpo", "dapo_filter", "copo_soft"]
    by_method = {row["method"]: row for row in summary}
    grpo = by_method["grpo"]
    assert grpo["seeds"] == 2 and grpo["steps"] == 2
    assert grpo["val_acc_gain_mean"] == pytest.approx(statistics.fmean([0.2, -0.1]))
    assert grpo["val_acc_gain_std"] == pytest.approx(statistics.stdev([0.2, -0.1]), abs=1e-4)
    assert grpo["frac_nonzero_adv_mean"] == pytest.approx(0.375)
    assert grpo["step1_frac_all_correct_mean"] == pytest.approx(0.25)
    # GRPO: 64 generated, 16 + 8 useful
    assert grpo["generated_per_useful_mean"] == pytest.approx(64 / 24, abs=1e-4)
    assert grpo["train_wall_min_mean"] == pytest.approx(0.5)
    dapo = by_method["dapo_filter"]
    assert dapo["generated_per_useful_mean"] == pytest.approx((32 + 4 * 4) / 32)
    assert dapo["val_acc_start_mean"] == pytest.approx(0.2)  # mean over the two sources
    assert dapo["val_acc_gain_mean"] != dapo["val_acc_gain_mean"]  # NaN: only one validation

    md = (tmp_path / "docs" / "summary.md").read_text().splitlines()
    assert md[0].startswith("| method | seeds | steps |")
    grpo_md = next(line for line in md if line.startswith("| grpo |"))
    assert "| +5.0 ± 21.2 |" in grpo_md  # gain in points: mean of +20 and -10, sample std 21.2
    assert "n/a" in next(line for line in md if line.startswith("| dapo_filter |"))

    with open(tmp_path / "docs" / "steps.csv", newline="") as f:
        steps = list(csv.DictReader(f))
    assert len(steps) == 3 + 3 + 2 + 2
    copo_step0 = next(r for r in steps if r["run"] == "copo_soft-s1" and r["step"] == "0")
    assert float(copo_step0["val_acc"]) == pytest.approx(0.3) and copo_step0["val_source"] == "grpo-s1"
    assert by_method["copo_soft"]["val_acc_gain_mean"] == pytest.approx(0.2)
    dapo_step1 = next(r for r in steps if r["run"] == "dapo_filter-s0" and r["step"] == "1")
    assert float(dapo_step1["generated_samples"]) == 48.0 and float(dapo_step1["useful_samples"]) == 32.0
    grpo_step2 = next(r for r in steps if r["run"] == "grpo-s0" and r["step"] == "2")
    assert float(grpo_step2["train_wall_s"]) == 30.0 and float(grpo_step2["val_acc"]) == pytest.approx(0.4)

    written = plot_run.main(
        ["--study", str(tmp_path / "docs" / "steps.csv"), "--out", str(tmp_path / "fig")],
        study_plotter=plot_study,
    )
    assert [p.name for p in written] == ["study_accuracy.png", "study_signal.png"]
    for path in written:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
    # the command line wires the study's plotter in
    cli = subprocess.run(
        [
            sys.executable,
            "scripts/plot_run.py",
            "--study",
            str(tmp_path / "docs" / "steps.csv"),
            "--out",
            str(tmp_path / "cli"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert cli.returncode == 0, cli.stderr
    assert sorted(p.name for p in (tmp_path / "cli").iterdir()) == ["study_accuracy.png", "study_signal.png"]


def test_study_curves_align_seeds_by_step() -> None:
    from recipe.study.plots import curves, mean_and_band

    def row(seed: str, step: int, wall: float, gen: str, useful: str) -> dict[str, str]:
        return {"method": "m", "seed": seed, "step": str(step), "train_wall_s": str(wall),
                "generated_samples": gen, "useful_samples": useful, "val_acc": ""}  # fmt: skip

    # Seed 1 has no useful sample at step 2: its generated/useful is undefined there, so step 2
    # is left out instead of pairing seed 0's step 2 with seed 1's step 3.
    rows = [row("0", 1, 60, "16", "4"), row("0", 2, 120, "16", "8"), row("0", 3, 180, "16", "16")]
    rows += [row("1", 1, 90, "16", "8"), row("1", 2, 150, "16", "0"), row("1", 3, 240, "32", "16")]
    by_seed = curves(rows, "step", "generated_per_useful")["m"]
    assert by_seed["1"] == {1: (1.0, 2.0), 3: (3.0, 2.0)}
    assert mean_and_band(by_seed) == ([1.0, 3.0], [3.0, 1.5], [2.0, 1.0], [4.0, 2.0])
    xs, mean, _, _ = mean_and_band(curves(rows, "train_wall_s", "generated_per_useful", 1 / 60)["m"])
    assert xs == pytest.approx([1.25, 3.5]) and mean == [3.0, 1.5]


def test_study_plot_errors_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="study_cpu.py summarize"):
        plot_run.main(
            ["--study", str(tmp_path / "missing.csv"), "--out", str(tmp_path)], study_plotter=plot_study
        )
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(SystemExit, match="missing columns"):
        plot_run.main(["--study", str(bad), "--out", str(tmp_path)], study_plotter=plot_study)


def test_shell_wrapper_help_and_dry_run() -> None:
    out = subprocess.run(["bash", "scripts/study_cpu.sh", "--help"], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0 and "STEPS" in out.stdout and "resum" in out.stdout


# A study run that starts, writes its pid and then waits to be stopped (the quickstart run's place).
_HANGING_RUN = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(600)"
# The driver's main with the quickstart command replaced by the hanging stand-in (one pid file per run).
_STUDY_MAIN = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from recipe.study import smollm2
    code = sys.argv[1]
    def stand_in(args, method, seed, out):
        out.mkdir(parents=True, exist_ok=True)
        return [sys.executable, "-c", code, str(out / "pid")]
    smollm2.run_command = stand_in
    sys.exit(smollm2.main(sys.argv[2:]))
    """
)


def test_sigterm_to_the_study_driver_stops_every_run_of_its_chunk(tmp_path: Path) -> None:
    """The SmolLM2 driver's own loop (not recipe.study.driver's): a SIGTERM to its pid stops both runs of
    the running chunk, their whole groups, and it exits 143. A real trainer under it:
    tests/e2e/test_stop.py (one run, whose stop must reach its Ray cluster)."""
    runs = tmp_path / "runs"
    argv = ["run", "--model", "/m", "--data", "/d", "--runs", str(runs), "--methods", "grpo,copo_soft"]
    argv += ["--seeds", "0", "--parallel", "2"]
    main = subprocess.Popen([sys.executable, "-c", _STUDY_MAIN, _HANGING_RUN, *argv], cwd=REPO)
    pid_files = [runs / study.run_name(m, 0) / "pid" for m in ("grpo", "copo_soft")]
    sigterm_stops_stand_ins(main, pid_files)
