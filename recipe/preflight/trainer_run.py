"""Two full trainer steps of the named run on this one device: Ray, rollout, reward, the COPO step
and a checkpoint, through ``python -m recipe.copo.main_copo`` as a user launches it.

The run is the named config with one device's shape and a small batch (4 prompts x 4 responses,
short prompts and responses), the random model, and a few arithmetic prompts written here. The
rollout is vLLM when it imports, else the project's hf (transformers) server. On CPU, the CPU
backend's Ray settings are read from copo_cpu.yaml (the one place they live).
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from recipe.copo.config_check import CONFIG_DIR
from recipe.files import REPO_ROOT
from recipe.proc import start_group, stop_group

STEPS = 2
# copo_cpu.yaml sections a CPU trainer needs besides trainer.device=cpu (Ray's logical resources,
# one TransferQueue storage unit, no dataloader workers, one agent-loop and one reward worker).
CPU_SECTIONS = (
    "ray_kwargs.ray_init",
    "transfer_queue.backend.SimpleStorage",
    "data.dataloader_num_workers",
    "reward.num_workers",
    "actor_rollout_ref.rollout.agent.num_workers",
)


def write_prompts(path: Path, rows: int, seed: int) -> Path:
    """``rows`` arithmetic prompts in verl's RLHF parquet layout, scored by the project's reward."""
    import pandas as pd

    rng = random.Random(seed)
    records = []
    for i in range(rows):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        records.append(
            {
                "data_source": "preflight_arith",
                "prompt": [{"role": "user", "content": f"What is {a}+{b}? Put the answer in \\boxed{{}}."}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": str(a + b)},
                "extra_info": {"index": i, "split": "train"},
            }
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame.from_records(records).to_parquet(path)
    return path


def _flatten(prefix: str, value: object) -> list[str]:
    """``key=value`` Hydra overrides of a (nested) value, JSON-spelled (true, false, null, numbers)."""
    if isinstance(value, dict):
        return [o for k, v in value.items() for o in _flatten(f"{prefix}.{k}", v)]
    return [f"{prefix}={json.dumps(value)}"]


def cpu_overrides() -> list[str]:
    """copo_cpu.yaml's CPU runtime settings (:data:`CPU_SECTIONS`) as Hydra overrides (``++``: set,
    or add where verl's config has no such key)."""
    cpu = OmegaConf.load(Path(CONFIG_DIR) / "copo_cpu.yaml")
    out = ["trainer.device=cpu"]
    for key in CPU_SECTIONS:
        value = OmegaConf.select(cpu, key)
        plain = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
        out += [f"++{o}" for o in _flatten(key, plain)]
    return out


def overrides(model_dir: Path, work: Path, device: str, rollout: str, tiny: bool) -> list[str]:
    """Hydra overrides that shrink the named run to two steps on one device."""
    train = write_prompts(work / "train.parquet", 16, seed=0)
    val = write_prompts(work / "val.parquet", 4, seed=1)
    response = 32 if tiny else 256
    out = [
        f"actor_rollout_ref.model.path={model_dir}",
        f"data.train_files={train}",
        f"data.val_files=[{val}]",
        "data.train_batch_size=4",
        "data.max_prompt_length=128",
        f"data.max_response_length={response}",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        f"actor_rollout_ref.rollout.name={rollout}",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "trainer.nnodes=1",
        "trainer.n_gpus_per_node=1",
        f"trainer.total_training_steps={STEPS}",
        f"trainer.save_freq={STEPS}",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        "trainer.logger=[console]",
        "trainer.resume_mode=disable",
        f"trainer.default_local_dir={work / 'ckpt'}",
        f"trainer.metrics_jsonl={work / 'metrics.jsonl'}",
    ]
    if rollout == "vllm":
        out.append("actor_rollout_ref.rollout.gpu_memory_utilization=0.3")
    if device == "cpu":
        out += cpu_overrides()
    return out


@dataclass
class TrainerResult:
    ok: bool
    seconds: float
    steps: int
    checkpoint: Path | None
    log: Path
    reason: str = ""


def run_trainer(
    config_name: str, extra: Sequence[str], work: Path, *, timeout_s: float, env: dict[str, str]
) -> TrainerResult:
    """``python -m recipe.copo.main_copo --config-name NAME`` with ``extra``; output to ``work/trainer.log``.

    The trainer runs in its own process group, stopped as a whole on a timeout or when this process
    is stopped (the caller wraps it in ``recipe.proc.stop_signals_forwarded``).
    """
    work.mkdir(parents=True, exist_ok=True)
    log = work / "trainer.log"
    cmd = [sys.executable, "-m", "recipe.copo.main_copo", "--config-name", config_name, *extra]
    start = time.perf_counter()
    with open(log, "w") as out:
        proc = start_group(cmd, cwd=REPO_ROOT, env=env, stdout=out, stderr=out)
        try:
            rc = proc.wait(timeout=timeout_s)
        except BaseException:
            stop_group(proc, grace_s=10)
            raise
    seconds = time.perf_counter() - start
    metrics = work / "metrics.jsonl"
    steps = len(metrics.read_text().splitlines()) if metrics.is_file() else 0
    ckpt = work / "ckpt" / f"global_step_{STEPS}"
    ok = rc == 0 and steps >= STEPS and ckpt.is_dir()
    reason = (
        ""
        if ok
        else f"exit {rc}, {steps} step(s) logged, checkpoint {'found' if ckpt.is_dir() else 'missing'}"
    )
    return TrainerResult(ok, seconds, steps, ckpt if ckpt.is_dir() else None, log, reason)


def trainer_env(device: str) -> dict[str, str]:
    """The trainer's environment: offline, no wandb, this checkout importable by Ray workers."""
    env = dict(os.environ)
    env.update(
        {
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "WANDB_MODE": "disabled",
            "TOKENIZERS_PARALLELISM": "false",
            "PYTHONUNBUFFERED": "1",
        }
    )
    root = str(REPO_ROOT)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    if device == "cpu":
        env.pop("CUDA_VISIBLE_DEVICES", None)  # Ray refuses its logical GPU when this is ""
    return env
