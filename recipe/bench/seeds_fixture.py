"""A testbed-shaped policy and data for timing the fast trainer without building (SFT-training) a testbed.

The study's policy is ``ModelShape()`` (4 layers, width 128, ~1M parameters) with the testbed's BPE
tokenizer, on testbed v2's tasks (``MixedTaskSpec``). Speed depends on those shapes, not on the weights,
except through the response lengths: a random policy rarely emits the end-of-turn token, so its
responses run to ``data.max_response_length`` (16), where the trained policy's right answers end at
~9 tokens. Timings on this policy are therefore an upper bound on a step's work.
"""

from __future__ import annotations

from pathlib import Path

from recipe.launch import format_overrides


def build_testbed_like(root: Path, *, val_per_task: int = 64, seed: int = 0) -> tuple[Path, Path]:
    """Write ``root/model`` (random ``ModelShape()`` policy) and ``root/data``; returns (model, data)."""
    from recipe.models.tiny import ModelShape, build_model
    from recipe.study.testbed.build import tokenizer_corpus
    from recipe.study.testbed.mixed import MixedTaskSpec
    from recipe.study.testbed.tokenizer import build_tokenizer

    model_dir, data_dir = root / "model", root / "data"
    if not (model_dir / "config.json").is_file():
        tokenizer = build_tokenizer(tokenizer_corpus())
        model = build_model(tokenizer, ModelShape(), seed)
        model.save_pretrained(model_dir)
        tokenizer.save_pretrained(model_dir)
    if not (data_dir / "train.parquet").is_file():
        MixedTaskSpec(val_per_task=val_per_task).make_splits().write(data_dir)
    return model_dir, data_dir


def fast_overrides(model_dir: Path, data_dir: Path, seed: int, steps: int, *extra: str) -> list[str]:
    """A testbed2_cpu fast run of ``steps`` steps on the fixture, both seeds ``seed``."""
    settings = {
        "actor_rollout_ref.model.path": model_dir,
        "data.train_files": data_dir / "train.parquet",
        "data.val_files": data_dir / "val.parquet",
        "data.seed": seed,
        "actor_rollout_ref.rollout.seed": seed,
        "trainer.total_training_steps": steps,
    }
    return [*format_overrides(settings), *extra]
