"""Build the testbed once (tokenizer, SFT policy, RL data) and cache it under a key of its settings.

Layout: ``<cache>/testbed/<key>/`` holds ``model/`` (an HF folder: weights, config, tokenizer),
``data/{train,val}.parquet`` and ``manifest.json`` (the spec, the SFT loss log, the build time).
``<cache>`` is ``$COPO_CACHE`` or ``~/.cache/copo-verl``. The key is a hash of the whole
:class:`TestbedSpec`, of :data:`BUILD_VERSION` and of the torch and transformers versions, so a
changed recipe (or library) builds a new folder and never reuses a stale model. The folder is
written under a temporary name and renamed into place, and a lock file keeps two builders of the
same key from racing: an interrupted build leaves nothing that looks finished.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from data_prep.schema import BOXED_INSTRUCTION
from recipe.cache import cache_root as copo_cache_root
from recipe.files import atomic_dir
from recipe.models.tiny import ModelShape, build_model
from recipe.study.testbed.mixed import MixedTaskSpec
from recipe.study.testbed.noisy import NoisyTaskSpec
from recipe.study.testbed.sft import SFTSpec, train_sft
from recipe.study.testbed.task import OPS, Problem, TaskSpec, make_splits, write_data
from recipe.study.testbed.tokenizer import build_tokenizer

# Bump when the build code changes what it produces for the same spec (a new key, a new build).
BUILD_VERSION = 1
MANIFEST = "manifest.json"


def spec_key(spec: dict[str, Any]) -> str:
    """12 hex digits of the SHA-256 of a spec, BUILD_VERSION and the torch/transformers versions."""
    import torch
    import transformers

    payload = {
        "spec": spec,
        "build_version": BUILD_VERSION,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class TestbedSpec:
    """Everything that determines the testbed's policy and data.

    ``task`` is v1's one-level-per-task :class:`TaskSpec` (the default: the committed 2026-11-24 study)
    or v2's :class:`MixedTaskSpec` (levels mixed within each task; :data:`TESTBED_V2`). The two have
    different fields, so they never share a cache key.
    """

    task: TaskSpec | MixedTaskSpec = field(default_factory=TaskSpec)
    model: ModelShape = field(default_factory=ModelShape)
    sft: SFTSpec = field(default_factory=SFTSpec)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def key(self) -> str:
        return spec_key(self.as_dict())


@dataclass(frozen=True)
class ContinuedSpec:
    """A testbed whose policy continues another testbed's SFT policy (testbed v3 continues v2).

    ``base`` is built (or found) first; its model is fine-tuned ``sft.steps`` more steps on ``task``'s
    stream (:class:`NoisyTaskSpec`: corrupted answers on some levels). ``task`` must draw the base's
    validation and training problems (the same tasks, seed and counts; only SFT weights and noise may
    differ), so its stream skips every problem the base held out and its re-split RL data
    (``rl_levels``) is unseen by both fine-tunings. Its cache key covers the base's whole spec.
    """

    base: TestbedSpec
    task: NoisyTaskSpec
    sft: SFTSpec

    def __post_init__(self) -> None:
        base = self.base.task
        if not isinstance(base, MixedTaskSpec):
            raise ValueError("ContinuedSpec.base must be a mixed-task testbed (v2)")

        def draws(t: MixedTaskSpec) -> tuple[Any, ...]:
            return (
                tuple((k.name, tuple(map(tuple, k.levels)), tuple(k.weights)) for k in t.tasks),
                t.seed,
                t.train_per_task,
                t.val_per_task,
                t.instruction,
            )

        if draws(self.task) != draws(base):
            raise ValueError(
                "ContinuedSpec.task must draw the base's validation and training problems (same tasks, levels, "
                "weights, seed, counts and instruction; change only SFT weights, noise and rl_levels), or its RL "
                "problems could be ones the base's SFT saw"
            )

    @property
    def model(self) -> ModelShape:
        return self.base.model

    def as_dict(self) -> dict[str, Any]:
        return {"continued": dataclasses.asdict(self)}

    def key(self) -> str:
        return spec_key(self.as_dict())


@dataclass(frozen=True)
class Testbed:
    """A built testbed: the HF model folder and the data folder verl reads."""

    root: Path
    key: str

    @property
    def model(self) -> Path:
        return self.root / "model"

    @property
    def data(self) -> Path:
        return self.root / "data"

    def manifest(self) -> dict[str, Any]:
        return json.loads((self.root / MANIFEST).read_text())


def cache_root() -> Path:
    return copo_cache_root() / "testbed"


def tokenizer_corpus() -> list[str]:
    """The text the BPE merges are learned from: every fixed word of prompts and replies."""
    samples = [Problem(op, 12, 34, (op, 2, 2)) for op in OPS]
    return [p.question + "\n" + BOXED_INSTRUCTION for p in samples] + [samples[0].target, "user", "assistant"]


def _log(message: str) -> None:
    print(f"[testbed] {message}", file=sys.stderr, flush=True)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _weights_sha256(model: Any) -> str:
    import torch

    checksum = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        checksum.update(name.encode())
        checksum.update(tensor.detach().to(torch.float32).contiguous().numpy().tobytes())
    return checksum.hexdigest()


def _continue_into(spec: ContinuedSpec, out: Path, root: Path) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.monotonic()
    base = ensure_testbed(spec.base, root)
    splits = spec.task.make_splits()
    splits.write(out / "data")
    tokenizer = AutoTokenizer.from_pretrained(base.model)
    model = AutoModelForCausalLM.from_pretrained(base.model, dtype=torch.float32)
    params = sum(p.numel() for p in model.parameters())
    _log(
        f"SFT continued from testbed {base.key} for {spec.sft.steps} steps of {spec.sft.batch_size} problems, one thread"
    )
    history = train_sft(model, tokenizer, splits.sft_stream(), spec.sft)
    model.save_pretrained(out / "model")
    tokenizer.save_pretrained(out / "model")
    return {
        "spec": spec.as_dict(),
        "build_version": BUILD_VERSION,
        "base": base.key,
        "base_weights_sha256": base.manifest()["weights_sha256"],
        "parameters": params,
        "vocab_size": len(tokenizer),
        "weights_sha256": _weights_sha256(model),
        "train_problems": len(splits.train),
        "val_problems": len(splits.val),
        "sft_loss": history,
        "build_seconds": round(time.monotonic() - started, 1),
        "torch_threads": 1,
    }


def _build_into(spec: TestbedSpec, out: Path) -> dict[str, Any]:
    started = time.monotonic()
    if isinstance(spec.task, MixedTaskSpec):
        splits = spec.task.make_splits()
        splits.write(out / "data")
    else:
        splits = make_splits(spec.task)
        write_data(splits, out / "data")
    tokenizer = build_tokenizer(tokenizer_corpus())
    model = build_model(tokenizer, spec.model, spec.sft.seed)
    params = sum(p.numel() for p in model.parameters())
    _log(
        f"SFT of a {params / 1e6:.2f}M-parameter Qwen2 ({spec.model.num_layers} layers, width "
        f"{spec.model.hidden_size}, vocabulary {len(tokenizer)}) for {spec.sft.steps} steps of "
        f"{spec.sft.batch_size} problems, one thread"
    )
    history = train_sft(model, tokenizer, splits.sft_stream(), spec.sft)
    model.save_pretrained(out / "model")
    tokenizer.save_pretrained(out / "model")
    return {
        "spec": spec.as_dict(),
        "build_version": BUILD_VERSION,
        "parameters": params,
        "vocab_size": len(tokenizer),
        "weights_sha256": _weights_sha256(model),
        "train_problems": len(splits.train),
        "val_problems": len(splits.val),
        "sft_loss": history,
        "build_seconds": round(time.monotonic() - started, 1),
        "torch_threads": 1,
    }


def locate_testbed(spec: TestbedSpec | ContinuedSpec | None = None, root: Path | None = None) -> Testbed:
    """Where ``spec``'s testbed is (or will be) cached, without building it."""
    spec = spec or TestbedSpec()
    return Testbed((root or cache_root()) / spec.key(), spec.key())


def ensure_testbed(
    spec: TestbedSpec | ContinuedSpec | None = None, root: Path | None = None, rebuild: bool = False
) -> Testbed:
    """The cached testbed of ``spec`` (default: the study's), built first when missing.

    Args:
        spec: the testbed recipe; ``TestbedSpec()`` is the one the study uses.
        root: cache folder (default :func:`cache_root`).
        rebuild: build again even when cached (the old folder is replaced only once the new one is done).
    """
    spec = spec or TestbedSpec()
    root = root or cache_root()
    key = spec.key()
    final = root / key
    with _locked(root / f".{key}.lock"):
        if (final / MANIFEST).is_file() and not rebuild:
            return Testbed(final, key)
        _log(f"building testbed {key} in {final}")
        with atomic_dir(final) as tmp:
            if isinstance(spec, ContinuedSpec):
                manifest = _continue_into(spec, tmp, root)
            else:
                manifest = _build_into(spec, tmp)
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        _log(f"testbed {key} built in {manifest['build_seconds']:.0f} s")
    return Testbed(final, key)
