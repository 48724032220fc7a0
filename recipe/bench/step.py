#!/usr/bin/env python
"""One CPU training step against the machine's limit and against plain PyTorch doing the same work.

    python scripts/bench_step.py                      # 3 quickstart-config steps, then the plain run
    python scripts/bench_step.py --steps 4 actor_rollout_ref.rollout.n=8     # Hydra overrides pass through
    python scripts/bench_step.py --metrics runs/quickstart-copo/metrics.jsonl  # time an existing run
    python scripts/bench_step.py --plain-only     # only the plain side, at issue 17's shapes: today's speed

It prints, side by side and measured in this one invocation:

* the **roofline**: fp32 matmul GFLOP/s at the model's own shapes (every linear layer, lm_head included,
  at one micro-batch of tokens), with the thread settings the trainer's Ray workers use
  (``recipe.cpu_backend.settings.worker_threads``); measured before the project's run, between the two runs and
  after the plain run, and printed beside every wall time;
* per phase of verl's step (``timing_s/gen``, ``old_log_prob``, ``ref``, ``update_actor``,
  ``update_weights``, ``step``; the median over the steps after the first, which also warms up): seconds,
  achieved GFLOP/s (useful FLOPs, the least work the phase needs, the same for both sides: ~2 x params
  x real tokens forward, ~6 x forward + backward, with the LM head counted only at the positions whose
  logits are used, the response's; for a tied model such as SmolLM2 the embedding matrix counts once, as
  the LM head), fraction of the roofline, and the ratio to the plain equivalent;
* the plain equivalent, in a fresh process with the same threads: transformers ``generate`` of the same
  number of sequences with every one forced to the run's longest response (so it does at least the
  rollout's work), a forward-only log-prob pass over the same micro-batches, and forward + backward +
  AdamW over the same mini- and micro-batches (warm like the project's timed steps: one untimed pass
  first, then the median of ``UPDATE_REPEATS``).

Targets (issue 17): each phase <= 1.2x its plain equivalent, a whole step <= 1.3x plain generate + update.
These are printed as ok/MISS; they are never asserted in a timed test (the machine is shared).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from recipe.cpu_backend.roofline import lm_head_params, matmul_params, roofline_gflops
from recipe.files import REPO_ROOT
from recipe.tracking import names

MODULE = "recipe.bench.step"  # python -m MODULE: this file's command line (also its own worker processes)
PHASES = ("gen", "old_log_prob", "ref", "update_actor", "update_weights")
PHASE_TARGET = 1.2
SKIPPED_S = 0.1  # a phase this short did no model pass
STEP_TARGET = 1.3
UPDATE_REPEATS = 3  # plain update passes timed after a warm-up one; the median is reported
NO_VALIDATION = ["trainer.val_before_train=false", "trainer.test_freq=-1", "trainer.save_freq=-1"]


# -- threads -------------------------------------------------------------------------------------
def trainer_threads() -> tuple[int, int]:
    """(intra-op, inter-op) threads of one trainer worker, as recipe/cpu_backend sets them."""
    from recipe.cpu_backend.settings import worker_threads

    return worker_threads()


def set_threads(intra: int, inter: int) -> None:
    import torch

    torch.set_num_threads(intra)
    if inter > 0:
        with contextlib.suppress(RuntimeError):  # already set in this process
            torch.set_num_interop_threads(inter)


def load_snapshot() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f}/{five:.1f} (1/5 min) on {os.cpu_count()} cores"


# -- the plain PyTorch + transformers equivalent -----------------------------------------------------
def plain_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """Time each phase's work with plain transformers (runs in a fresh process)."""
    import torch
    from transformers import AutoModelForCausalLM

    set_threads(spec["intra"], spec["inter"])
    torch.manual_seed(0)
    model_dir = spec["model"]
    rows, prompt_len, resp_len = spec["rows"], spec["prompt_len"], spec["response_len"]
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa")
    vocab = model.config.vocab_size
    out: dict[str, Any] = {"roofline": {}}

    def quick_roofline(phase: str) -> None:  # the machine's speed right before each phase
        out["roofline"][phase] = roofline_gflops(model_dir, tokens=512, repeats=2)

    prompts = torch.randint(100, vocab - 100, (rows, prompt_len))
    model.eval()
    # warm-up: first calls allocate and pick kernels (the project's steps after the first are warm too)
    plain_generate(model, prompts[: spec["micro"]], 2)
    quick_roofline("gen")
    t0, c0 = time.perf_counter(), time.process_time()
    seqs = plain_generate(model, prompts, resp_len)
    out["gen"] = time.perf_counter() - t0
    out["cpu"] = {"gen": time.process_time() - c0}
    out["gen_tokens"] = int(seqs.numel())

    micro = spec["micro"]
    quick_roofline("old_log_prob")
    t0, c0 = time.perf_counter(), time.process_time()
    with torch.no_grad():
        for start in range(0, rows, micro):
            ids = seqs[start : start + micro]
            logits = model(input_ids=ids).logits[:, prompt_len - 1 : -1].float()
            torch.log_softmax(logits, dim=-1).gather(-1, ids[:, prompt_len:, None])
    out["old_log_prob"] = time.perf_counter() - t0
    out["cpu"]["old_log_prob"] = time.process_time() - c0

    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    mini = spec["mini"]
    adv = torch.randn(rows, 1)

    def update_pass() -> None:  # one step's update: every mini-batch, each one optimizer step
        for mb_start in range(0, rows, mini):
            opt.zero_grad(set_to_none=True)
            for start in range(mb_start, min(mb_start + mini, rows), micro):
                ids = seqs[start : start + micro]
                logits = model(input_ids=ids).logits[:, prompt_len - 1 : -1].float()
                logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, prompt_len:, None]).squeeze(-1)
                loss = -(logp * adv[start : start + micro]).mean() * ids.shape[0] / mini
                loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()

    # Warm, like the project's steps after the first: the first pass allocates the gradients and
    # AdamW's state (first-touch page faults); timed cold, the same pass took 11.4-20.0 s here.
    update_pass()
    walls, cpus = [], []
    for _ in range(UPDATE_REPEATS):
        quick_roofline("update_actor")
        t0, c0 = time.perf_counter(), time.process_time()
        update_pass()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    out["update_actor"] = statistics.median(walls)
    out["cpu"]["update_actor"] = statistics.median(cpus)

    # weight sync: a full copy of the weights into a second model
    twin = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa")
    t0 = time.perf_counter()
    twin.load_state_dict(model.state_dict())
    out["update_weights"] = time.perf_counter() - t0
    quick_roofline("end")
    return out


