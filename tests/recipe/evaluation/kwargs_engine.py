"""A stand-in for vllm.LLM (``engine=``) that answers every prompt with what its worker was given: the
engine's keyword arguments and the vLLM-CPU environment, so a test sees what a CPU worker gets."""

from __future__ import annotations

import json
import os

from recipe.cpu_backend.vllm_rollout import ENV_DEFAULTS


class KwargsEngine:
    def __init__(self, model_path: str, **kwargs: object):
        self.seen = {
            "kwargs": kwargs,
            "env": {key: os.environ.get(key) for key in [*ENV_DEFAULTS, "CUDA_VISIBLE_DEVICES"]},
        }

    def generate(self, texts: list[str], seeds: list[int], kwargs: dict) -> list[list[tuple[str, int]]]:
        text = json.dumps(self.seen, sort_keys=True)
        return [[(text, 1)] * kwargs["n"] for _ in texts]
