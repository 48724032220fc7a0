"""Checkpoint discovery and the lazy FSDP merge through verl's own model merger."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from recipe.evaluation import checkpoints
from recipe.evaluation.checkpoints import ModelSpec, discover_models, merged_dir, resolve_hf_path
from recipe.models.tiny import build_tiny_qwen2

# Two gloo ranks each save their Shard(0) DTensor slice of the model, as verl's FSDP2 checkpoint
# manager does: actor/model_world_size_2_rank_{r}.pt + fsdp_config.json + huggingface/ (no weights).
_SAVE_SHARDS = textwrap.dedent(
    """
    import json, os, sys
    import torch, torch.distributed as dist, torch.multiprocessing as mp
    from safetensors.torch import load_file
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    def run(rank, state, actor_dir, init_file):
        dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=2)
        mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("fsdp",))
        shards = {k: distribute_tensor(v, mesh, [Shard(0)]) for k, v in state.items()}
        torch.save(shards, os.path.join(actor_dir, f"model_world_size_2_rank_{rank}.pt"))
        dist.barrier()
        dist.destroy_process_group()

    if __name__ == "__main__":
        model_dir, actor_dir, init_file = sys.argv[1:4]
        state = load_file(os.path.join(model_dir, "model.safetensors"))
        mp.spawn(run, args=(state, actor_dir, init_file), nprocs=2)
        with open(os.path.join(actor_dir, "fsdp_config.json"), "w") as f:
            json.dump({"FSDP_version": 2, "world_size": 2}, f)
    """
)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return build_tiny_qwen2(tmp_path_factory.mktemp("model") / "tiny")


def _hf_config_only(src: Path, dst: Path) -> None:
    """actor/huggingface as verl writes it by default: config + tokenizer, no weights."""
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.is_file() and not f.name.endswith(".safetensors"):
            shutil.copy(f, dst / f.name)


@pytest.fixture(scope="module")
def verl_run(tiny_model: Path, tmp_path_factory) -> Path:
    """<run>/global_step_{2,10}/actor: step 2 as FSDP shards, step 10 with full HF weights saved."""
    run = tmp_path_factory.mktemp("ckpt") / "copo_tiny"
    actor = run / "global_step_2" / "actor"
    actor.mkdir(parents=True)
    _hf_config_only(tiny_model, actor / "huggingface")
    script = run.parent / "save_shards.py"
    script.write_text(_SAVE_SHARDS)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    cmd = [sys.executable, str(script), str(tiny_model), str(actor), str(run.parent / "pg_init")]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    shutil.copytree(tiny_model, run / "global_step_10" / "actor" / "huggingface")
    (run / "latest_checkpointed_iteration.txt").write_text("10")
    return run


def test_discover_models_layouts(tiny_model: Path, verl_run: Path, tmp_path: Path, monkeypatch) -> None:
    (verl_run.parent / "other").mkdir(exist_ok=True)
    specs = discover_models([str(tiny_model), str(verl_run)])
    assert [(s.name, s.step) for s in specs] == [
        ("tiny", None),
        ("copo_tiny/global_step_2", 2),
        ("copo_tiny/global_step_10", 10),  # numeric step order, not string order
    ]
    assert specs[0].actor_dir is None and specs[1].actor_dir == verl_run / "global_step_2" / "actor"
    single = discover_models([str(verl_run / "global_step_10")])
    assert [(s.name, s.step) for s in single] == [("copo_tiny/global_step_10", 10)]
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert discover_models(["Qwen/Qwen2.5-7B-Instruct"])[0].source == "Qwen/Qwen2.5-7B-Instruct"  # hub id
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="HF_HUB_OFFLINE"):
        discover_models(["Qwen/Qwen2.5-7B-Instruct"])

    with pytest.raises(ValueError, match="global_step"):
        discover_models([str(tmp_path)])  # empty folder
    with pytest.raises(ValueError, match="no such folder"):
        discover_models([str(tmp_path / "missing")])
    with pytest.raises(ValueError, match="labelled"):
        discover_models([str(tiny_model), str(tiny_model)])


def test_merge_with_verl_model_merger_restores_the_weights(
    tiny_model: Path, verl_run: Path, tmp_path: Path, monkeypatch
) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    spec = discover_models([str(verl_run / "global_step_2")])[0]
    path = resolve_hf_path(spec, tmp_path, log=lambda m: None)
    assert Path(path) == merged_dir(spec, tmp_path) == tmp_path / "merged" / "copo_tiny" / "global_step_2"
    merged = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).state_dict()
    original = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32).state_dict()
    assert merged.keys() == original.keys()
    for key, value in original.items():  # the merger stores bf16: compare at bf16 precision
        torch.testing.assert_close(merged[key], value.to(torch.bfloat16).float(), rtol=0, atol=0)
    assert (Path(path) / "tokenizer_config.json").is_file()
    assert not list((tmp_path / "merged" / "copo_tiny").glob(".*tmp*"))

    # a second resolution reuses the merge: the merger must not run again
    def no_merge(*args, **kwargs):
        raise AssertionError("an existing merge must be reused")

    monkeypatch.setattr(checkpoints.subprocess, "run", no_merge)
    assert resolve_hf_path(spec, tmp_path, log=lambda m: None) == path


def test_full_hf_weights_in_checkpoint_need_no_merge(verl_run: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(checkpoints.subprocess, "run", lambda *a, **k: pytest.fail("no merge expected"))
    spec = discover_models([str(verl_run / "global_step_10")])[0]
    assert resolve_hf_path(spec, tmp_path) == str(verl_run / "global_step_10" / "actor" / "huggingface")
    hf = ModelSpec(name="tiny", step=None, source="/some/hf/folder")
    assert resolve_hf_path(hf, tmp_path) == "/some/hf/folder"


def test_missing_shards_fail_before_merging(tmp_path: Path) -> None:
    actor = tmp_path / "run" / "global_step_1" / "actor"
    actor.mkdir(parents=True)
    (actor / "fsdp_config.json").write_text(json.dumps({"world_size": 1}))  # no shards, no huggingface/
    spec = discover_models([str(tmp_path / "run")])[0]
    with pytest.raises(ValueError, match="model_world_size_"):
        resolve_hf_path(spec, tmp_path / "out", log=lambda m: None)


def test_failed_merge_reports_and_leaves_nothing(verl_run: Path, tmp_path: Path, monkeypatch) -> None:
    calls = []

    def failing_merger(cmd, **kwargs):  # in place of children.start: a merger that fails half-way
        calls.append(cmd)
        Path(cmd[cmd.index("--target_dir") + 1], "partial.bin").write_bytes(b"x")  # half-written output
        fail = "import sys; sys.stderr.write('Boom: out of memory'); sys.exit(1)"
        return subprocess.Popen([sys.executable, "-c", fail], **kwargs)

    monkeypatch.setattr(checkpoints.children, "start", failing_merger)
    spec = discover_models([str(verl_run / "global_step_2")])[0]
    with pytest.raises(RuntimeError, match="model merger failed(.|\\n)*Boom"):
        resolve_hf_path(spec, tmp_path, log=lambda m: None)
    assert calls and calls[0][1:5] == ["-m", "verl.model_merger", "merge", "--backend"]
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []  # nothing a rerun could trust


def test_cpu_only_attention_is_refused_with_the_fix(verl_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "old_cpu_run"
    shutil.copytree(verl_run / "global_step_2", run / "global_step_2")
    config_json = run / "global_step_2" / "actor" / "huggingface" / "config.json"
    config = json.loads(config_json.read_text())
    config_json.write_text(json.dumps({**config, "attn_implementation": "sdpa_gqa"}))  # as CPU runs saved it
    spec = discover_models([str(run)])[0]
    with pytest.raises(ValueError, match=f'{config_json}.*sdpa_gqa.*"attn_implementation": "sdpa"'):
        resolve_hf_path(spec, tmp_path / "out", log=lambda m: None)

    # the edit the error asks for
    config_json.write_text(json.dumps({**config, "attn_implementation": "sdpa"}))
    assert Path(resolve_hf_path(spec, tmp_path / "out", log=lambda m: None)).is_dir()
