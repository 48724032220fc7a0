"""A stand-in for vllm.LLM in the vLLM backend's workers (``--vllm-engine``): it starts a child process,
as vLLM starts its engine-core process, and answers prompts containing "slow" only after a minute,
so a test can stop an evaluation while a pair is in flight."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from recipe.evaluation.backends.vllm_backend import EchoEngine


class SlowEngine(EchoEngine):
    def __init__(self, model_path: str, **kwargs: object):
        super().__init__(model_path, **kwargs)
        # Like vLLM's EngineCore: a grandchild of the evaluation, in the worker's process group.
        self.core = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        with open(os.environ["SLOW_ENGINE_PIDS"], "a") as f:
            f.write(f"{os.getpid()} {self.core.pid}\n")

    def generate(self, texts: list[str], seeds: list[int], kwargs: dict) -> list[list[tuple[str, int]]]:
        if any("slow" in text for text in texts):
            time.sleep(60)
        return super().generate(texts, seeds, kwargs)
