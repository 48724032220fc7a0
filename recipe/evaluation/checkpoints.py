"""Which models to evaluate: HF folders and verl checkpoints, merged to HF format lazily.

Accepted ``--model`` paths:
    * a HF model folder (has ``config.json``), or a hub id when it is not a local path;
    * a verl step folder ``<run>/global_step_N`` (with ``actor/``);
    * a verl run folder holding ``global_step_*`` folders: every step, in step order.

A verl actor folder holds FSDP shards plus ``huggingface/`` (config and tokenizer, and the full
weights when the run saved ``hf_model``). Shards are merged with verl's own merger
(``python -m verl.model_merger merge --backend fsdp``) into ``<out>/merged/<run>/global_step_N``,
once: an existing merge is reused.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from recipe.evaluation import children
from recipe.files import atomic_dir

_STEP_RE = re.compile(r"^global_step_(\d+)$")
_WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")


@dataclass(frozen=True)
class ModelSpec:
    """One model to evaluate.

    Attributes:
        name: label in outputs: the folder name, or ``<run>/global_step_N``.
        step: training step for verl checkpoints (or a folder named global_step_N), else None.
        source: the path given or discovered (HF folder, hub id or verl step folder).
        actor_dir: verl ``actor/`` folder when the model needs merging, else None.
    """

    name: str
    step: int | None
    source: str
    actor_dir: Path | None = None


def _has_weights(folder: Path) -> bool:
    return (folder / "config.json").is_file() and any(any(folder.glob(p)) for p in _WEIGHT_PATTERNS)


def _step_spec(step_dir: Path, run_name: str) -> ModelSpec:
    step = int(_STEP_RE.match(step_dir.name).group(1))
    actor = step_dir / "actor"
    if not actor.is_dir():
        raise ValueError(f"--model {step_dir}: a verl step folder must contain actor/, found none")
    return ModelSpec(name=f"{run_name}/{step_dir.name}", step=step, source=str(step_dir), actor_dir=actor)


def discover_models(paths: list[str]) -> list[ModelSpec]:
    """Expand ``--model`` arguments into models, in the order given (steps ascending within a run).

    Raises:
        ValueError: a local path is none of the accepted layouts, or two models share a name.
    """
    specs: list[ModelSpec] = []
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            # hub ids look like "org/name"; anything else missing, or any id while offline, is a typo
            offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0")
            if raw.startswith((".", "/", "~")) or raw.count("/") != 1 or offline:
                raise ValueError(
                    f"--model {raw}: no such folder" + (" (and HF_HUB_OFFLINE is set)" if offline else "")
                )
            specs.append(ModelSpec(name=raw, step=None, source=raw))  # a hub id, loaded by the backend
            continue
        path = path.resolve()
        step_match = _STEP_RE.match(path.name)
        if (path / "config.json").is_file():
            specs.append(ModelSpec(path.name, int(step_match.group(1)) if step_match else None, str(path)))
        elif step_match:
            specs.append(_step_spec(path, path.parent.name))
        else:
            steps = sorted(
                (p for p in path.iterdir() if p.is_dir() and _STEP_RE.match(p.name)),
                key=lambda p: int(_STEP_RE.match(p.name).group(1)),
            )
            if not steps:
                raise ValueError(
                    f"--model {raw}: neither a HF model folder (config.json), a verl step folder "
                    f"(global_step_N/actor) nor a run folder with global_step_* inside"
                )
            specs.extend(_step_spec(s, path.name) for s in steps)
    names = [s.name for s in specs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"--model: several models would be labelled {duplicates}; pass distinct folders")
    return specs


def _refuse_cpu_only_attention(config_json: Path, spec: ModelSpec) -> None:
    """CPU runs saved before 2026-11-25 named the CPU-only ``sdpa_gqa`` attention in their config,
    which verl's merger, transformers and vLLM refuse with a message that does not say what to do."""
    from recipe.cpu_backend.attention import ATTN_IMPLEMENTATION

    if not config_json.is_file():
        return
    if json.loads(config_json.read_text()).get("attn_implementation") == ATTN_IMPLEMENTATION:
        raise ValueError(
            f"--model {spec.source}: {config_json} names attn_implementation={ATTN_IMPLEMENTATION!r}, the "
            f"CPU backend's own attention, which only a CPU training run can load. It computes SDPA's "
            f'attention: set "attn_implementation": "sdpa" in that file and evaluate again.'
        )


def _refuse_broken_shards(spec: ModelSpec) -> None:
    """A model shard cut short (a save killed mid-write, a partial copy) is not a complete torch archive:
    name the file, before verl's merger fails on it with an error that names none. Reads only each
    file's end (the zip directory), so it is cheap on a 90 GB checkpoint."""
    for shard in sorted(spec.actor_dir.glob("model_world_size_*_rank_*.pt")):
        if not zipfile.is_zipfile(shard):
            raise ValueError(
                f"--model {spec.source}: {shard} is truncated or corrupted (not a complete torch archive, "
                f"{shard.stat().st_size} bytes): this checkpoint cannot be loaded; save it again or leave it out"
            )


def merged_dir(spec: ModelSpec, out_dir: Path) -> Path:
    """Where the merged HF model of a verl checkpoint lives."""
    return out_dir / "merged" / spec.name


def resolve_hf_path(spec: ModelSpec, out_dir: Path, log=print) -> str:
    """A path (or hub id) that ``from_pretrained`` / vLLM can load, merging FSDP shards if needed.

    Returns ``actor/huggingface`` when it already holds full weights; otherwise runs verl's merger
    into a temporary folder renamed into place, so an interrupted merge is redone, never reused.
    """
    if spec.actor_dir is None:
        if Path(spec.source).is_dir():
            _refuse_cpu_only_attention(Path(spec.source) / "config.json", spec)
        return spec.source
    hf_dir = spec.actor_dir / "huggingface"
    _refuse_cpu_only_attention(hf_dir / "config.json", spec)
    if _has_weights(hf_dir):
        return str(hf_dir)
    target = merged_dir(spec, out_dir)
    if _has_weights(target):
        return str(target)
    backend = "fsdp" if (spec.actor_dir / "fsdp_config.json").is_file() else "megatron"
    if backend == "fsdp" and not any(spec.actor_dir.glob("model_world_size_*_rank_0.pt")):
        raise ValueError(
            f"--model {spec.source}: {spec.actor_dir} has fsdp_config.json but no model_world_size_*_rank_0.pt "
            f"shards and no weights in huggingface/; was the checkpoint saved with save_contents including 'model'?"
        )
    if backend == "fsdp":
        _refuse_broken_shards(spec)
    with atomic_dir(target) as tmp:
        cmd = [
            sys.executable,
            "-m",
            "verl.model_merger",
            "merge",
            "--backend",
            backend,
            "--local_dir",
            str(spec.actor_dir),
            "--target_dir",
            str(tmp),
        ]
        log(f"[merge] {spec.name}: {' '.join(cmd[1:])}")
        # A process group of its own, listed in children.CHILDREN: a stop request stops it too.
        merger = children.start(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            _, stderr = merger.communicate()
        finally:
            children.forget(merger)
        if merger.returncode != 0 or not _has_weights(tmp):
            raise RuntimeError(
                f"verl's model merger failed for {spec.actor_dir} (exit {merger.returncode}); run it by hand "
                f"to see why: python {' '.join(cmd[1:-2])} --target_dir <dir>\n{stderr[-2000:]}"
            )
    return str(target)
