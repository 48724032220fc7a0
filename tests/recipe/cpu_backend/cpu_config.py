"""copo_cpu.yaml composed as a job would, with placeholder paths, for the start-up checks' tests."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf


def cpu_config(**updates: object) -> DictConfig:
    """copo_cpu.yaml with ``updates`` applied; ``a__b=1`` sets key ``a.b`` (added if missing)."""
    from recipe.copo.config_check import compose

    config = compose(
        ["actor_rollout_ref.model.path=/m", "data.train_files=/t", "data.val_files=/v"],
        config_name="copo_cpu",
    )
    for key, value in updates.items():
        OmegaConf.update(config, key.replace("__", "."), value, force_add=True)
    return config