def plain_generate(model: Any, prompts: Any, new_tokens: int) -> Any:
    """What a plain PyTorch sampler does: one prefill, then one cached forward per token, sampling
    each token from softmax(logits) (temperature 1, no top-k/p) for every row, ``new_tokens`` times.

    transformers' own ``generate(do_sample=True)`` was timed at 4x this loop on this machine (its
    per-step logits processors and bookkeeping), so this loop, not ``generate``, is the baseline.
    """
    import torch

    with torch.no_grad():
        out = model(input_ids=prompts, use_cache=True)
        past, tokens = out.past_key_values, [prompts]
        for step in range(new_tokens):
            probs = torch.softmax(out.logits[:, -1, :].float(), dim=-1)
            token = torch.multinomial(probs, 1)
            tokens.append(token)
            if step + 1 < new_tokens:
                out = model(input_ids=token, past_key_values=past, use_cache=True)
                past = out.past_key_values
    return torch.cat(tokens, dim=1)


def run_json_subprocess(args: list[str]) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [sys.executable, "-m", MODULE, *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        raise RuntimeError(f"bench_step subprocess {args[:1]} failed (exit {proc.returncode})")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def roofline_now(model_dir: str, intra: int, inter: int) -> float:
    spec = json.dumps({"model": model_dir, "intra": intra, "inter": inter})
    return float(run_json_subprocess(["--_roofline", spec])["gflops"])


# -- the project's run ---------------------------------------------------------------------------
def composed_workload(overrides: list[str]) -> dict[str, Any]:
    """Batch shapes of the run from the composed Hydra config (the same overrides the run gets)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    args = [o for o in overrides if not o.startswith("--config-name") and o != "copo_cpu"]
    args.append("hydra.searchpath=[pkg://verl.trainer.config]")
    with initialize_config_dir(config_dir=str(REPO_ROOT / "recipe/copo/config"), version_base=None):
        cfg = compose(config_name="copo_cpu", overrides=args)
    arr = cfg.actor_rollout_ref
    n = int(arr.rollout.n)
    micro = arr.actor.get("ppo_micro_batch_size_per_gpu") or 8
    return {
        "n": n,
        "prompts": int(cfg.data.train_batch_size),
        "mini": int(arr.actor.ppo_mini_batch_size) * n,
        "micro": int(micro),
        "model": str(arr.model.path),
    }


def quickstart_overrides(model: str, data: str, out: str, steps: int, extra: list[str]) -> list[str]:
    """The quickstart's own overrides (recipe.quickstart.run), minus validation and checkpoints."""
    from recipe.quickstart import run as quickstart

    args, _ = quickstart.parse_args(["--model", model, "--data", data, "--out", out, "--steps", str(steps)])
    return quickstart.build_overrides(args, [*NO_VALIDATION, *extra])


def run_project(model: str, data: str, out: Path, steps: int, extra: list[str]) -> Path:
    from recipe.quickstart import run as quickstart

    cmd = [sys.executable, "-m", quickstart.MODULE, "--model", model, "--data", data, "--out", str(out)]
    cmd += ["--steps", str(steps), "--label", "bench_step", *NO_VALIDATION, *extra]
    print(f"[bench_step] running {steps} quickstart-config steps (log: {out / 'train.log'})", flush=True)
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT)
    cpu_at_step = watch_cpu_seconds(proc, out / "metrics.jsonl")
    if proc.returncode != 0:
        raise SystemExit(
            f"[bench_step] the project's run failed (exit {proc.returncode}); see {out / 'train.log'}"
        )
    (out / "cpu_seconds.json").write_text(json.dumps(cpu_at_step))
    return out / "metrics.jsonl"


