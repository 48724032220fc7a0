#!/usr/bin/env python
"""Run COPO (or GRPO) with verl's real trainer on CPU and report progress from metrics.jsonl.

Called by scripts/quickstart.sh after the model and data are prepared; usable on its own:

    python scripts/quickstart_run.py --model DIR --data DIR --out DIR [--steps N] [--algo copo|grpo] \
        [hydra.override=value ...]

The trainer's own (very verbose) output goes to ``<out>/train.log``; this script prints one
line per training step read from ``<out>/metrics.jsonl`` (written by recipe/copo/trainer.py), then
a summary with validation accuracy before and after training.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from recipe.cpu_backend import worker_threads
from recipe.cpu_backend.roofline import roofline_gflops
from recipe.tracking import names
from recipe.tracking.jsonl import read_metrics_jsonl, val_accuracy

REPO_ROOT = Path(__file__).resolve().parents[1]
VAL_DIR = "val_generations"

SCORE_KEY = names.SCORE_MEAN
REWARD_KEY = names.REWARD_MEAN
STEP_TIME_KEY = names.STEP_TIME
# COPO's consistency entropy of the groups' answers (bits); verl's token entropy for other algos.
ENTROPY_KEYS = ((names.COPO_ENTROPY_MEAN, "answer-entropy"), (names.TOKEN_ENTROPY, "token-entropy"))
ZERO_VAR_KEYS = (names.SIGNAL_FRAC_ZERO_VARIANCE,)


# Command-line options that map onto a copo_cpu.yaml key; unset (None) means the YAML's default.
WORKLOAD_KEYS = {
    "batch": "data.train_batch_size",
    "mini_batch": "actor_rollout_ref.actor.ppo_mini_batch_size",
    "n": "actor_rollout_ref.rollout.n",
    "prompt_length": "data.max_prompt_length",
    "response_length": "data.max_response_length",
    "lr": "actor_rollout_ref.actor.optim.lr",
}


def build_overrides(args: argparse.Namespace, extra: list[str]) -> list[str]:
    """Hydra overrides of the default job; ``extra`` (the user's) come last and win.

    The workload (group size, batch and mini-batch sizes, micro-batches, lengths, lr, the CPU
    shortcuts) is copo_cpu.yaml's: this adds only the paths, the step count and what a step-count
    run needs (validation before and at the end, a checkpoint at the end), seeds, and the options
    the user gave explicitly.
    """
    out = Path(args.out).resolve()
    data = Path(args.data).resolve()
    algo = (
        ["algorithm.adv_estimator=copo", "actor_rollout_ref.actor.policy_loss.loss_mode=copo"]
        if args.algo == "copo"
        else ["algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla"]
    )
    workload = [
        f"{key}={getattr(args, name)}"
        for name, key in WORKLOAD_KEYS.items()
        if getattr(args, name, None) is not None
    ]
    if getattr(args, "mini_batch", None) == 0:  # one optimizer update per step: the whole step batch
        workload = [w for w in workload if not w.startswith(WORKLOAD_KEYS["mini_batch"] + "=")]
        workload.append(WORKLOAD_KEYS["mini_batch"] + "=${data.train_batch_size}")
    return [
        "--config-name",
        "copo_cpu",
        *algo,
        f"actor_rollout_ref.model.path={Path(args.model).resolve()}",
        f"data.train_files={data / 'train.parquet'}",
        f"data.val_files={data / 'val.parquet'}",
        *workload,
        f"trainer.total_training_steps={args.steps}",
        "trainer.total_epochs=1000",
        "trainer.val_before_train=true",
        f"trainer.test_freq={args.steps}",
        f"trainer.save_freq={args.steps}",
        f"trainer.default_local_dir={out / 'checkpoints'}",
        f"trainer.metrics_jsonl={out / 'metrics.jsonl'}",
        # per-prompt validation scores (before.jsonl = 0.jsonl, after = <steps>.jsonl) for the CI
        f"trainer.validation_data_dir={out / VAL_DIR}",
        "trainer.project_name=copo-quickstart",
        f"trainer.experiment_name={args.algo}",
        f"data.seed={args.seed}",
        f"actor_rollout_ref.rollout.seed={args.seed}",
        *extra,
    ]


def stop_process_group(proc: subprocess.Popen, grace_s: float = 20.0) -> None:
    """Stop the trainer's process group: SIGINT (verl and Ray shut down cleanly), then SIGTERM, then
    SIGKILL, each after a grace period, so that no Ray worker outlives an interrupted quickstart."""
    for sig, wait_s in ((signal.SIGINT, grace_s), (signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def machine_speed(model: str) -> float:
    """The roofline (fp32 matmul GFLOP/s at the model's shapes, the trainer's threads), quickly."""
    import torch

    torch.set_num_threads(worker_threads()[0])
    return roofline_gflops(model, tokens=512, repeats=2)


def load_text() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f} / {five:.1f} (1 / 5 min) on {os.cpu_count()} cores"


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


def paired_bootstrap_ci(
    before: list[float], after: list[float], *, resamples: int = 10000, seed: int = 0, level: float = 0.95
) -> tuple[float, float, float]:
    """Mean of (after - before) over paired prompts and its percentile bootstrap interval."""
    import numpy as np

    diff = np.asarray(after, dtype=float) - np.asarray(before, dtype=float)
    if diff.size == 0:
        raise ValueError("no paired validation prompts")
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, diff.size, size=(resamples, diff.size))].mean(axis=1)
    tail = (1.0 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(diff.mean()), float(low), float(high)


def mcnemar_p(improved: int, worsened: int) -> float:
    """Exact two-sided McNemar p-value: the discordant pairs against Binomial(k, 1/2)."""
    k = improved + worsened
    if k == 0:
        return 1.0
    tail = sum(math.comb(k, i) for i in range(min(improved, worsened) + 1)) / 2**k
    return min(1.0, 2 * tail)


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
    mean, low, high = paired_bootstrap_ci(b, a)
    improved = sum(1 for x, y in zip(b, a, strict=True) if y > x)
    worsened = sum(1 for x, y in zip(b, a, strict=True) if y < x)
    return {
        "prompts": len(prompts),
        "before": sum(b) / len(b),
        "after": sum(a) / len(a),
        "diff": mean,
        "ci95": [low, high],
        "improved": improved,
        "worsened": worsened,
        "mcnemar_p": mcnemar_p(improved, worsened),
    }


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


def run(args: argparse.Namespace, extra: list[str]) -> int:
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    metrics = out / "metrics.jsonl"
    if (out / "summary.json").is_file():
        # A finished run: start a new one (resuming it would train nothing). An interrupted run
        # has no summary.json and resumes from its last checkpoint (trainer.resume_mode=auto).
        print(f"[{args.label}] {out} holds a finished run; starting a new one there", flush=True)
        shutil.rmtree(out / "checkpoints", ignore_errors=True)
        shutil.rmtree(out / VAL_DIR, ignore_errors=True)
        for name in ("metrics.jsonl", "summary.json"):
            (out / name).unlink(missing_ok=True)
    log_path = out / "train.log"
    cmd = [sys.executable, "-m", "recipe.copo.main_copo", *build_overrides(args, extra)]
    (out / "command.txt").write_text(" ".join(cmd) + "\n")
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.setdefault("WANDB_MODE", "disabled")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("PYTHONUNBUFFERED", "1")
    # The CPU backend must be in place before verl resolves its platform in the driver.
    env["VERL_PLATFORM"] = "cpu"
    env["VERL_USE_EXTERNAL_MODULES"] = "recipe.cpu_backend"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    if env.get("CUDA_VISIBLE_DEVICES") == "":
        del env["CUDA_VISIBLE_DEVICES"]

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
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            while True:
                done = proc.poll() is not None
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
        except KeyboardInterrupt:
            stop_process_group(proc)
            raise
    wall = time.time() - started
    load_end = load_text()
    roofline_end = machine_speed(args.model)
    if proc.returncode != 0:
        tail = log_path.read_text(errors="replace").splitlines()[-40:]
        print("\n".join(tail), file=sys.stderr)
        print(
            f"[{args.label}] training FAILED (exit {proc.returncode}); full log: {log_path}", file=sys.stderr
        )
        return proc.returncode or 1
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
    tmp = out / "summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2) + "\n")
    os.replace(tmp, out / "summary.json")
    print(f"[{args.label}] metrics (one JSON line per step): {metrics}")
    print(f"[{args.label}] checkpoint: {out / 'checkpoints'}")
    print(f"[{args.label}] tensorboard: tensorboard --logdir {summary['tensorboard']}")
    print(f"[{args.label}] summary: {out / 'summary.json'}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", required=True, help="HF model folder")
    parser.add_argument("--data", required=True, help="folder with train.parquet and val.parquet")
    parser.add_argument("--out", required=True, help="run folder (metrics, checkpoints, log)")
    parser.add_argument("--steps", type=int, default=8, help="training steps (default 8)")
    parser.add_argument("--algo", choices=["copo", "grpo"], default="copo")
    yaml = "default: copo_cpu.yaml's"
    parser.add_argument("--batch", type=int, default=None, help=f"prompts per step ({yaml})")
    parser.add_argument(
        "--mini-batch",
        type=int,
        default=None,
        help=f"prompts per optimizer update, 0 for the whole step ({yaml})",
    )
    parser.add_argument("--n", type=int, default=None, help=f"responses per prompt ({yaml})")
    parser.add_argument("--prompt-length", type=int, default=None, help=f"data.max_prompt_length ({yaml})")
    parser.add_argument(
        "--response-length", type=int, default=None, help=f"data.max_response_length ({yaml})"
    )
    parser.add_argument("--lr", type=float, default=None, help=f"actor learning rate ({yaml})")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--label", default="quickstart", help="prefix of the printed lines")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    bad = [e for e in extra if e.startswith("-")]
    if bad:
        parser.error(f"unknown option(s) {bad}; Hydra overrides look like key=value")
    # SIGTERM (a scheduler, `kill`) stops the trainer the same way as Ctrl-C
    signal.signal(signal.SIGTERM, _raise_interrupt)
    return run(args, extra)


if __name__ == "__main__":
    sys.exit(main())
