"""A short ``main_copo --config-name copo_cpu`` job with verl's vLLM rollout, run by .venv-vllm's python.

A tiny random Qwen2 (``build_tiny_qwen2`` at width 128: 4 heads of 32, a head size vLLM-CPU's
attention supports; the default width 64 gives 16, which it refuses), arithmetic prompts and the
length-parity reward of tests/e2e (a random model scores 0 under a math verifier, so every group would
have zero variance; parity gives mixed groups and non-zero advantages).
"""

from __future__ import annotations

import glob
from pathlib import Path

from recipe.cpu_backend.vllm_plugin import SHM_LOG_ENV
from recipe.cpu_backend.vllm_rollout import SLEEP_KEY
from recipe.launch import RunSpec, tiny_run
from recipe.preflight.trainer_run import cpu_settings
from tests.e2e.cpu_run import PARITY_REWARD, cpu_env, write_prompt_parquet
from tests.vllm_cpu.venv import vllm_env


def tiny_model(root: Path) -> Path:
    from recipe.models.tiny import build_tiny_qwen2

    return build_tiny_qwen2(root / "tiny128", hidden_size=128)


def vllm_job_overrides(root: Path, out: Path, *, steps: int, model: Path | None = None) -> list[str]:
    """``--config-name copo_cpu`` and the overrides: the tiny run (recipe.launch) with verl's vLLM rollout,
    16 training prompts, the parity reward and micro-batches of 8."""
    train = write_prompt_parquet(root / "train.parquet", 16, seed=0)
    val = write_prompt_parquet(root / "val.parquet", 4, seed=1)
    spec = tiny_run(
        "copo_cpu",
        model=model or tiny_model(root),
        train_files=train,
        val_files=val,
        rollout="vllm",
        settings={
            "data.max_prompt_length": 64,
            "data.max_response_length": 16,
            "data.seed": 0,
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 8,
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 8,
            "reward.custom_reward_function.path": PARITY_REWARD,
            "reward.custom_reward_function.name": "compute_score",
            "trainer.save_freq": -1,
            "trainer.resume_mode": "disable",
            f"+{SLEEP_KEY}": False,  # vLLM refuses sleep mode on CPU; verl turns it on by default
        },
        steps=steps,
        checkpoints=out / "ckpt",
        metrics=out / "metrics.jsonl",
    )
    return spec.argv()


PAPER_CONFIG = "copo_qwen2.5_3b"
ROLLOUT = "actor_rollout_ref.rollout"
# The only keys of the paper config's rollout section a CPU box changes, and why; the test asserts that
# every other key of the composed section equals the paper config's.
PAPER_ROLLOUT_CHANGES = {
    "prompt_length": "follows data.max_prompt_length: 1024 -> 64 (CPU-sized)",
    "response_length": "follows data.max_response_length: 2048 -> 16 (CPU-sized)",
    "n_gpus_per_node": "follows trainer.n_gpus_per_node: 8 -> 1 (one CPU worker slot)",
    "enable_sleep_mode": "vLLM refuses sleep mode on CPU (recipe/cpu_backend/checks.py demands false)",
    "agent.num_workers": "copo_cpu.yaml's CPU section: one agent-loop worker on 2 cores (verl's 8)",
    "prometheus.served_model_name": "follows actor_rollout_ref.model.path: the tiny Qwen2 (prometheus is off)",
}


def paper_job_overrides(root: Path, out: Path, model: Path | None = None) -> list[str]:
    """``--config-name copo_qwen2.5_3b`` as a user composes it, and what a CPU box must change: the tiny
    Qwen2 in place of Qwen2.5-3B, CPU-sized lengths and batch (4 prompts, two mini-batches), one node of
    one worker slot, the CPU runtime sections (recipe/preflight/trainer_run.py's ``cpu_settings``), sleep
    mode off, the parity reward, one step after one small validation, and the generations dumped. The
    rollout section keeps the paper's keys but :data:`PAPER_ROLLOUT_CHANGES` (n=6 included: no tiny-run
    shape here)."""
    train = write_prompt_parquet(root / "train.parquet", 8, seed=0)
    val = write_prompt_parquet(root / "val.parquet", 2, seed=1)
    spec = RunSpec(
        PAPER_CONFIG,
        model=model or tiny_model(root),
        train_files=train,
        val_files=val,
        settings={
            **cpu_settings(),
            "trainer.nnodes": 1,
            "trainer.n_gpus_per_node": 1,
            "data.train_batch_size": 4,
            "data.max_prompt_length": 64,
            "data.max_response_length": 16,
            "actor_rollout_ref.actor.ppo_mini_batch_size": 2,
            "reward.custom_reward_function.path": PARITY_REWARD,
            "reward.custom_reward_function.name": "compute_score",
            "trainer.val_before_train": True,
            "trainer.test_freq": -1,
            "trainer.save_freq": -1,
            "trainer.resume_mode": "disable",
            "trainer.logger": ["console"],
            "trainer.rollout_data_dir": out / "generations",
            "trainer.validation_data_dir": out / "validation",
            f"+{SLEEP_KEY}": False,
        },
        steps=1,
        checkpoints=out / "ckpt",
        metrics=out / "metrics.jsonl",
    )
    return spec.argv()


def job_env(shm_log: Path) -> dict[str, str]:
    """The e2e tests' CPU job environment plus vLLM-CPU's defaults (recipe/cpu_backend/vllm_rollout.py);
    the vLLM plugin lists the shared-memory segments it unlinked in ``shm_log``."""
    return {**vllm_env(cpu_env()), SHM_LOG_ENV: str(shm_log)}


def segments_left(shm_log: Path) -> tuple[list[str], list[str]]:
    """(the vLLM ring buffers the plugin logged, those of them still in /dev/shm)."""
    names = shm_log.read_text().split() if shm_log.is_file() else []
    return names, [n for n in names if Path("/dev/shm", n).exists()]


def weight_segments() -> set[str]:
    """verl's weight-transfer segments now in /dev/shm (a run must leave none of its own)."""
    return set(glob.glob("/dev/shm/verl_weights_*"))


def assert_shm_clean(before: set[str], shm_log: Path, when: str) -> None:
    """No verl weight segment beyond ``before`` and none of the vLLM ring buffers the plugin logged is left."""
    new = weight_segments() - before
    assert not new, f"/dev/shm/verl_weights_* left {when}: {sorted(new)}"
    logged, left = segments_left(shm_log)
    assert logged and not left, f"vLLM ring buffers {logged}, left in /dev/shm {when}: {left}"