def watch_cpu_seconds(proc: subprocess.Popen, metrics: Path) -> dict[int, float]:
    """CPU seconds used by the whole job (trainer, Ray, workers) when each step's metrics line appears.

    Wall time drifts with whoever else uses the shared cores; CPU seconds count only this job's
    work, so per-step CPU seconds compare with the plain run's even on a busy machine.
    """
    import psutil

    from recipe.tracking.jsonl import read_metrics_jsonl

    root = psutil.Process(proc.pid)
    seen: dict[int, float] = {}
    finished: dict[int, float] = {}  # CPU of processes that exited (kept by pid)
    while proc.poll() is None:
        total = 0.0
        try:
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            procs = []
        for p in procs:
            try:
                t = p.cpu_times()
                finished[p.pid] = t.user + t.system
            except psutil.NoSuchProcess:
                pass
        total = sum(finished.values())
        for row in read_metrics_jsonl(metrics) if metrics.is_file() else []:
            step = int(row.get("step", 0))
            if step > 0 and step not in seen and names.STEP_TIME in row:
                seen[step] = total
        time.sleep(0.5)
    return seen


def project_timings(metrics: Path) -> tuple[dict[str, float], dict[str, float], int]:
    """Median per phase over the steps after the first (all steps if only one), shapes, steps used."""
    from recipe.tracking.jsonl import read_metrics_jsonl

    rows = [r for r in read_metrics_jsonl(metrics) if int(r.get("step", 0)) > 0 and names.STEP_TIME in r]
    if not rows:
        raise SystemExit(f"[bench_step] {metrics} has no training step with timing_s/step")
    used = rows[1:] if len(rows) > 1 else rows
    timings = {}
    for phase in (*PHASES, "step"):
        values = [
            float(r[names.TIMING_PREFIX + phase])
            for r in used
            if r.get(names.TIMING_PREFIX + phase) is not None
        ]
        if values:
            timings[phase] = statistics.median(values)
    shape = {
        key: statistics.mean(float(r[key]) for r in used if r.get(key) is not None)
        for key in (
            names.PROMPT_LENGTH_MEAN,
            names.RESPONSE_LENGTH_MEAN,
            names.RESPONSE_LENGTH_MAX,
            names.PROMPT_LENGTH_MAX,
        )
        if any(r.get(key) is not None for r in used)
    }
    return timings, shape, len(used)


