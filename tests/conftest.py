"""Shared test settings: CPU only, offline, quiet; each test gets its environment back."""

import os
from collections.abc import Iterator

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")


@pytest.fixture(autouse=True)
def _restore_environ() -> Iterator[None]:
    """Undo every os.environ change a test makes.

    recipe.cpu_backend.activation.activate() exports VERL_PLATFORM and friends into os.environ (the
    trainer needs them); leaked into later tests' subprocesses they select the CPU platform
    in a process that never registered it.
    """
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)
