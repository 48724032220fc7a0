"""recipe.cpu_backend: version pin, activation, platform, registries and torch patches (no Ray)."""

from __future__ import annotations

import os

import pytest
import torch
from omegaconf import OmegaConf

from recipe.cpu_backend import activation, patches, settings
from recipe.verl_pin import REQUIRED_VERL_FILE, check_verl_version


@pytest.fixture
def clean_platform(monkeypatch: pytest.MonkeyPatch):
    """Restore verl's platform singleton and the env vars activate() sets."""
    from verl.plugin.platform import platform_manager

    monkeypatch.setattr(platform_manager, "_current_platform", platform_manager._current_platform)
    for key in (
        "VERL_USE_EXTERNAL_MODULES",
        "VERL_PLATFORM",
        "VERL_ENGINE_DEVICE",
        "PYTHONPATH",
        "CUDA_VISIBLE_DEVICES",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "COPO_CPU_THREADS",
        "TQ_NUM_THREADS",
        "TQ_CLIENT_ZMQ_IO_THREADS",
        "TOKENIZERS_PARALLELISM",
        "COPO_CPU_UNWRAPPED_SINGLE_RANK",
        "COPO_CPU_RESPONSE_LOGITS_ONLY",
    ):
        if key in os.environ:
            monkeypatch.setenv(key, os.environ[key])
        else:
            monkeypatch.delenv(key, raising=False)
    return platform_manager


def test_version_check_accepts_pinned_and_names_it_when_wrong() -> None:
    import verl

    pinned = (REQUIRED_VERL_FILE.read_text().split("verl==", 1)[1]).split()[0]
    assert check_verl_version() == verl.__version__ == pinned
    with pytest.raises(RuntimeError, match=rf"verl=={pinned} only, but verl 0\.8\.0 is installed"):
        check_verl_version("0.8.0")


def test_activate_sets_env_config_and_platform(clean_platform, monkeypatch: pytest.MonkeyPatch) -> None:
    from verl.utils.device import get_device_id, get_device_name, get_torch_device

    from recipe.cpu_backend.platform import CPUPlatform

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setenv("VERL_USE_EXTERNAL_MODULES", "my_plugin")
    config = OmegaConf.create(
        {
            "trainer": {"device": "cuda"},
            "ray_kwargs": {"ray_init": {"num_cpus": 8, "runtime_env": {"env_vars": {"FOO": "1"}}}},
        }
    )
    OmegaConf.set_struct(config, True)
    out = activation.activate(config)
    assert out is config and out.trainer.device == "cpu"
    env_vars = out.ray_kwargs.ray_init.runtime_env.env_vars
    assert env_vars.FOO == "1"  # the user's own env vars survive
    assert env_vars.VERL_USE_EXTERNAL_MODULES == "my_plugin,recipe.cpu_backend.plugin"
    assert env_vars.VERL_PLATFORM == "cpu" and env_vars.VERL_ENGINE_DEVICE == "cpu"
    assert env_vars.COPO_CPU_UNWRAPPED_SINGLE_RANK == "0"  # no cpu_backend section: verl's FSDP2 engine
    assert env_vars.COPO_CPU_RESPONSE_LOGITS_ONLY == "0"
    assert os.environ["VERL_PLATFORM"] == "cpu"
    assert "CUDA_VISIBLE_DEVICES" not in os.environ  # "" would make Ray refuse the logical GPU
    assert isinstance(clean_platform.get_platform(), CPUPlatform)
    assert get_device_name() == "cpu" and get_device_id() == "cpu"
    dev = get_torch_device()
    dev.empty_cache()
    dev.synchronize()
    free, total = dev.mem_get_info()
    assert 0 < free <= total
    torch.testing.assert_close(dev.get_rng_state(), torch.get_rng_state())
    assert activation.activate(None) is None


def test_registries_point_at_the_hf_rollout() -> None:
    from verl.plugin.platform import PlatformRegistry
    from verl.workers.rollout.base import get_rollout_class
    from verl.workers.rollout.replica import get_rollout_replica_class

    from recipe.cpu_backend.adapter import HFServerAdapter
    from recipe.cpu_backend.hf_server import HFReplica
    from recipe.cpu_backend.platform import CPUPlatform

    activation.install()
    assert PlatformRegistry.get("cpu") is CPUPlatform
    assert get_rollout_class("hf", "async") is HFServerAdapter
    assert get_rollout_replica_class("hf") is HFReplica
    # never auto-detected: a GPU machine that imports the package keeps its CUDA platform
    assert CPUPlatform().is_platform_available(use_smi_check=True) is False


