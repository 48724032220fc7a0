"""Run a study's training runs: a few at a time, resumable, and stoppable as a whole.

A :class:`Job` is one training process (one method and seed) with its own output folder. The
driver keeps at most ``parallel`` of them running, starting the next in plan order as soon as one
ends, so machine-speed drift over the hours of a study spreads over the plan rather than over one
method (interleave the plan: for seed, for method).

* **Skip.** A job whose folder holds ``summary.json`` with its full step count and the same
  ``fingerprint`` (the command's settings) is finished and is not run again.
* **Stale.** A finished folder with another fingerprint was made with other settings: the driver
  refuses to start (listing them) rather than mix two studies; move them away or pick another folder.
* **Restart.** A folder without ``summary.json`` is an interrupted run: it is emptied and the run
  starts again from step 0 (testbed runs are minutes long; starting over is simpler and exactly
  reproducible, where resuming mid-run would depend on what verl checkpointed).
* **Stop.** SIGTERM, SIGINT or SIGHUP stops every running job's whole process group
  (``recipe.proc``), and the driver exits with 128 + the signal number.

The driver reads each running job's ``metrics.jsonl`` (``recipe.tracking.jsonl``) and prints one line
per new step.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recipe import proc
from recipe.files import atomic_write_text
from recipe.tracking import names
from recipe.tracking.jsonl import read_metrics_jsonl, val_accuracy

SUMMARY = "summary.json"
RUN_INFO = "run.json"
LOG = "train.log"
METRICS = "metrics.jsonl"


@dataclass(frozen=True)
class Job:
    """One training process.

    Attributes:
        name: unique name, also the folder name under the runs folder.
        out: the run folder (metrics.jsonl, train.log, run.json, summary.json).
        command: argv of the training process.
        steps: training steps the run must log to count as finished (with ``by_samples``: at most).
        fingerprint: the settings that make this run what it is (JSON-able); compared on skip.
        env: environment variables added to the driver's for this process.
        cwd: working directory of the process.
    """

    name: str
    out: Path
    command: list[str]
    steps: int
    fingerprint: Mapping[str, Any]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    # A fast run budgeted in generated samples (recipe/study/fast/budget.py) finishes when its rows'
    # cumulative generated samples reach the budget its rows state (computed by the trainer from the
    # config the fingerprint pins), after a number of steps it decides itself (DAPO's filter takes fewer
    # than ``steps``). False: the run finishes by its step count.
    by_samples: bool = False


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def _jsonable(fingerprint: Mapping[str, Any]) -> Any:
    return json.loads(json.dumps(fingerprint, sort_keys=True))


def job_state(job: Job) -> str:
    """``done`` (finished with this fingerprint), ``stale`` (finished with another) or ``todo``."""
    summary = _read_json(job.out / SUMMARY)
    if summary is None:
        return "todo"
    if summary.get("fingerprint") != _jsonable(job.fingerprint):
        return "stale"
    if job.by_samples:
        budget = summary.get("sample_budget")
        return "done" if budget and int(summary.get("generated_samples", 0)) >= int(budget) else "todo"
    return "done" if int(summary.get("steps", 0)) >= job.steps else "todo"


def sample_progress(rows: Sequence[Mapping[str, Any]]) -> tuple[int, int | None]:
    """The largest cumulative generated-sample count the rows logged (0 without one) and the budget they
    state (None without one)."""
    counts = [
        int(r[names.CUMULATIVE_GENERATED_SAMPLES]) for r in rows if names.CUMULATIVE_GENERATED_SAMPLES in r
    ]
    budgets = {int(r[names.SAMPLE_BUDGET]) for r in rows if names.SAMPLE_BUDGET in r}
    return max(counts, default=0), (budgets.pop() if len(budgets) == 1 else None)


def training_steps(rows: Sequence[Mapping[str, Any]]) -> list[int]:
    """Training steps logged (rows with a training score; step 0 is validation only)."""
    return sorted(
        {int(r["step"]) for r in rows if int(r["step"]) > 0 and r.get(names.SCORE_MEAN) is not None}
    )


def _fmt(value: Any, spec: str) -> str:
    return "n/a" if value is None else format(float(value), spec)


def progress_line(job: Job, row: Mapping[str, Any]) -> str:
    acc = val_accuracy(row)
    val = f"  val {acc:.3f}" if acc is not None else ""
    if int(row["step"]) == 0:
        return f"[study] {job.name} step 0/{job.steps}{val}"
    return (
        f"[study] {job.name} step {row['step']}/{job.steps}  train acc {_fmt(row.get(names.SCORE_MEAN), '.3f')}"
        f"  non-zero adv {_fmt(row.get(names.SIGNAL_FRAC_NONZERO_ADV), '.2f')}"
        f"  {_fmt(row.get(names.STEP_TIME), '.1f')} s{val}"
    )


@dataclass
class _Running:
    job: Job
    popen: subprocess.Popen
    log: Any
    started: float
    shown: set[int] = field(default_factory=set)


def _start(job: Job, launch: Callable[..., subprocess.Popen]) -> _Running:
    if job.out.exists():
        shutil.rmtree(job.out)  # an interrupted run starts over
    job.out.mkdir(parents=True)
    started = time.time()
    _write_json_atomic(
        job.out / RUN_INFO,
        {
            "command": job.command,
            "env": dict(job.env),
            "fingerprint": _jsonable(job.fingerprint),
            "started": started,
        },
    )
    log = open(job.out / LOG, "w")  # noqa: SIM115 - closed when the job ends
    env = {**os.environ, **job.env}
    popen = launch(job.command, cwd=job.cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    return _Running(job, popen, log, started)


def _show_progress(run: _Running, say: Callable[[str], None]) -> list[Mapping[str, Any]]:
    rows = read_metrics_jsonl(run.job.out / METRICS)
    for row in rows:
        step = int(row["step"])
        if step not in run.shown and (step == 0 or row.get(names.SCORE_MEAN) is not None):
            run.shown.add(step)
            say(progress_line(run.job, row))
    return rows


def _finish(run: _Running, say: Callable[[str], None]) -> bool:
    """Record a job that ended; True when it finished its budget."""
    run.log.close()
    rows = _show_progress(run, say)
    steps = training_steps(rows)
    wall = time.time() - run.started
    samples, budget = sample_progress(rows)
    samples_reached = budget is not None and samples >= budget
    reached = samples_reached if run.job.by_samples else len(steps) >= run.job.steps
    ok = run.popen.returncode == 0 and reached
    if ok:
        summary = {
            "fingerprint": _jsonable(run.job.fingerprint),
            "steps": len(steps),
            **({"generated_samples": samples, "sample_budget": budget} if run.job.by_samples else {}),
            "wall_s": round(wall, 2),
            "started": run.started,
            "ended": time.time(),
        }
        _write_json_atomic(run.job.out / SUMMARY, summary)
        say(f"[study] {run.job.name}: finished {len(steps)} steps in {wall / 60:.1f} min")
    else:
        tail = (run.job.out / LOG).read_text(errors="replace").splitlines()[-20:]
        print("\n".join(tail), file=sys.stderr)
        say(
            f"[study] {run.job.name}: FAILED (exit {run.popen.returncode}, {len(steps)}/{run.job.steps} steps "
            f"logged); log {run.job.out / LOG}"
        )
    return ok


def run_jobs(
    jobs: Sequence[Job],
    parallel: int,
    *,
    dry_run: bool = False,
    poll_s: float = 2.0,
    launch: Callable[..., subprocess.Popen] = proc.start_group,
    say: Callable[[str], None] = lambda line: print(line, flush=True),
    start_before: float | None = None,
    clock: Callable[[], float] = time.time,
) -> list[str]:
    """Run every unfinished job, at most ``parallel`` at a time, in ``jobs`` order.

    ``start_before`` (a Unix time): a pre-registered time-based stop; no job starts at or after it
    (running ones finish), and the jobs left are reported, not failed.

    Returns:
        names of the jobs that failed (empty when all finished).

    Raises:
        SystemExit: when some run folders are stale (finished with other settings).
        recipe.proc.Stopped: on SIGTERM/SIGINT/SIGHUP, after every running job has been stopped.
    """
    if parallel < 1:
        raise ValueError(f"parallel must be >= 1, got {parallel}")
    names_seen = [j.name for j in jobs]
    if len(set(names_seen)) != len(names_seen):
        raise ValueError(f"job names must be unique, got {names_seen}")
    states = {j.name: job_state(j) for j in jobs}
    stale = [j for j in jobs if states[j.name] == "stale"]
    if stale:
        raise SystemExit(
            "study: these runs finished with other settings (their summary.json fingerprint differs): "
            + ", ".join(str(j.out) for j in stale)
            + ". Move them away, or give another --runs folder, to run this plan."
        )
    todo = [j for j in jobs if states[j.name] != "done"]
    for i, job in enumerate(jobs, 1):
        if states[job.name] == "done":
            say(f"[study] ({i}/{len(jobs)}) {job.name}: done, skipped")
        elif dry_run:
            say(f"[study] ({i}/{len(jobs)}) {job.name}: " + " ".join(job.command))
    if dry_run or not todo:
        return []
    say(f"[study] {len(todo)} of {len(jobs)} runs to train, {parallel} at a time")
    failures: list[str] = []
    running: list[_Running] = []
    popens: list[subprocess.Popen] = []
    queue = list(todo)
    started = time.time()
    with proc.stop_signals_forwarded(popens):
        while queue or running:
            if queue and start_before is not None and clock() >= start_before:
                say(
                    f"[study] the start deadline passed: {len(queue)} runs not started ({', '.join(j.name for j in queue)})"
                )
                queue.clear()
            while queue and len(running) < parallel:
                run = _start(queue.pop(0), launch)
                running.append(run)
                popens.append(run.popen)
                say(f"[study] started {run.job.name} ({(time.time() - started) / 60:.1f} min in)")
            time.sleep(poll_s)
            for run in list(running):
                _show_progress(run, say)
                if run.popen.poll() is not None:
                    running.remove(run)
                    popens.remove(run.popen)
                    if not _finish(run, say):
                        failures.append(run.job.name)
    say(f"[study] done in {(time.time() - started) / 60:.1f} min; failed: {failures or 'none'}")
    return failures


class NotReady(RuntimeError):
    """A phase cannot start yet (e.g. no tuned learning rates): the message says what to run first."""


def dispatch(commands: Mapping[str, Callable[[Any], int]], action: str, args: Any) -> int:
    """Run ``commands[action](args)``; a stop signal (``recipe.proc.Stopped``) becomes its exit code, and a
    phase that is not ready (:class:`NotReady`) a one-line message and exit code 2.

    The testbed studies' CLIs share this: their runs keep no checkpoint, so a stopped run restarts.
    """
    proc.restore_default_signals()  # a background launch inherits SIGINT ignored (recipe.proc)
    try:
        return commands[action](args)
    except NotReady as not_ready:
        print(f"[study] {action}: {not_ready}", file=sys.stderr)
        return 2
    except proc.Stopped as stop:
        print(
            f"[study] {stop}; the running runs were stopped (they restart from step 0 next time)",
            file=sys.stderr,
        )
        return stop.exit_code
