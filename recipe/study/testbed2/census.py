"""Step-0 census of testbed v2: the SFT policy's groups per task and per level, at the study's G and T.

Samples ``actor_rollout_ref.rollout.n`` responses at the training temperature for the first
``per_task`` training prompts of each task, with the fast trainer's rollout and the configured reward,
and counts all-correct, all-wrong and mixed groups (``recipe.study.census.census_rows``) into
``census.csv``; the docs show it through ``recipe.study.testbed2.report`` (``census`` fragment).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from recipe.study.census import CENSUS_COLUMNS, census_rows
from recipe.study.steps import write_csv
from recipe.study.testbed.mixed import level_of


def run_census(config: Any, per_task: int, seed: int, out_dir: Path) -> list[dict[str, Any]]:
    """Census rows per task and per level (task rows first), written as ``census.csv``/``census.md``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from verl.trainer.ppo.reward import get_custom_reward_fn

    from recipe.cpu_backend.sampling import SamplingParams
    from recipe.study.fast.data import load_prompts
    from recipe.study.fast.rollout import rollout
    from recipe.study.fast.settings import FastSettings

    torch.set_num_threads(1)
    settings = FastSettings.from_config(config)
    path = str(config.actor_rollout_ref.model.path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa").eval()
    prompts = load_prompts(str(config.data.train_files), tokenizer, settings.max_prompt_length)
    chosen = []
    for task in sorted({p.data_source for p in prompts}):
        mine = [p for p in prompts if p.data_source == task][:per_task]
        if len(mine) < per_task:
            raise ValueError(f"census: task {task} has {len(mine)} training prompts, fewer than {per_task}")
        chosen += mine
    params = SamplingParams(
        temperature=settings.temperature,
        top_p=settings.top_p,
        top_k=settings.top_k,
        max_tokens=settings.max_response_length,
    )
    groups = rollout(
        model,
        tokenizer,
        get_custom_reward_fn(config),
        chosen,
        [str(p.row) for p in chosen],
        settings.n,
        params,
        torch.Generator().manual_seed(seed),
    )
    tasks, levels = [], []
    for g in groups:
        for correct in g.accs:
            problem = {"problem_id": g.uid, "correct": bool(correct)}
            tasks.append({**problem, "dataset": g.prompt.data_source})
            levels.append({**problem, "dataset": level_of(str(g.prompt.extra_info["original_id"]))})
    rows = census_rows(tasks) + [r for r in census_rows(levels) if r["dataset"] != "all"]
    write_csv(out_dir / "census.csv", rows, list(CENSUS_COLUMNS))
    return rows