# -- the table ---------------------------------------------------------------------------------------
def phase_flops(params: int, head: int, rows: int, prompt_len: float, resp_len: float) -> dict[str, float]:
    """Useful FLOPs of each phase for ``rows`` sequences: real tokens only, and the LM head (``head`` of
    the ``params``) only at the response positions, where its logits are used."""
    body = 2.0 * (params - head) * rows * (prompt_len + resp_len) + 2.0 * head * rows * resp_len
    return {
        "gen": body,
        "old_log_prob": body,
        "ref": body,
        "update_actor": 3.0 * body,
        "update_weights": 0.0,
    }


def format_table(
    project: dict[str, float],
    plain: dict[str, Any],
    flops: dict[str, float],
    plain_flops: dict[str, float],
    roof_project: float,
) -> list[str]:
    """One row per phase: seconds, GFLOP/s, share of the roofline, the roofline beside each wall time.

    ``ratio`` is project s / plain s. ``adj`` is the same ratio at equal machine speed (each side's
    seconds times the roofline measured around it): the cores are shared, and the speed drifts
    up to 2x within minutes, so the targets are judged on ``adj``.
    """
    roofs = plain["roofline"]

    def gf(f: float, sec: float) -> str:
        return f"{f / sec / 1e9:8.1f}" if sec > 0 and f > 0 else f"{'-':>8}"

    def frac(f: float, sec: float, roof: float) -> str:
        return f"{f / sec / 1e9 / roof:6.0%}" if sec > 0 and f > 0 else f"{'-':>6}"

    head = (
        f"{'phase':<15}{'project s':>10}{'GFLOP/s':>8}{'roof%':>6}{'@GFLOP/s':>9} |"
        f"{'plain s':>8}{'GFLOP/s':>8}{'roof%':>6}{'@GFLOP/s':>9} |{'ratio':>7}{'adj':>7}  target (on adj)"
    )
    lines = [head, "-" * len(head)]

    def row(
        name: str, p: float, f_p: float, q: float | None, f_q: float, roof_q: float, target: float | None
    ):
        left = f"{name:<15}{p:>10.1f}{gf(f_p, p)}{frac(f_p, p, roof_project)}{roof_project:>9.1f} |"
        if not q:
            return left + f"{'-':>8}{'':>23} |"
        ratio = p / q
        adj = (p * roof_project) / (q * roof_q)
        verdict = "" if target is None else f"<= {target}x {'ok' if adj <= target else 'MISS'}"
        return (
            left
            + f"{q:>8.1f}{gf(f_q, q)}{frac(f_q, q, roof_q)}{roof_q:>9.1f} |{ratio:>6.2f}x{adj:>6.2f}x  {verdict}"
        )

    for phase in PHASES:
        if phase not in project:
            continue
        q = plain.get(phase)
        roof_q = roofs.get(phase, roofs.get("end", roof_project))
        if project[phase] < SKIPPED_S:  # e.g. old_log_prob with the rollout's log-probs reused
            lines.append(f"{phase:<15}{project[phase]:>10.2f}  (pass skipped: nothing to compare)")
            continue
        target = None if phase == "update_weights" else PHASE_TARGET
        lines.append(row(phase, project[phase], flops[phase], q, plain_flops.get(phase, 0.0), roof_q, target))
    if "step" in project:
        minimal = plain["gen"] + plain["update_actor"]
        # the plain step's speed: the two phases' rooflines weighted by their seconds
        roof_q = (plain["gen"] * roofs["gen"] + plain["update_actor"] * roofs["update_actor"]) / minimal
        f_p = (
            flops["gen"]
            + flops["update_actor"]
            + (flops["old_log_prob"] if "old_log_prob" in project else 0.0)
        )
        f_q = plain_flops["gen"] + plain_flops["update_actor"]
        lines.append(
            row("step", project["step"], f_p, minimal, f_q, roof_q, STEP_TARGET) + "  (plain: gen + update)"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--_roofline"]:
        spec = json.loads(argv[1])
        set_threads(spec["intra"], spec["inter"])
        print(json.dumps({"gflops": roofline_gflops(spec["model"])}))
        return 0
    if argv[:1] == ["--_plain"]:
        print(json.dumps(plain_worker(json.loads(argv[1]))))
        return 0

    parser = argparse.ArgumentParser(
        prog="bench_step.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=3,
        help="training steps to run (the first is not timed) (default %(default)s)",
    )
    parser.add_argument("--metrics", type=Path, default=None, help="time this run's metrics.jsonl instead")
    parser.add_argument("--model", default=None, help="HF model folder (default: the quickstart's SmolLM2)")
    parser.add_argument(
        "--data", default=None, help="folder with train/val parquet (default: the quickstart's)"
    )
    parser.add_argument("--out", type=Path, default=None, help="run folder (default: a temporary one)")
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    parser.add_argument(
        "--plain-only",
        action="store_true",
        help="time only the plain PyTorch side at --plain-shape (the day's speed in plain work, comparable "
        "across days; the default shape is the one issue 17 timed: 64 s for the update that day)",
    )
    parser.add_argument(
        "--plain-shape",
        default="rows=32,prompt=58,response=64,micro=8,mini=16",
        help="with --plain-only: sequences, prompt and response tokens, micro- and mini-batch sequences (default %(default)s)",
    )
    parser.add_argument(
        "--project-roofline",
        type=float,
        default=None,
        help="with --metrics: the roofline (GFLOP/s) measured when that run ran (default: its summary.json's)",
    )
    args, extra = parser.parse_known_args(argv)

    model = args.model or prepared_model()
    intra, inter = trainer_threads()
    if args.plain_only:
        return plain_only(model, intra, inter, args.plain_shape)
    data = args.data or prepared_data()
    print(
        f"[bench_step] threads per worker: intra-op {intra}, inter-op {inter or 'torch default'}", flush=True
    )
    print(f"[bench_step] {load_snapshot()}", flush=True)
    if args.metrics:
        roof0 = roof1 = args.project_roofline or summary_roofline(args.metrics)
    else:
        roof0 = roofline_now(model, intra, inter)
        print(f"[bench_step] roofline before the project's run: {roof0:.1f} GFLOP/s", flush=True)

    with tempfile.TemporaryDirectory(prefix="bench_step-") as tmp:
        out = args.out or Path(tmp) / "run"
        overrides = quickstart_overrides(model, data, str(out), args.steps, extra)
        workload = composed_workload(overrides)
        metrics = args.metrics or run_project(model, data, out, args.steps, extra)
        project, shape, used = project_timings(metrics)
        cpu_step = project_cpu_per_step(metrics.parent / "cpu_seconds.json")
    load_after_project = load_snapshot()
    if not args.metrics:
        roof1 = roofline_now(model, intra, inter)
    rows = workload["prompts"] * workload["n"]
    prompt_len = shape.get(names.PROMPT_LENGTH_MEAN, 0.0)
    resp_mean = shape.get(names.RESPONSE_LENGTH_MEAN, 0.0)
    resp_max = int(round(shape.get(names.RESPONSE_LENGTH_MAX, resp_mean)))
    spec = {
        "model": model,
        "intra": intra,
        "inter": inter,
        "rows": rows,
        "prompt_len": int(round(prompt_len)),
        "response_len": max(1, resp_max),
        "micro": workload["micro"],
        "mini": workload["mini"],
    }
    print(f"[bench_step] plain PyTorch + transformers on the same work: {json.dumps(spec)}", flush=True)
    plain = run_json_subprocess(["--_plain", json.dumps(spec)])
    load_end = load_snapshot()

    params, head = matmul_params(model), lm_head_params(model)
    flops = phase_flops(params, head, rows, prompt_len, resp_mean)
    plain_flops = phase_flops(params, head, rows, spec["prompt_len"], spec["response_len"])
    roof_project = (roof0 + roof1) / 2
    print()
    print(
        f"bench_step: {rows} sequences/step ({workload['prompts']} prompts x n={workload['n']}), "
        f"prompt {prompt_len:.0f} tokens (mean), response {resp_mean:.0f} mean / {resp_max} max; "
        f"mini-batch {workload['mini']} seqs, micro-batch {workload['micro']}; {params / 1e6:.1f}M matmul params; "
        f"project: median of {used} step(s) after the first"
    )
    print(
        f"roofline (fp32 matmul at the model's shapes, {intra} intra-op threads): {roof0:.1f} before / "
        f"{roof1:.1f} after the project's run; before each plain phase "
        + ", ".join(f"{k} {v:.1f}" for k, v in plain["roofline"].items())
        + " (GFLOP/s)"
    )
    print(f"load: start {load_after_project} after the project, {load_end} at the end")
    for line in format_table(project, plain, flops, plain_flops, roof_project):
        print(line)
    plain_cpu = plain["cpu"]["gen"] + plain["cpu"]["update_actor"]
    if cpu_step is not None:
        print(
            f"CPU seconds (this job's processes only, so other users of the cores do not count): project step "
            f"{cpu_step:.1f} (all its processes) vs plain gen + update {plain_cpu:.1f} "
            f"(gen {plain['cpu']['gen']:.1f}, update {plain['cpu']['update_actor']:.1f}): "
            f"{cpu_step / plain_cpu:.2f}x  <= {STEP_TARGET}x {'ok' if cpu_step / plain_cpu <= STEP_TARGET else 'MISS'}"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "project": project,
                    "plain": plain,
                    "shape": shape,
                    "workload": workload,
                    "roofline": [roof0, roof1],
                    "threads": [intra, inter],
                },
                indent=2,
            )
        )
    return 0


