"""What the preflight measures on the actor: parity, speed, memory and the log-prob ops per token.

Every number is measured in this process on this device; nothing is estimated except the fixed
cost per update, which is the intercept of a line through two measured updates (all sequences and
the first half of them).
"""

from __future__ import annotations

import resource
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from recipe.preflight.actor import Actor, tokens

# The log-softmax family, as kernels (not their dispatching wrappers): verl's per-token fallback
# (logprobs_from_logits_v2) calls one forward and one backward of these per token.
LOG_SOFTMAX_OPS = frozenset(
    {
        "aten::_log_softmax",
        "aten::_log_softmax_backward_data",
        "aten::_softmax",
        "aten::_softmax_backward_data",
        "aten::logsumexp",
    }
)
# The loop is back when ops per token reach this (the loop makes >= 1 per token forward alone).
LOOP_OPS_PER_TOKEN = 0.5


def grad_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """max over tensors of max|a - b| / max|a| (the issue's measure); 0 when both are zero."""
    worst = 0.0
    for name, ga in a.items():
        scale = ga.abs().max().item()
        diff = (ga - b[name]).abs().max().item()
        worst = max(worst, diff / scale if scale > 0 else diff)
    return worst


def dtype_floor(dtype: torch.dtype) -> float:
    """The smallest difference worth calling a mismatch when the noise floor is 0 (a deterministic
    device): a few units of rounding of the compute dtype, since COPO's loss and verl's add the
    same terms in another order."""
    return 4 * torch.finfo(dtype).eps


@dataclass
class Parity:
    noise: float  # vanilla against vanilla, run twice
    copo: float  # COPO (local weight 1) against vanilla
    loss_diff: float  # |sum of micro-batch losses|, COPO - vanilla, relative
    bound: float

    @property
    def ok(self) -> bool:
        return self.copo <= self.bound and self.loss_diff <= self.bound


def parity(actor: Actor, data: Any, compute_dtype: torch.dtype) -> Parity:
    """COPO's loss with local weight 1 against verl's vanilla ``ppo_loss``, same weights and batch."""
    loss_a, grads_a = actor.gradients(data, "vanilla")
    _, grads_b = actor.gradients(data, "vanilla")
    loss_c, grads_c = actor.gradients(data, "copo")
    noise = grad_difference(grads_a, grads_b)
    total_a, total_c = sum(loss_a), sum(loss_c)
    loss_diff = abs(total_c - total_a) / max(abs(total_a), 1e-12)
    return Parity(
        noise, grad_difference(grads_a, grads_c), loss_diff, max(1.5 * noise, dtype_floor(compute_dtype))
    )


@dataclass
class Speed:
    update_s: dict[str, float]  # median seconds per update, by loss
    tokens: int
    micro_batches: int
    fixed_s: float  # intercept of update time against tokens
    log_prob_s: float
    flops_per_update: float
    flop_formula: str
    peak_tflops: float
    peak_memory_gib: float
    samples: dict[str, list[float]] = field(default_factory=dict)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.update_s["copo"]

    @property
    def mfu(self) -> float:
        return self.flops_per_update / self.update_s["copo"] / (self.peak_tflops * 1e12)

    @property
    def copo_over_vanilla(self) -> float:
        return self.update_s["copo"] / self.update_s["vanilla"]


def update_flops(matmul_params: int, n_tokens: int, checkpointing: bool) -> tuple[float, str]:
    """Useful FLOPs of one update and the formula: 2 N per token forward, 4 N backward, 2 N again
    when gradient checkpointing recomputes the forward (attention scores not counted)."""
    factor = 8 if checkpointing else 6
    formula = (
        f"{factor} x N x tokens ({'fwd 2 + recompute 2 + bwd 4' if checkpointing else 'fwd 2 + bwd 4'}; "
        f"N = {matmul_params / 1e9:.3f}B matmul weights incl. LM head, attention scores not counted)"
    )
    return factor * matmul_params * n_tokens, formula


def matmul_peak_tflops(device: str, dtype: torch.dtype) -> float:
    """This device's measured matmul speed in ``dtype`` (square products; best of 5 after warm-up)."""
    n = 8192 if device == "cuda" else 1024
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    best = float("inf")
    for i in range(8):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        torch.mm(a, b)
        if device == "cuda":
            torch.cuda.synchronize()
        if i >= 3:
            best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e12


def peak_memory_gib(device: str) -> float:
    """Peak device memory allocated (CUDA) or the process's peak resident memory (CPU)."""
    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def speed(actor: Actor, data: Any, half: Any, repeats: int, matmul_params: int, peak_tflops: float) -> Speed:
    """Updates alternating COPO and vanilla (after one untimed warm-up each), a half-batch update
    for the fixed cost, and the log-prob pass; medians of ``repeats``."""
    if actor.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    samples: dict[str, list[float]] = {"copo": [], "vanilla": [], "half": [], "log_prob": []}
    micro = 0
    for loss in ("copo", "vanilla"):
        actor.update(data, loss)
    for _ in range(repeats):
        for loss in ("copo", "vanilla"):
            seconds, micro = actor.update(data, loss)
            samples[loss].append(seconds)
        samples["half"].append(actor.update(half, "copo")[0])
        samples["log_prob"].append(actor.log_prob_pass(data)[0])
    median = {k: statistics.median(v) for k, v in samples.items()}
    full_tokens, half_tokens = tokens(data), tokens(half)
    slope = (median["copo"] - median["half"]) / max(full_tokens - half_tokens, 1)
    checkpointing = bool(actor.config.actor_rollout_ref.model.get("enable_gradient_checkpointing", False))
    flops, formula = update_flops(matmul_params, full_tokens, checkpointing)
    return Speed(
        update_s={"copo": median["copo"], "vanilla": median["vanilla"]},
        tokens=full_tokens,
        micro_batches=micro,
        fixed_s=median["copo"] - slope * full_tokens,
        log_prob_s=median["log_prob"],
        flops_per_update=flops,
        flop_formula=formula,
        peak_tflops=peak_tflops,
        peak_memory_gib=peak_memory_gib(actor.device),
        samples=samples,
    )


@dataclass
class OpCount:
    calls: int
    tokens: int
    micro_batches: int

    @property
    def per_token(self) -> float:
        return self.calls / self.tokens

    @property
    def loop(self) -> bool:
        return self.per_token >= LOOP_OPS_PER_TOKEN


def count_log_softmax_ops(actor: Actor, data: Any) -> OpCount:
    """Log-softmax-family op calls in one COPO update, counted with torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        _, micro = actor.update(data, "copo")
    calls = sum(1 for event in prof.events() if event.name in LOG_SOFTMAX_OPS)
    return OpCount(calls, tokens(data), micro)
