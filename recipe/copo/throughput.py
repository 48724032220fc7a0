"""The actor's throughput settings: attention, packed sequences, token budgets, fused log-probs.

paper_base.yaml ships verl's throughput settings (verl docs/perf/perf_tuning.rst):

* ``actor_rollout_ref.model.override_config.attn_implementation: auto`` and
  ``actor_rollout_ref.model.use_remove_padding: auto``. :func:`resolve_attention` turns them into
  ``flash_attention_2`` on packed sequences when flash-attn imports, else ``sdpa`` on padded
  micro-batches, and says which at start-up. Without flash-attn's variable-length kernel a packed
  row would reach SDPA as one long sequence with a block-diagonal mask (transformers builds it
  from the restarting position ids): attention over the whole row, quadratic in its length.
* dynamic micro-batches with token budgets (``use_dynamic_bsz``, ``ppo_max_token_len_per_gpu``,
  ``log_prob_max_token_len_per_gpu``): :func:`check_throughput` refuses a budget that one sequence
  of ``data.max_prompt_length + data.max_response_length`` tokens would overflow (verl asserts it
  mid-step, in a worker) and a log-prob pass whose dynamic setting differs from the actor's (verl's
  worker asserts that at start-up, without naming the keys).
* ``actor_rollout_ref.model.use_fused_kernels: true`` with ``fused_kernel_options.impl_backend:
  torch``: verl's chunked LM head + log-prob + entropy (verl/utils/experimental/torch_functional.py).
  Without flash-attn's Triton cross-entropy, verl's plain path computes the log-probs with
  ``logprobs_from_logits_v2``, a Python loop over the (tokens, vocab) rows: one log-softmax forward
  and one backward per token. The fused path runs a few vectorised ops per 512-token chunk and
  never holds the whole (tokens, vocab) logits (tests/recipe/preflight/test_logprob_ops.py).

``resolve_attention`` is called by ``recipe.copo.main_copo`` (and by ``config_check.compose_and_validate``
and the GPU preflight), so the run that is validated is the run that trains.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from copo_core.config import ConfigError

AUTO = "auto"
ATTN_KEY = "actor_rollout_ref.model.override_config.attn_implementation"
PACKED_KEY = "actor_rollout_ref.model.use_remove_padding"
FUSED_KEY = "actor_rollout_ref.model.use_fused_kernels"
FUSED_BACKEND_KEY = "actor_rollout_ref.model.fused_kernel_options.impl_backend"
FLASH = "flash_attention_2"
# (use_dynamic_bsz key, token budget key) of each pass; verl's worker needs the log-prob pass to
# share the actor's dynamic setting (engine_workers.py: assert actor.use_dynamic_bsz == rollout...).
BUDGETS = (
    ("actor_rollout_ref.actor.use_dynamic_bsz", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu"),
    (
        "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz",
        "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu",
    ),
    (
        "actor_rollout_ref.ref.log_prob_use_dynamic_bsz",
        "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",
    ),
)
FUSED_BACKENDS = ("torch", "triton", "liger")


def flash_attn_available() -> bool:
    """Whether flash-attn is installed in this interpreter (found, not imported: no CUDA init)."""
    return importlib.util.find_spec("flash_attn") is not None


def _get(config: DictConfig, key: str, default: Any = None) -> Any:
    return OmegaConf.select(config, key, default=default)


def resolve_attention(config: DictConfig, flash_attn: bool | None = None) -> str:
    """Replace ``auto`` in the attention and packing keys with what this machine runs; returns a
    one-line description for the start-up log.

    Args:
        config: the composed run config (changed in place).
        flash_attn: whether flash-attn is installed (default: :func:`flash_attn_available`).
    """
    flash = flash_attn_available() if flash_attn is None else flash_attn
    attn, packed = _get(config, ATTN_KEY), _get(config, PACKED_KEY)
    if attn == AUTO:
        attn = FLASH if flash else "sdpa"
    if packed == AUTO:
        packed = attn == FLASH
    with open_dict(config):
        if attn is not None:
            OmegaConf.update(config, ATTN_KEY, attn, force_add=True)
        OmegaConf.update(config, PACKED_KEY, packed, force_add=True)
    return f"attention: {attention_summary(attn, packed, flash)} ({ATTN_KEY}, {PACKED_KEY})"


def attention_summary(attn: str | None, packed: bool, flash: bool) -> str:
    """``sdpa on padded micro-batches (flash-attn is not installed: ...)``, for logs and the preflight."""
    layout = "packed sequences" if packed else "padded micro-batches"
    why = (
        "flash-attn is installed" if flash else "flash-attn is not installed: pip install flash-attn to pack"
    )
    return f"{attn} on {layout} ({why})"


def check_throughput(config: DictConfig) -> None:
    """Refuse throughput settings that would fail inside a worker; raises ConfigError naming the key."""
    attn, packed = _get(config, ATTN_KEY), _get(config, PACKED_KEY)
    if attn == FLASH and not flash_attn_available():
        raise ConfigError(
            f"{ATTN_KEY}={FLASH} but flash-attn is not installed here: install it (pip install flash-attn), "
            f"or set {ATTN_KEY}={AUTO} (sdpa on padded micro-batches without it)"
        )
    if packed not in (True, False, AUTO):
        raise ConfigError(f"{PACKED_KEY} must be true, false or {AUTO}, got {packed!r}")
    if _get(config, FUSED_KEY, False):
        backend = _get(config, FUSED_BACKEND_KEY)
        if backend not in FUSED_BACKENDS:
            raise ConfigError(
                f"{FUSED_KEY}=true needs {FUSED_BACKEND_KEY} in {list(FUSED_BACKENDS)}, got {backend!r}: verl "
                "would silently fall back to the per-token log-prob loop"
            )
    _check_batch_divides(config)
    longest = int(_get(config, "data.max_prompt_length", 0) or 0) + int(
        _get(config, "data.max_response_length", 0) or 0
    )
    (actor_dynamic_key, _), (rollout_dynamic_key, _), _ = BUDGETS
    actor_dynamic = bool(_get(config, actor_dynamic_key, False))
    for dynamic_key, budget_key in BUDGETS:
        dynamic = bool(_get(config, dynamic_key, False))
        if dynamic_key == rollout_dynamic_key and dynamic != actor_dynamic:
            raise ConfigError(
                f"{dynamic_key}={dynamic} must equal {actor_dynamic_key}={actor_dynamic} (verl's actor worker "
                "builds one engine for the update and the log-prob pass)"
            )
        if not dynamic:
            continue
        budget = _get(config, budget_key)
        if not isinstance(budget, int) or isinstance(budget, bool) or budget < longest:
            raise ConfigError(
                f"{budget_key}={budget!r} tokens per micro-batch cannot hold one sequence of data.max_prompt_length + "
                f"data.max_response_length = {longest} tokens; set it to at least {longest} (verl's guide: "
                f">= 2 x, {2 * longest})"
            )


def _check_batch_divides(config: DictConfig) -> None:
    """verl checks that a step's sequences split evenly over the GPUs only without dynamic batches
    (verl/utils/config.py validate_config); each rank still takes an equal share with them."""
    try:
        gpus = int(_get(config, "trainer.nnodes")) * int(_get(config, "trainer.n_gpus_per_node"))
        sequences = int(_get(config, "data.train_batch_size")) * int(
            _get(config, "actor_rollout_ref.rollout.n")
        )
    except (TypeError, ValueError):
        return  # not set or not numbers: verl's own checks report it
    if gpus > 0 and sequences % gpus:
        raise ConfigError(
            f"data.train_batch_size x actor_rollout_ref.rollout.n = {sequences} sequences per step must be divisible "
            f"by trainer.nnodes x trainer.n_gpus_per_node = {gpus} GPUs (each takes an equal share)"
        )
