"""``scripts/gpu_check.py``: the preflight's stages in order, each in a child process, then one table.

1. environment (``environment.probe``): GPU, torch/CUDA, which packages import;
2. actor (``actor_stage``): random weights of the run's model shape, the run's actor as verl's
   worker builds it, parity / speed / memory / log-prob ops;
3. trainer (``trainer_run``): two full steps of the run on this device (vLLM when it imports,
   else the hf rollout), a checkpoint.

A stage that cannot run is a row saying why and what to install. Exit status 0 when nothing
FAILed (speed targets that are missed are MISS, reported, not failed), 1 otherwise, 128+signal
when stopped (every child process group is stopped first).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from recipe.files import REPO_ROOT
from recipe.preflight.environment import Environment, probe
from recipe.preflight.report import Row, actor_rows, environment_rows, failed, render
from recipe.proc import Stopped, restore_default_signals, start_group, stop_signals_forwarded

DEFAULT_OUT = "outputs/gpu_check"


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="gpu_check.py",
        description="GPU preflight: the named run's actor and two trainer steps on this one device, "
        "with random weights of its model's shape (nothing is downloaded).",
    )
    parser.add_argument(
        "--config-name", required=True, help="a run in recipe/copo/config, e.g. copo_qwen2.5_3b"
    )
    parser.add_argument(
        "--model", help="model shape: a known hub id or a local folder (default: the run's model)"
    )
    parser.add_argument(
        "--tiny", action="store_true", help="two narrow layers of the model's vocabulary (default on CPU)"
    )
    parser.add_argument("--sequences", type=int, help="sequences per update (default 32; tiny 8)")
    parser.add_argument("--repeats", type=int, help="timed updates of each loss (default 3; tiny 1)")
    parser.add_argument("--skip-trainer", action="store_true", help="stop after the actor stage")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"models, logs and results [{DEFAULT_OUT}]")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds for each child stage [1200]")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of the run (key=value)")
    args = parser.parse_args(argv)
    for name in ("sequences", "repeats"):
        value = getattr(args, name)
        if value is not None and value < (2 if name == "sequences" else 1):
            parser.error(f"--{name} must be >= {2 if name == 'sequences' else 1}, got {value}")
    return args


def log(message: str) -> None:
    print(f"[gpu_check] {message}", file=sys.stderr, flush=True)


def run_child(cmd: list[str], log_path: Path, timeout_s: float, env: dict[str, str], procs: list) -> int:
    """Run ``cmd`` in its own process group, output to ``log_path``; stopped as a group on timeout."""
    from recipe.proc import stop_group

    with open(log_path, "w") as out:
        proc = start_group(cmd, stdout=out, stderr=out, env=env)
        procs.append(proc)
        try:
            return proc.wait(timeout=timeout_s)
        except BaseException:
            stop_group(proc, grace_s=10)
            raise


def actor_stage(
    args: argparse.Namespace, env: Environment, out: Path, procs: list
) -> tuple[list[Row], dict | None]:
    from recipe.preflight.run_config import named_model
    from recipe.preflight.shapes import model_shape

    name = args.model or named_model(args.config_name, args.overrides)
    tiny = args.tiny or env.device == "cpu"
    spec = {
        "config": args.config_name,
        "overrides": args.overrides,
        "shape": model_shape(name, tiny=tiny),
        "models_root": str(out / "models"),
        "device": env.device,
        "sequences": args.sequences or (8 if tiny else 32),
        "repeats": args.repeats or (1 if tiny else 3),
        "tiny": tiny,
        "flash_attn": env.has("flash_attn"),
    }
    log(
        f"actor stage: {'a tiny model of ' if tiny else ''}{name}'s shape on {env.device} (log: {out / 'actor.log'})"
    )
    result_path = out / "actor.json"
    result_path.unlink(missing_ok=True)
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "recipe.preflight.actor_stage", json.dumps(spec), str(result_path)]
    root = str(REPO_ROOT)  # this checkout, importable without `pip install -e`
    env_vars = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p),
    }
    rc = run_child(cmd, out / "actor.log", args.timeout, env_vars, procs)
    if rc != 0 or not result_path.is_file():
        tail = (out / "actor.log").read_text(errors="replace").strip().splitlines()[-3:]
        return [
            Row("actor", "stage", f"exit {rc}", "FAIL", f"{out / 'actor.log'}: " + " | ".join(tail))
        ], None
    result = json.loads(result_path.read_text())
    log(f"actor stage done in {time.perf_counter() - start:.0f} s")
    rows = actor_rows(result, judged=not tiny and env.device == "cuda")
    rows[0].item = f"random weights ({'tiny ' if tiny else ''}{name})"
    return rows, result


def trainer_stage(
    args: argparse.Namespace, env: Environment, model_dir: str, out: Path, procs: list
) -> list[Row]:
    from recipe.preflight.trainer_run import run_spec, run_trainer, trainer_env

    rollout = "vllm" if env.device == "cuda" and env.has("vllm") else "hf"
    why = (
        "vLLM imports"
        if rollout == "vllm"
        else "vLLM does not import here"
        if env.device == "cuda"
        else "CPU"
    )
    work = out / "trainer"
    tiny = args.tiny or env.device == "cpu"
    spec = run_spec(args.config_name, Path(model_dir), work, env.device, rollout, tiny, base=args.overrides)
    log(f"trainer stage: 2 steps of {args.config_name}, rollout {rollout} (log: {work / 'trainer.log'})")
    result = run_trainer(spec, work, timeout_s=args.timeout, env=trainer_env(env.device))
    value = f"{result.steps} step(s) in {result.seconds:.0f} s, rollout {rollout} ({why})"
    note = (
        f"checkpoint {result.checkpoint}; log {result.log}"
        if result.ok
        else f"{result.reason}; log {result.log}"
    )
    return [
        Row(
            "trainer",
            "Ray + rollout + reward + COPO step + checkpoint",
            value,
            "ok" if result.ok else "FAIL",
            note,
        )
    ]


def main(argv: list[str] | None = None) -> int:
    restore_default_signals()  # a background launch inherits SIGINT ignored (recipe.proc)
    args = parse(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    procs: list = []
    try:
        with stop_signals_forwarded(procs):
            log("environment: probing imports")
            env = probe()
            rows = environment_rows(env)
            missing = env.missing_for_actor()
            result = None
            if missing:
                why = ", ".join(p.module for p in missing)
                rows.append(Row("actor", "stage", "not run", "SKIP", f"{why} do(es) not import: see above"))
            else:
                actor, result = actor_stage(args, env, out, procs)
                rows += actor
            if args.skip_trainer:
                rows.append(Row("trainer", "stage", "not run", "SKIP", "--skip-trainer"))
            elif result is None:
                rows.append(Row("trainer", "stage", "not run", "SKIP", "needs the actor stage's model"))
            else:
                rows += trainer_stage(args, env, result["model_dir"], out, procs)
    except Stopped as stop:
        log(f"stopped by signal {stop.signum}; child processes stopped")
        return stop.exit_code
    table = render(rows)
    print(table, flush=True)
    (out / "table.txt").write_text(table + "\n")
    bad = failed(rows)
    if bad:
        log(f"{len(bad)} check(s) failed: " + ", ".join(f"{r.section}/{r.item}" for r in bad))
    return 1 if bad or missing else 0