def plain_only(model: str, intra: int, inter: int, shape: str) -> int:
    """Time the plain side alone at ``shape`` and print each phase beside the roofline measured before it."""
    fields = {
        "rows": "rows",
        "prompt": "prompt_len",
        "response": "response_len",
        "micro": "micro",
        "mini": "mini",
    }
    try:
        given = dict(item.split("=", 1) for item in shape.split(","))
        spec = {fields[key]: int(value) for key, value in given.items()}
    except (KeyError, ValueError) as exc:
        raise SystemExit(
            f"[bench_step] --plain-shape {shape!r}: expected {','.join(f'{k}=N' for k in fields)}"
        ) from exc
    missing = sorted(key for key, name in fields.items() if name not in spec)
    if missing:
        raise SystemExit(f"[bench_step] --plain-shape {shape!r} lacks {missing}")
    spec.update(model=model, intra=intra, inter=inter)
    print(
        f"[bench_step] plain PyTorch + transformers only: {json.dumps(spec)}; {load_snapshot()}", flush=True
    )
    plain = run_json_subprocess(["--_plain", json.dumps(spec)])
    for phase in ("gen", "old_log_prob", "update_actor"):
        cpu = plain["cpu"].get(phase)
        print(
            f"{phase:<13} {plain[phase]:7.1f} s (CPU {cpu:.1f} s)  roofline before it "
            f"{plain['roofline'][phase]:.1f} GFLOP/s"
        )
    print(f"roofline at the end {plain['roofline']['end']:.1f} GFLOP/s; {load_snapshot()}")
    return 0


