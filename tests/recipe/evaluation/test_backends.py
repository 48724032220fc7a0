"""Backend selection, HF length accounting, and the vLLM data-parallel plumbing (without vLLM)."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import pytest
import torch

from recipe.cpu_backend.vllm_rollout import ENV_DEFAULTS
from recipe.evaluation import backends
from recipe.evaluation.backends import SamplingConfig, choose_backend
from recipe.evaluation.backends import vllm_backend as vb
from recipe.evaluation.backends.hf_backend import generated_lengths
from recipe.models.tiny import build_tiny_qwen2


def test_choose_backend(monkeypatch) -> None:
    assert choose_backend("hf") == "hf"
    assert choose_backend("vllm") == "vllm"
    with pytest.raises(ValueError, match="--backend"):
        choose_backend("trtllm")
    monkeypatch.setattr(vb, "vllm_available", lambda: False)
    monkeypatch.setattr(vb, "visible_gpu_ids", lambda: ["0"])
    assert choose_backend("auto") == "hf"  # GPU but no vLLM
    monkeypatch.setattr(vb, "vllm_available", lambda: True)
    assert choose_backend("auto") == "vllm"
    monkeypatch.setattr(vb, "visible_gpu_ids", lambda: [])
    assert choose_backend("auto") == "hf"  # vLLM but no GPU


def test_visible_gpu_ids_follow_cuda_visible_devices(monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    assert vb.visible_gpu_ids() == ["2", "5"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert vb.visible_gpu_ids() == []


def test_vllm_backend_refuses_without_gpu_or_vllm(monkeypatch) -> None:
    with pytest.raises(RuntimeError, match="GPU"):
        vb.VLLMBackend("unused", gpu_ids=[])
    monkeypatch.setattr(vb, "vllm_available", lambda: False)
    with pytest.raises(RuntimeError, match="not installed"):
        vb.VLLMBackend("unused", gpu_ids=["0"])


def test_without_gpus_vllms_cpu_build_gets_one_cpu_worker(monkeypatch) -> None:
    monkeypatch.setattr(vb, "visible_gpu_ids", lambda: ["0", "1"])
    monkeypatch.setattr(vb, "vllm_cpu_build", lambda: True)
    assert vb.default_devices() == ["0", "1"]  # GPUs win: the GPU path is unchanged
    monkeypatch.setattr(vb, "visible_gpu_ids", lambda: [])
    assert vb.default_devices() == [vb.CPU]
    monkeypatch.setattr(vb, "vllm_cpu_build", lambda: False)  # a GPU build of vLLM cannot run here
    assert vb.default_devices() == []
    with pytest.raises(RuntimeError, match="CPU build"):
        vb.VLLMBackend("unused")


def test_vllm_cpu_build_reads_the_distribution_version(monkeypatch) -> None:
    versions = {"vllm": "0.24.0+cpu"}

    def version(name: str) -> str:
        if name not in versions:
            raise importlib.metadata.PackageNotFoundError(name)
        return versions[name]

    monkeypatch.setattr(importlib.metadata, "version", version)
    assert vb.vllm_cpu_build()
    versions["vllm"] = "0.24.0"
    assert not vb.vllm_cpu_build()
    versions.clear()
    assert not vb.vllm_cpu_build()


def test_engine_kwargs_and_env_per_device(monkeypatch) -> None:
    assert vb.engine_kwargs_for("0", "auto") == {}  # a GPU engine keeps vLLM's defaults
    assert vb.engine_kwargs_for(vb.CPU, "auto") == {"dtype": "float32", "enforce_eager": True}
    assert vb.engine_kwargs_for(vb.CPU, "bfloat16")["dtype"] == "bfloat16"
    base = {"PATH": "/bin", "VLLM_CPU_KVCACHE_SPACE": "3"}
    assert vb.worker_env("2", base) == {**base, "CUDA_VISIBLE_DEVICES": "2"}
    cpu = vb.worker_env(vb.CPU, base)
    assert cpu["VLLM_CPU_KVCACHE_SPACE"] == "3"  # the caller's value wins
    assert cpu["VLLM_CPU_OMP_THREADS_BIND"] == "nobind" and "CUDA_VISIBLE_DEVICES" not in cpu


def test_sampling_config_validation() -> None:
    with pytest.raises(ValueError, match="--top-p"):
        SamplingConfig(top_p=0)
    with pytest.raises(ValueError, match="--temperature"):
        SamplingConfig(temperature=-1)
    with pytest.raises(ValueError, match="--max-tokens"):
        SamplingConfig(max_tokens=0)


def test_plan_chunks_cover_every_prompt_once() -> None:
    for n_prompts in (0, 1, 7, 100, 501):
        for workers in (1, 2, 3, 8):
            chunks = vb.plan_chunks(n_prompts, workers)
            covered = [j for start, stop in chunks for j in range(start, stop)]
            assert covered == list(range(n_prompts))
            # enough chunks to keep every worker busy and rebalance (>= 2 per worker when possible)
            assert len(chunks) >= min(n_prompts, 2 * workers)
    assert vb.plan_chunks(10, 2, chunk_size=4) == [(0, 4), (4, 8), (8, 10)]
    with pytest.raises(ValueError, match="n_workers"):
        vb.plan_chunks(10, 0)


def test_sampling_kwargs_are_vllm_sampling_params() -> None:
    kwargs = vb.sampling_kwargs(8, SamplingConfig(temperature=0.7, top_p=0.95, max_tokens=128, seed=3))
    assert kwargs == {"n": 8, "temperature": 0.7, "top_p": 0.95, "max_tokens": 128}


def test_generated_lengths_stop_at_first_eos() -> None:
    eos, pad = 9, 0
    seqs = torch.tensor(
        [
            [5, 6, 9, 0, 0],  # eos at position 2 -> 3 tokens
            [9, 0, 0, 0, 0],  # immediate eos -> 1
            [1, 2, 3, 4, 5],  # ran to the limit -> 5
            [1, 8, 2, 8, 0],  # second eos id 8 -> 2
        ]
    )
    assert generated_lengths(seqs, [eos, 8]) == [3, 1, 5, 2]
    # pad equal to eos (models without a pad token): still the first eos
    assert generated_lengths(torch.tensor([[4, 9, 9, 9]]), [eos]) == [2]
    assert pad not in (eos, 8)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return build_tiny_qwen2(tmp_path_factory.mktemp("model") / "tiny")


def test_data_parallel_workers_return_every_prompt_in_order(tiny_model: Path) -> None:
    """Two spawned workers (EchoEngine in place of vLLM) serve chunks; results come back in prompt
    order with per-prompt seeds seed + j, however chunks were distributed."""
    prompts = [[{"role": "user", "content": f"question {j:02d}"}] for j in range(11)]
    backend = vb.VLLMBackend(
        str(tiny_model), gpu_ids=["0", "1"], engine="recipe.evaluation.backends.vllm_backend:EchoEngine", chunk_size=2
    )
    progress = []
    try:
        assert backend.num_workers == 2
        out = backend.generate(prompts, 3, SamplingConfig(seed=100), on_progress=progress.append)
        again = backend.generate(prompts[:3], 1, SamplingConfig(seed=7))  # engines stay loaded
    finally:
        backend.close()
    assert len(out) == 11 and all(len(samples) == 3 for samples in out)
    for j, samples in enumerate(out):
        tail = vb.render_prompt(backend.tokenizer, prompts[j])[-8:]
        assert [s.text for s in samples] == [f"{100 + j}:{i}:{tail}" for i in range(3)]
        assert all(s.num_tokens == len(s.text) for s in samples)
    assert sum(progress) == 11 * 3 and len(progress) == 6  # one update per chunk of 2 prompts
    assert [s[0].text.split(":")[0] for s in again] == ["7", "8", "9"]


def test_cpu_worker_gets_cpu_kwargs_and_env(tiny_model: Path, monkeypatch) -> None:
    """A spawned CPU worker (a stand-in engine reporting what it got): float32 and eager mode for
    --dtype auto, vLLM-CPU's environment, and no GPU pinned."""
    for key in ["CUDA_VISIBLE_DEVICES", *ENV_DEFAULTS]:
        monkeypatch.delenv(key, raising=False)
    backend = vb.VLLMBackend(
        str(tiny_model), gpu_ids=[vb.CPU], engine="tests.recipe.evaluation.kwargs_engine:KwargsEngine"
    )
    try:
        assert backend.num_workers == 1
        out = backend.generate([[{"role": "user", "content": "q"}]], 1, SamplingConfig(temperature=0))
    finally:
        backend.close()
    seen = json.loads(out[0][0].text)
    assert seen["kwargs"] == {"dtype": "float32", "enforce_eager": True}
    assert seen["env"] == {**ENV_DEFAULTS, "CUDA_VISIBLE_DEVICES": None}


def test_worker_load_failure_is_reported(tiny_model: Path) -> None:
    with pytest.raises(RuntimeError, match="failed to load"):
        vb.VLLMBackend(str(tiny_model), gpu_ids=["0"], engine="recipe.evaluation.backends.vllm_backend:NoSuchEngine")


def test_make_backend_rejects_unresolved_kind() -> None:
    with pytest.raises(ValueError, match="choose_backend"):
        backends.make_backend("auto", "unused")
