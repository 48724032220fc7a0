"""paper_base.yaml's throughput settings: attention decided at start-up, token budgets checked early."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from copo_core.config import ConfigError
from recipe.copo import throughput
from recipe.copo.config_check import compose
from recipe.copo.throughput import ATTN_KEY, PACKED_KEY, check_throughput, resolve_attention

PATHS = ["data.train_files=/t", "data.val_files=[/v]", "trainer.default_local_dir=/c"]


def paper(name: str = "copo_qwen2.5_3b", *overrides: str):
    return compose([*PATHS, *overrides], config_name=name)


@pytest.mark.parametrize(
    ("flash", "attn", "packed"), [(True, "flash_attention_2", True), (False, "sdpa", False)]
)
def test_auto_attention_is_flash_on_packed_rows_only_where_flash_attn_is_installed(
    flash, attn, packed
) -> None:
    config = paper()
    assert OmegaConf.select(config, ATTN_KEY) == OmegaConf.select(config, PACKED_KEY) == "auto"
    line = resolve_attention(config, flash_attn=flash)
    assert OmegaConf.select(config, ATTN_KEY) == attn and OmegaConf.select(config, PACKED_KEY) is packed
    assert attn in line and ("packed sequences" if packed else "padded micro-batches") in line
    assert ("pip install flash-attn" in line) is not flash


def test_explicit_settings_are_kept() -> None:
    config = paper("copo_qwen2.5_7b", f"{ATTN_KEY}=sdpa", f"{PACKED_KEY}=true")
    resolve_attention(config, flash_attn=True)
    assert OmegaConf.select(config, ATTN_KEY) == "sdpa" and OmegaConf.select(config, PACKED_KEY) is True
    config = paper("grpo_qwen2.5_3b", f"{ATTN_KEY}=flash_attention_2")
    resolve_attention(config, flash_attn=False)
    assert OmegaConf.select(config, PACKED_KEY) is True  # auto packing follows the chosen attention


@pytest.mark.parametrize("name", ["copo_qwen2.5_3b", "copo_qwen2.5_7b", "grpo_qwen2.5_7b", "dapo_qwen2.5_3b"])
def test_paper_runs_ship_dynamic_batches_with_budgets_of_two_sequences_or_more(name: str) -> None:
    config = paper(name)
    check_throughput(config)
    longest = config.data.max_prompt_length + config.data.max_response_length
    for dynamic, budget in throughput.BUDGETS:
        assert OmegaConf.select(config, dynamic) is True
        assert OmegaConf.select(config, budget) >= 2 * longest
    assert config.actor_rollout_ref.model.use_fused_kernels is True


@pytest.mark.parametrize(
    "key",
    [
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu",
        "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",
    ],
)
def test_a_budget_below_one_sequence_is_refused_naming_the_key(key: str) -> None:
    with pytest.raises(ConfigError, match=rf"{key}=3000 .* 3072 tokens; set it to at least 3072"):
        check_throughput(paper("copo_qwen2.5_3b", f"{key}=3000"))
    check_throughput(paper("copo_qwen2.5_3b", f"{key}=3072"))


def test_log_prob_pass_must_share_the_actors_dynamic_setting() -> None:
    key = "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz"
    with pytest.raises(
        ConfigError, match=f"{key}=False must equal actor_rollout_ref.actor.use_dynamic_bsz=True"
    ):
        check_throughput(paper("copo_qwen2.5_3b", f"{key}=false"))
    check_throughput(paper("copo_qwen2.5_3b", "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=false"))


def test_flash_attention_without_flash_attn_and_unknown_fused_backends_are_refused(monkeypatch) -> None:
    monkeypatch.setattr(throughput, "flash_attn_available", lambda: False)
    with pytest.raises(ConfigError, match=f"{ATTN_KEY}=flash_attention_2 but flash-attn is not installed"):
        check_throughput(paper("copo_qwen2.5_3b", f"{ATTN_KEY}=flash_attention_2"))
    backend = "actor_rollout_ref.model.fused_kernel_options.impl_backend"
    with pytest.raises(ConfigError, match=f"{backend} in .* got 'tourch'"):
        check_throughput(paper("copo_qwen2.5_3b", f"{backend}=tourch"))


def test_main_copo_resolves_attention_before_validating() -> None:
    import inspect

    from recipe.copo import config_check, main_copo

    source = inspect.getsource(main_copo.run_copo)
    assert source.index("resolve_attention(config)") < source.index("validate_copo_config(config)")
    assert "resolve_attention(config)" in inspect.getsource(config_check.compose_and_validate)


def test_a_step_that_does_not_split_over_the_gpus_is_refused_with_dynamic_batches_too() -> None:
    config = paper("copo_qwen2.5_7b", "trainer.nnodes=3", "trainer.n_gpus_per_node=8")
    with pytest.raises(ConfigError, match="4096 sequences per step must be divisible by .* = 24 GPUs"):
        check_throughput(config)
