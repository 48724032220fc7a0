"""The preflight's one table: a row per check, its value, a verdict and what to do about it."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Any

from recipe.preflight.environment import Environment

# issue 28's targets for the full-size 3B actor on an H100/H200-class GPU
MFU_TARGET = 0.35
FIXED_TARGET_S = 0.5
RATIO_TARGET = 1.02
FAILING = ("FAIL",)


@dataclass
class Row:
    section: str
    item: str
    value: str
    verdict: str = ""  # ok | FAIL | MISS (a speed target) | WARN | SKIP | "" (information)
    note: str = ""


def environment_rows(env: Environment) -> list[Row]:
    gpu = f"{env.gpu} ({env.gpu_memory_gib:.0f} GiB)" if env.gpu else "none"
    rows = [
        Row(
            "environment", "GPU", gpu, "" if env.gpu else "SKIP", "" if env.gpu else "CPU run: the tiny model"
        ),
        Row("environment", "python / torch / CUDA", f"{env.python} / {env.torch} / {env.cuda or '-'}"),
    ]
    for p in env.packages.values():
        if p.module == "torch" and p.ok:
            continue  # its version is in the row above
        optional = "optional" in p.needed_by
        verdict = ("WARN" if p.verl_wants else "ok") if p.ok else ("SKIP" if optional else "FAIL")
        note = "" if p.ok else f"needed by {p.needed_by}: {p.install}. {p.error}"
        if p.verl_wants:
            note = f"outside verl 0.9.1's requirement {p.verl_wants}: untested with verl; pip install '{p.verl_wants}'"
        rows.append(Row("environment", p.module, p.version if p.ok else "does not import", verdict, note))
    return rows


def _target(ok: bool, judged: bool) -> str:
    return ("ok" if ok else "MISS") if judged else ""


def actor_rows(result: dict[str, Any], judged: bool) -> list[Row]:
    """Rows of the actor stage; ``judged``: compare with the GPU targets (full model on a GPU)."""
    s, p, o, v = result["settings"], result["parity"], result["ops"], result["speed"]
    target_note = "" if judged else "targets apply to the full model on an H100/H200-class GPU"
    rows = [
        Row(
            "model",
            "random weights",
            f"{result['params'] / 1e9:.3f}B params, {result['matmul_params'] / 1e9:.3f}B in matmuls",
            note=f"{result['model_dir']} (built/reused in {result['model_s']:.1f} s)",
        ),
        Row(
            "actor",
            "engine (as the worker builds it)",
            s["engine"],
            note=f"built in {result['build_s']:.1f} s",
        ),
        Row("actor", "attention", s["attention"]),
        Row("actor", "fused log-probs / micro-batches", f"{s['fused_kernels']} / {s['micro_batches']}"),
        Row("actor", "dtype / grad checkpointing", f"{s['compute_dtype']} / {s['gradient_checkpointing']}"),
        Row(
            "workload",
            "one update",
            f"{result['sequences']} sequences, {result['tokens']} tokens, {v['micro_batches']} micro-batch(es)",
        ),
        Row(
            "parity",
            "COPO (local weight 1) vs vanilla",
            f"grads {p['copo']:.2g}, loss {p['loss_diff']:.2g} (noise floor {p['noise']:.2g})",
            "ok" if p["ok"] else "FAIL",
            f"max|a-b|/max|a| over tensors; bound {p['bound']:.2g} = max(1.5 x vanilla vs vanilla, rounding)",
        ),
        Row(
            "log-probs",
            "log-softmax-family ops",
            f"{o['calls']} calls, {o['per_token']:.3f} per token, {o['calls'] / o['micro_batches']:.1f} per micro-batch",
            "FAIL" if o["loop"] else "ok",
            "a per-token loop makes >= 2 per token (verl's logprobs_from_logits_v2)" if o["loop"] else "",
        ),
        Row(
            "speed",
            "update time COPO / vanilla",
            f"{v['update_s']['copo']:.3f} s / {v['update_s']['vanilla']:.3f} s = {v['copo_over_vanilla']:.3f}",
            _target(v["copo_over_vanilla"] <= RATIO_TARGET, judged),
            f"target <= {RATIO_TARGET}; {target_note}".rstrip("; "),
        ),
        Row("speed", "tokens/s (update)", f"{v['tokens_per_s']:,.0f}"),
        Row(
            "speed",
            "MFU",
            f"{v['mfu']:.1%} of {v['peak_tflops']:.1f} TFLOP/s (measured {s['compute_dtype']} matmul)",
            _target(v["mfu"] >= MFU_TARGET, judged),
            f"FLOPs = {v['flop_formula']}; target >= {MFU_TARGET:.0%}",
        ),
        Row(
            "speed",
            "fixed cost per update",
            f"{v['fixed_s']:.3f} s",
            _target(v["fixed_s"] <= FIXED_TARGET_S, judged),
            f"intercept of update time vs tokens (all / half the sequences); target <= {FIXED_TARGET_S} s",
        ),
        Row("speed", "log-prob pass (with entropy)", f"{v['log_prob_s']:.3f} s"),
        Row(
            "memory",
            "peak",
            f"{v['peak_memory_gib']:.2f} GiB",
            note="device allocated (CUDA) / process RSS (CPU)",
        ),
    ]
    return rows


def render(rows: list[Row], width: int = 110) -> str:
    """A plain-text table: section | item | value | verdict, each note wrapped on the lines below."""
    w_section = max(len(r.section) for r in rows)
    w_item = max(len(r.item) for r in rows)
    w_value = min(max(len(r.value) for r in rows), width - w_section - w_item - 12)
    lines = [f"{'stage':<{w_section}}  {'check':<{w_item}}  {'result':<{w_value}}  verdict", "-" * width]
    for r in rows:
        value = textwrap.wrap(r.value, w_value) or [""]
        lines.append(f"{r.section:<{w_section}}  {r.item:<{w_item}}  {value[0]:<{w_value}}  {r.verdict}")
        indent = " " * (w_section + w_item + 4)
        lines += [f"{indent}{more}" for more in value[1:]]
        if r.note:
            lines += [f"{indent}  {n}" for n in textwrap.wrap(r.note, width - len(indent) - 2)]
    return "\n".join(lines)


def failed(rows: list[Row]) -> list[Row]:
    return [r for r in rows if r.verdict in FAILING]