def project_cpu_per_step(path: Path) -> float | None:
    """Median CPU seconds between consecutive steps' metrics lines (steps after the first)."""
    if not path.is_file():
        return None
    at = {int(k): v for k, v in json.loads(path.read_text()).items()}
    diffs = [at[s] - at[s - 1] for s in sorted(at) if s - 1 in at]
    return statistics.median(diffs) if diffs else None


def summary_roofline(metrics: Path) -> float:
    """The roofline a quickstart run measured before and after training (its summary.json)."""
    summary = metrics.parent / "summary.json"
    values = json.loads(summary.read_text()).get("roofline_gflops") if summary.is_file() else None
    if not values:
        raise SystemExit(
            f"[bench_step] {summary} holds no roofline_gflops: pass --project-roofline with the GFLOP/s "
            "measured when that run ran"
        )
    return sum(values) / len(values)


def prepared_model() -> str:
    from recipe.models.smollm2 import prepare

    return str(prepare())


def prepared_data(train: int = 256, val: int = 32, seed: int = 0) -> str:
    from recipe.cache import cache_root

    data = cache_root() / "data" / f"bench-arith-n{train}-v{val}-s{seed}"
    if not (data / "train.parquet").is_file():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "data_prep",
                "reasoning_gym",
                "--tasks",
                "basic_arithmetic@easy,chain_sum@easy",
                "--size",
                str(train),
                "--val-size",
                str(val),
                "--seed",
                str(seed),
                "--out",
                str(data),
            ],
            cwd=REPO_ROOT,
            check=True,
        )
    return str(data)


if __name__ == "__main__":
    sys.exit(main())
