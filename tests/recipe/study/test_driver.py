"""recipe/study/driver.py with a stand-in trainer (a tiny script that writes metrics.jsonl): plan
order, skip, restart, stale folders, failures, the parallel limit and SIGTERM. No real trainer."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from recipe import proc
from recipe.study import driver
from tests.e2e.stopping import sigterm_stops_stand_ins

# argv: out_dir steps mode; mode ok | fail | hang. Writes its pid, then step lines like the trainer.
STAND_IN = textwrap.dedent(
    """
    import json, os, sys, time
    out, steps, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    with open(os.path.join(out, "pid"), "w") as f:
        f.write(str(os.getpid()))
    with open(os.path.join(out, "events"), "a") as f:
        f.write(f"start {time.time()}\\n")
    path = os.path.join(out, "metrics.jsonl")
    with open(path, "a") as f:
        f.write(json.dumps({"step": 0, "val-core/x/acc/mean@1": 0.25}) + "\\n")
        for step in range(1, steps + 1):
            if mode == "hang":
                time.sleep(600)
            time.sleep(0.05)
            f.write(json.dumps({"step": step, "critic/score/mean": 0.5, "timing_s/step": 0.05}) + "\\n")
            f.flush()
            if mode == "fail" and step == 1:
                sys.exit(3)
    with open(os.path.join(out, "events"), "a") as f:
        f.write(f"end {time.time()}\\n")
    """
)


def _jobs(
    tmp_path: Path, modes: dict[str, str], steps: int = 3, fingerprint: dict | None = None
) -> list[driver.Job]:
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    jobs = []
    for name, mode in modes.items():
        out = tmp_path / "runs" / name
        jobs.append(
            driver.Job(
                name=name,
                out=out,
                command=[sys.executable, str(script), str(out), str(steps), mode],
                steps=steps,
                fingerprint=fingerprint or {"method": name.split("-")[0], "steps": steps},
            )
        )
    return jobs


class _Recorder:
    """A launch function that records the order in which jobs are started."""

    def __init__(self) -> None:
        self.started: list[str] = []

    def __call__(self, cmd, **kwargs):
        self.started.append(Path(cmd[2]).name)
        return proc.start_group(cmd, **kwargs)


def test_runs_in_plan_order_then_skips_finished_runs(tmp_path: Path) -> None:
    jobs = _jobs(tmp_path, {"grpo-s0": "ok", "copo-s0": "ok", "grpo-s1": "ok"})
    launch = _Recorder()
    lines: list[str] = []
    assert driver.run_jobs(jobs, parallel=2, poll_s=0.05, launch=launch, say=lines.append) == []
    assert launch.started == ["grpo-s0", "copo-s0", "grpo-s1"]
    for job in jobs:
        summary = json.loads((job.out / driver.SUMMARY).read_text())
        assert summary["steps"] == 3 and summary["fingerprint"] == job.fingerprint
        assert summary["wall_s"] > 0
        assert driver.job_state(job) == "done"
    assert any("grpo-s0 step 3/3" in line for line in lines)

    again = _Recorder()
    lines = []
    assert driver.run_jobs(jobs, parallel=2, poll_s=0.05, launch=again, say=lines.append) == []
    assert again.started == []
    assert sum("done, skipped" in line for line in lines) == 3


def test_no_run_starts_after_the_start_deadline(tmp_path: Path) -> None:
    """A pre-registered time-based stop: runs started before it finish; later ones never start."""
    jobs = _jobs(tmp_path, {"grpo-s0": "ok", "copo-s0": "ok", "grpo-s1": "ok", "copo-s1": "ok"})
    launch = _Recorder()
    lines: list[str] = []

    def clock() -> float:  # the deadline (5.0) passes once the first two runs have started
        return 10.0 if len(launch.started) >= 2 else 0.0

    failed = driver.run_jobs(
        jobs, parallel=2, poll_s=0.05, launch=launch, say=lines.append, start_before=5.0, clock=clock
    )
    assert failed == [] and launch.started == ["grpo-s0", "copo-s0"]
    assert driver.job_state(jobs[0]) == "done" and driver.job_state(jobs[3]) != "done"
    assert any("2 runs not started (grpo-s1, copo-s1)" in line for line in lines)


def test_interrupted_run_restarts_from_scratch(tmp_path: Path) -> None:
    (job,) = _jobs(tmp_path, {"grpo-s0": "ok"})
    job.out.mkdir(parents=True)
    # what a killed run leaves: some steps, no summary.json
    (job.out / "metrics.jsonl").write_text(json.dumps({"step": 1, "critic/score/mean": 0.9}) + "\n")
    (job.out / "leftover").write_text("from the killed run")
    assert driver.job_state(job) == "todo"
    assert driver.run_jobs([job], parallel=1, poll_s=0.05, say=lambda _: None) == []
    assert not (job.out / "leftover").exists()
    rows = [json.loads(line) for line in (job.out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3]  # one fresh run, nothing appended to the old one
    assert driver.job_state(job) == "done"


def test_stale_run_folder_is_refused(tmp_path: Path) -> None:
    (job,) = _jobs(tmp_path, {"grpo-s0": "ok"})
    assert driver.run_jobs([job], parallel=1, poll_s=0.05, say=lambda _: None) == []
    (changed,) = _jobs(tmp_path, {"grpo-s0": "ok"}, fingerprint={"method": "grpo", "lr": 1})
    assert driver.job_state(changed) == "stale"
    with pytest.raises(SystemExit, match="other settings"):
        driver.run_jobs([changed], parallel=1, poll_s=0.05, say=lambda _: None)


def test_a_longer_budget_reruns_a_shorter_finished_run(tmp_path: Path) -> None:
    (job,) = _jobs(tmp_path, {"grpo-s0": "ok"}, steps=2, fingerprint={"method": "grpo"})
    assert driver.run_jobs([job], parallel=1, poll_s=0.05, say=lambda _: None) == []
    (longer,) = _jobs(tmp_path, {"grpo-s0": "ok"}, steps=4, fingerprint={"method": "grpo"})
    assert driver.job_state(longer) == "todo"


def test_failures_are_reported_and_the_others_still_run(tmp_path: Path) -> None:
    jobs = _jobs(tmp_path, {"grpo-s0": "fail", "copo-s0": "ok"})
    lines: list[str] = []
    assert driver.run_jobs(jobs, parallel=1, poll_s=0.05, say=lines.append) == ["grpo-s0"]
    assert not (jobs[0].out / driver.SUMMARY).exists()
    assert (jobs[1].out / driver.SUMMARY).exists()
    assert any("grpo-s0: FAILED (exit 3, 1/3 steps" in line for line in lines)


def test_never_more_than_parallel_runs_at_once(tmp_path: Path) -> None:
    jobs = _jobs(tmp_path, {f"m{i}-s0": "ok" for i in range(4)}, steps=4)
    assert driver.run_jobs(jobs, parallel=2, poll_s=0.02, say=lambda _: None) == []
    events = []
    for job in jobs:
        for line in (job.out / "events").read_text().split("\n"):
            if line:
                kind, stamp = line.split()
                events.append((float(stamp), 1 if kind == "start" else -1))
    running = peak = 0
    for _, delta in sorted(events):
        running += delta
        peak = max(peak, running)
    assert peak <= 2


def test_dry_run_prints_commands_and_starts_nothing(tmp_path: Path) -> None:
    jobs = _jobs(tmp_path, {"grpo-s0": "ok", "copo-s0": "ok"})
    launch = _Recorder()
    lines: list[str] = []
    assert driver.run_jobs(jobs, parallel=2, dry_run=True, launch=launch, say=lines.append) == []
    assert launch.started == [] and not (tmp_path / "runs").exists()
    assert lines[0].startswith("[study] (1/2) grpo-s0: ") and "stand_in.py" in lines[0]


_DRIVER_MAIN = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from recipe.proc import Stopped
    from recipe.study import driver
    spec = json.loads(sys.argv[1])
    jobs = [driver.Job(j["name"], Path(j["out"]), j["command"], j["steps"], j["fingerprint"]) for j in spec]
    try:
        driver.run_jobs(jobs, parallel=2, poll_s=0.05)
    except Stopped as stop:
        sys.exit(stop.exit_code)
    """
)


