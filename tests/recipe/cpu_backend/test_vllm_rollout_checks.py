"""The CPU start-up checks and environment for ``actor_rollout_ref.rollout.name=vllm`` (no vLLM needed)."""

from __future__ import annotations

import os

import pytest
from omegaconf import OmegaConf

from recipe.cpu_backend import activation
from recipe.cpu_backend.checks import CpuConfigError, check_vllm_rollout
from recipe.cpu_backend.vllm_rollout import ENV_DEFAULTS, SLEEP_KEY, vllm_env
from tests.recipe.cpu_backend.cpu_config import cpu_config


def test_vllm_rollout_demands_sleep_mode_off_naming_the_key() -> None:
    config = cpu_config(actor_rollout_ref__rollout__name="vllm")
    assert OmegaConf.select(config, SLEEP_KEY) is None  # absent from verl's rollout.yaml: verl's default is true
    with pytest.raises(CpuConfigError, match=rf"\+{SLEEP_KEY}=false"):
        check_vllm_rollout(config, installed=True)
    OmegaConf.update(config, SLEEP_KEY, True, force_add=True)
    with pytest.raises(CpuConfigError, match=SLEEP_KEY):
        check_vllm_rollout(config, installed=True)
    OmegaConf.update(config, SLEEP_KEY, False)
    check_vllm_rollout(config, installed=True)


def test_vllm_rollout_without_vllm_names_the_setup_script() -> None:
    config = cpu_config(actor_rollout_ref__rollout__name="vllm", **{SLEEP_KEY.replace(".", "__"): False})
    with pytest.raises(CpuConfigError, match="setup_vllm_cpu.sh"):
        check_vllm_rollout(config, installed=False)


def test_hf_rollout_is_not_checked_for_vllm() -> None:
    check_vllm_rollout(cpu_config(), installed=False)  # copo_cpu.yaml's hf rollout: nothing to demand


def test_vllm_env_defaults_and_the_callers_values_win() -> None:
    assert vllm_env({}) == ENV_DEFAULTS
    assert vllm_env({"VLLM_CPU_KVCACHE_SPACE": "4"})["VLLM_CPU_KVCACHE_SPACE"] == "4"


def test_activate_passes_vllm_env_only_with_the_vllm_rollout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Ray worker (the vLLM server's actor included) gets vLLM-CPU's variables with rollout vllm."""
    from verl.plugin.platform import platform_manager

    import recipe.cpu_backend.checks as checks

    # activate() selects the CPU platform singleton (os.environ is restored by tests/conftest.py)
    monkeypatch.setattr(platform_manager, "_current_platform", platform_manager._current_platform)
    monkeypatch.setattr(checks, "vllm_installed", lambda: True)
    for key in ENV_DEFAULTS:
        monkeypatch.delenv(key, raising=False)
    config = cpu_config(actor_rollout_ref__rollout__name="vllm", **{SLEEP_KEY.replace(".", "__"): False})
    env_vars = activation.activate(config).ray_kwargs.ray_init.runtime_env.env_vars
    assert {k: env_vars[k] for k in ENV_DEFAULTS} == ENV_DEFAULTS
    assert all(os.environ[k] == v for k, v in ENV_DEFAULTS.items())
    hf_vars = activation.activate(cpu_config()).ray_kwargs.ray_init.runtime_env.env_vars
    assert not set(ENV_DEFAULTS) & set(hf_vars)


def test_the_trainer_refuses_the_vllm_rollout_without_vllm_before_starting(monkeypatch: pytest.MonkeyPatch) -> None:
    """main_copo makes the rollout's check (activate() does not: the preflight's actor stage activates a
    paper config, whose rollout is vLLM, without starting one)."""
    import recipe.cpu_backend.checks as checks
    from recipe.copo.main_copo import run_copo

    monkeypatch.setattr(checks, "vllm_installed", lambda: False)
    config = cpu_config(actor_rollout_ref__rollout__name="vllm", **{SLEEP_KEY.replace(".", "__"): False})
    with pytest.raises(CpuConfigError, match="setup_vllm_cpu.sh"):
        run_copo(config)