def test_on_cpu_the_vllm_rollout_is_the_watched_adapter() -> None:
    """verl's ``vllm`` rollout resolves to vllm_sync.WatchedServerAdapter (a dotted name: importing it needs vLLM,
    tested in tests/vllm_cpu/test_vllm_sync_failure.py); the module exists where the name points."""
    import importlib.util

    from verl.workers.rollout import base as rollout_base

    activation.install()
    module, _, name = rollout_base._ROLLOUT_REGISTRY[("vllm", "async")].rpartition(".")
    assert (module, name) == ("recipe.cpu_backend.vllm_sync", "WatchedServerAdapter")
    assert importlib.util.find_spec(module) is not None


@pytest.mark.parametrize(
    ("backend", "expected"),
    [
        ("cpu:gloo,cpu:gloo", "gloo"),
        ("cpu:gloo,cuda:nccl", "cpu:gloo,cuda:nccl"),
        ("nccl", "nccl"),
        ("gloo", "gloo"),
        (None, None),
    ],
)
def test_plain_gloo_mapping(backend: str | None, expected: str | None) -> None:
    assert patches._plain_gloo(backend) == expected


def test_patched_process_group_accepts_verl_cpu_backend_string(tmp_path) -> None:
    import torch.distributed as dist

    patches.apply_all()
    dist.init_process_group(
        backend="cpu:gloo,cpu:gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1
    )
    try:
        assert dist.get_backend() == "gloo"
        t = torch.ones(3)
        dist.all_reduce(t)
        torch.testing.assert_close(t, torch.ones(3))
    finally:
        dist.destroy_process_group()


def test_cpu_offload_policy_never_pins_without_accelerator() -> None:
    from torch.distributed.fsdp import CPUOffloadPolicy

    patches.apply_all()
    patches.apply_all()  # idempotent
    assert torch.cuda.is_available() is False
    assert CPUOffloadPolicy(pin_memory=True).pin_memory is False
    assert CPUOffloadPolicy().pin_memory is False


def test_worker_threads_one_pool_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every process of a CPU job gets the cores as intra-op threads and one inter-op thread."""
    monkeypatch.delenv("COPO_CPU_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert settings.worker_threads() == (len(os.sched_getaffinity(0)), 1)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert settings.worker_threads() == (3, 1)
    monkeypatch.setenv("COPO_CPU_THREADS", "1")  # wins over OMP_NUM_THREADS
    assert settings.worker_threads() == (1, 1)
    monkeypatch.setenv("COPO_CPU_THREADS", "two")
    with pytest.raises(ValueError, match="COPO_CPU_THREADS='two'"):
        settings.worker_threads()


def test_activate_passes_the_threads_to_every_ray_worker(
    clean_platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COPO_CPU_THREADS", "1")
    threads = torch.get_num_threads()
    try:
        config = OmegaConf.create({"trainer": {"device": "cpu"}})
        env_vars = activation.activate(config).ray_kwargs.ray_init.runtime_env.env_vars
        assert env_vars.COPO_CPU_THREADS == env_vars.OMP_NUM_THREADS == env_vars.MKL_NUM_THREADS == "1"
        assert env_vars.TQ_NUM_THREADS == "1"  # TransferQueue resets torch's threads to this
        assert torch.get_num_threads() == 1  # applied to this process too
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize(("value", "env"), [(True, "1"), (False, "0")])
def test_activate_passes_the_engine_settings_to_every_ray_worker(clean_platform, value: bool, env: str) -> None:
    from recipe.cpu_backend.settings import RESPONSE_LOGITS, SETTINGS, UNWRAPPED

    config = OmegaConf.create(
        {"trainer": {"device": "cpu"}, "cpu_backend": {"unwrapped_single_rank": value}}
    )
    env_vars = activation.activate(config).ray_kwargs.ray_init.runtime_env.env_vars
    assert env_vars[SETTINGS[UNWRAPPED]] == os.environ[SETTINGS[UNWRAPPED]] == env
    assert env_vars[SETTINGS[RESPONSE_LOGITS]] == "0"  # absent: off


def test_activate_refuses_a_wasted_reference_pass(clean_platform) -> None:
    from recipe.cpu_backend.checks import CpuConfigError

    config = OmegaConf.create(
        {
            "trainer": {"device": "cpu"},
            "actor_rollout_ref": {"actor": {"use_kl_loss": True, "kl_loss_coef": 0.0}},
        }
    )
    with pytest.raises(CpuConfigError, match="kl_loss_coef=0"):
        activation.activate(config)
