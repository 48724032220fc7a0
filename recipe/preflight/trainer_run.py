"""Two full trainer steps of the named run on this one device: Ray, rollout, reward, the COPO step
and a checkpoint, through ``python -m recipe.copo.main_copo`` as a user launches it.

The run is the named config with one device's shape and a small batch (4 prompts x 4 responses,
short prompts and responses), the random model, and a few arithmetic prompts written here. The
rollout is vLLM when it imports, else the project's hf (transformers) server. On CPU, the CPU
backend's Ray settings are read from copo_cpu.yaml (the one place they live).
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from recipe import launch
from recipe.copo.config_check import CONFIG_DIR
from recipe.files import REPO_ROOT
from recipe.launch import RunSpec, tiny_run
from recipe.proc import stop_group

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


def cpu_settings() -> dict[str, object]:
    """copo_cpu.yaml's CPU runtime settings (:data:`CPU_SECTIONS`), each section a ``++`` setting (set,
    or add where verl's config has no such key)."""
    cpu = OmegaConf.load(Path(CONFIG_DIR) / "copo_cpu.yaml")
    out: dict[str, object] = {"trainer.device": "cpu"}
    for key in CPU_SECTIONS:
        value = OmegaConf.select(cpu, key)
        out[f"++{key}"] = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
    return out


def run_spec(
    config_name: str,
    model_dir: Path,
    work: Path,
    device: str,
    rollout: str,
    tiny: bool,
    base: Sequence[str] = (),
) -> RunSpec:
    """The named run (with its ``base`` overrides) shrunk to two steps on one device: the tiny run
    (recipe.launch) with this model, a few prompts written into ``work``, a checkpoint at the end and
    one device's shape (these win over ``base``)."""
    train = write_prompts(work / "train.parquet", 16, seed=0)
    val = write_prompts(work / "val.parquet", 4, seed=1)
    settings: dict[str, object] = {
        "data.max_prompt_length": 128,
        "data.max_response_length": 32 if tiny else 256,
        "actor_rollout_ref.rollout.tensor_model_parallel_size": 1,
        "trainer.nnodes": 1,
        "trainer.n_gpus_per_node": 1,
        "trainer.save_freq": STEPS,
        "trainer.resume_mode": "disable",
    }
    if rollout == "vllm":
        settings["actor_rollout_ref.rollout.gpu_memory_utilization"] = 0.3
    if device == "cpu":
        settings.update(cpu_settings())
    return tiny_run(
        config_name,
        base=tuple(base),
        model=model_dir,
        rollout=rollout,
        train_files=train,
        val_files=[val],
        settings=settings,
        steps=STEPS,
        checkpoints=work / "ckpt",
        metrics=work / "metrics.jsonl",
    )


@dataclass
class TrainerResult:
    ok: bool
    seconds: float
    steps: int
    checkpoint: Path | None
    log: Path
    reason: str = ""


def run_trainer(spec: RunSpec, work: Path, *, timeout_s: float, env: dict[str, str]) -> TrainerResult:
    """``python -m recipe.copo.main_copo`` of ``spec`` (recipe.launch); output to ``work/trainer.log``.

    The trainer runs in its own process group, stopped as a whole on a timeout or when this process
    is stopped (the caller wraps it in ``recipe.proc.stop_signals_forwarded``).
    """
    work.mkdir(parents=True, exist_ok=True)
    log = work / "trainer.log"
    start = time.perf_counter()
    with open(log, "w") as out:
        proc = launch.start(spec, env=env, stdout=out, stderr=out)
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
