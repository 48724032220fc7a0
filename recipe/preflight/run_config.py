"""The named run's composed config, as main_copo composes, resolves and validates it."""

from __future__ import annotations

from collections.abc import Sequence

from omegaconf import DictConfig, OmegaConf

from recipe.copo.config_check import compose, validate_copo_config
from recipe.copo.throughput import resolve_attention
from recipe.launch import RunSpec
from recipe.launch.spec import MODEL_KEY


def named_model(config_name: str, overrides: Sequence[str] = ()) -> str:
    """The run's ``actor_rollout_ref.model.path`` (a hub id or a local folder; MODEL_PATH honoured)."""
    path = OmegaConf.select(compose(list(overrides), config_name=config_name), MODEL_KEY, default=None)
    if path in (None, "", "???"):
        raise ValueError(f"--config-name {config_name} names no model: pass --model or {MODEL_KEY}=...")
    return str(path)


def run_config(
    config_name: str, model_dir: str, overrides: Sequence[str] = (), *, flash_attn: bool | None = None
) -> tuple[DictConfig, str]:
    """The run's config with the random model in place of its model and placeholders for the data
    and checkpoint paths the actor never reads; ``auto`` attention resolved and the COPO checks run,
    as ``main_copo`` does. Returns (config, the attention line main_copo prints)."""
    config = compose(
        [
            *RunSpec(
                config_name,
                base=tuple(overrides),
                model=model_dir,
                train_files="unused.parquet",
                val_files=["unused.parquet"],
                checkpoints="unused",
            ).overrides(),
        ],
        config_name=config_name,
    )
    attention = resolve_attention(config, flash_attn=flash_attn)
    validate_copo_config(config)
    return config, attention
