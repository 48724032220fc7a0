"""The hf rollout's device and dtype: decided from verl's platform and the rollout config, so the
same server runs on CPU (tests) and on a worker's GPU in bf16 (a GPU run without vLLM)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from recipe.cpu_backend.attention import ATTN_IMPLEMENTATION
from recipe.cpu_backend.hf_server import HFRolloutServer, Placement, server_placement
from recipe.cpu_backend.rollout_registry import PLUGIN_MODULE, PROJECT_ROOT, use_hf_rollout, worker_env
from recipe.cpu_backend.sampling import draw_tokens
from recipe.models.tiny import build_tiny_qwen2
from tests.paths import REPO


def test_placement_follows_the_platform() -> None:
    assert server_placement("cpu", None) == Placement("cpu", {})
    cuda = server_placement("cuda", "3")
    assert cuda.device == "cuda"
    # the worker's GPU, and Ray told not to hide it from an actor that reserves none
    assert cuda.env_vars == {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1", "CUDA_VISIBLE_DEVICES": "3"}
    with pytest.raises(ValueError, match="GPU id"):
        server_placement("cuda", None)
    with pytest.raises(NotImplementedError, match="npu"):
        server_placement("npu", "0")


def test_default_attention_is_the_cpu_kernel_on_cpu_and_sdpa_on_a_gpu() -> None:
    server = HFRolloutServer.__new__(HFRolloutServer)
    server.model_config = SimpleNamespace(override_config={})
    server.device = "cpu"
    assert server.attn_implementation() == ATTN_IMPLEMENTATION
    server.device = "cuda"
    assert server.attn_implementation() == "sdpa"
    server.model_config = SimpleNamespace(override_config={"attn_implementation": "flash_attention_2"})
    assert server.attn_implementation() == "flash_attention_2"  # the actor's kernel wins


def test_server_loads_in_the_rollout_dtype_on_its_device_and_samples(tmp_path) -> None:
    from verl.workers.config import HFModelConfig, RolloutConfig

    model = build_tiny_qwen2(tmp_path / "tiny")
    config = RolloutConfig(
        name="hf", mode="async", prompt_length=16, response_length=6, dtype="bfloat16", seed=3
    )
    server = HFRolloutServer(config, HFModelConfig(path=str(model)), device="cpu")

    async def run() -> tuple:
        await server.launch_server()
        out = await server.generate(
            prompt_ids=[257, 49, 43, 50, 10],
            sampling_params={"temperature": 1.0, "max_tokens": 6},
            request_id="a",
        )
        return out, next(server.model.parameters())

    out, param = asyncio.run(run())
    assert param.dtype == torch.bfloat16 and param.device.type == "cpu"
    assert 1 <= len(out.token_ids) <= 6 and len(out.log_probs) == len(out.token_ids)
    assert all(lp <= 0 for lp in out.log_probs)


def test_draws_land_on_the_probabilities_device() -> None:
    probs = torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5]])
    tokens = draw_tokens(probs, [torch.Generator().manual_seed(0), torch.Generator().manual_seed(1)])
    assert tokens.device == probs.device and tokens[0] == 1 and tokens[1] in (0, 2)


def test_workers_of_a_gpu_run_load_the_plugin_and_keep_the_users_env() -> None:
    env = worker_env({"VERL_USE_EXTERNAL_MODULES": "my.mod", "FOO": 1, "PYTHONPATH": "/x"})
    assert env["VERL_USE_EXTERNAL_MODULES"] == f"my.mod,{PLUGIN_MODULE}" and env["FOO"] == "1"
    assert env["PYTHONPATH"].split(os.pathsep) == [PROJECT_ROOT, "/x"]
    assert worker_env(env) == env  # idempotent


def test_use_hf_rollout_only_for_hf_on_an_accelerator() -> None:
    from omegaconf import OmegaConf

    from recipe.copo.config_check import compose

    paths = ["data.train_files=/t", "data.val_files=[/v]", "trainer.default_local_dir=/c"]
    config = compose([*paths, "actor_rollout_ref.rollout.name=hf", "trainer.device=cuda"], "copo_qwen2.5_3b")
    assert use_hf_rollout(config)
    env = OmegaConf.select(config, "ray_kwargs.ray_init.runtime_env.env_vars")
    assert PLUGIN_MODULE in env.VERL_USE_EXTERNAL_MODULES.split(",")
    assert not use_hf_rollout(compose([*paths, "trainer.device=cuda"], "copo_qwen2.5_3b"))  # vllm
    cpu = compose([*paths, "actor_rollout_ref.rollout.name=hf", "trainer.device=cpu"], "copo_qwen2.5_3b")
    assert not use_hf_rollout(cpu)  # the CPU backend registers it


def test_the_plugin_registers_the_rollout_in_a_worker_process() -> None:
    code = (
        "import os; os.environ['VERL_USE_EXTERNAL_MODULES'] = 'recipe.cpu_backend.hf_plugin'\n"
        "import verl\n"
        "from verl.workers.rollout import base\n"
        "from verl.workers.rollout.replica import RolloutReplicaRegistry\n"
        "print(RolloutReplicaRegistry.get('hf').__name__, base._ROLLOUT_REGISTRY[('hf', 'async')])\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("VERL_PLATFORM", "VERL_USE_EXTERNAL_MODULES")}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-2:] == ["HFReplica", "recipe.cpu_backend.adapter.HFServerAdapter"]