def test_sigterm_stops_every_running_run(tmp_path: Path) -> None:
    jobs = _jobs(tmp_path, {"grpo-s0": "hang", "copo-s0": "hang", "grpo-s1": "ok"})
    spec = [
        {
            "name": j.name,
            "out": str(j.out),
            "command": j.command,
            "steps": j.steps,
            "fingerprint": j.fingerprint,
        }
        for j in jobs
    ]
    main = subprocess.Popen(
        [sys.executable, "-c", _DRIVER_MAIN, json.dumps(spec)], cwd=Path(__file__).parents[3]
    )
    sigterm_stops_stand_ins(main, [jobs[0].out / "pid", jobs[1].out / "pid"], timeout=60)
    assert not (jobs[2].out).exists()  # the third run never started
    assert all(driver.job_state(j) == "todo" for j in jobs)  # all of them run next time


def test_dispatch_runs_the_action_and_turns_a_stop_signal_into_its_exit_code(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def stopped(_: object) -> int:
        raise proc.Stopped(signal.SIGTERM)

    commands = {"ok": lambda args: 7, "stop": stopped}
    assert driver.dispatch(commands, "ok", None) == 7
    assert driver.dispatch(commands, "stop", None) == 128 + signal.SIGTERM
    assert "stopped by SIGTERM; the running runs were stopped" in capsys.readouterr().err


# A run budgeted in generated samples (recipe/study/fast/budget.py): argv out_dir budget; its steps generate
# 20, 25, 25 samples and it stops, as a compute-matched DAPO run stops before its step count.
SAMPLE_STAND_IN = textwrap.dedent(
    """
    import json, os, sys
    path = os.path.join(sys.argv[1], "metrics.jsonl")
    with open(path, "a") as f:
        for step, cumulative in enumerate([0, 20, 45, 70]):
            row = {"step": step, "training/cumulative_generated_samples": cumulative}
            row["training/sample_budget"] = int(sys.argv[2])
            if step:
                row["critic/score/mean"] = 0.5
            f.write(json.dumps(row) + "\\n")
    """
)


@pytest.mark.parametrize(("samples", "ok"), [(64, True), (100, False)])
def test_a_sample_budgeted_run_finishes_by_its_samples_not_its_steps(
    tmp_path: Path, samples: int, ok: bool
) -> None:
    script = tmp_path / "sample_stand_in.py"
    script.write_text(SAMPLE_STAND_IN)
    out = tmp_path / "runs" / "dapo_filter-s0"
    job = driver.Job(
        name="dapo_filter-s0",
        out=out,
        command=[sys.executable, str(script), str(out), str(samples)],
        steps=10,  # the step budget: an upper bound the run stops well before
        fingerprint={"method": "dapo_filter"},
        by_samples=True,
    )
    failed = driver.run_jobs([job], parallel=1, poll_s=0.05, say=lambda _: None)
    assert failed == ([] if ok else ["dapo_filter-s0"])
    assert driver.job_state(job) == ("done" if ok else "todo")
    if ok:
        summary = json.loads((out / driver.SUMMARY).read_text())
        assert (summary["steps"], summary["generated_samples"], summary["sample_budget"]) == (3, 70, 64)


def test_a_phase_that_is_not_ready_is_one_line_and_exit_code_two(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A phase run before its learning rates exist stops with the plan's message, not a traceback."""
    from dataclasses import replace

    from recipe.study.common.plan import StudyPlan
    from recipe.study.testbed4.plan import PLANS

    plan: StudyPlan = replace(PLANS["r15"], learning_rates_file=tmp_path / "learning_rates_r15.json")
    assert driver.dispatch({"real": lambda _: len(plan.learning_rates())}, "real", None) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "learning_rates_r15.json is missing" in err and "pilot-summarize" in err, err
