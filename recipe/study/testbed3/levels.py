"""What a policy knows and what it samples, per level: the headroom testbed v3 is built to have.

For every validation problem: one greedy answer and G answers at the training temperature (the
fast trainer's sampler, ``recipe.study.fast.rollout.sample_forked``), scored by the project's reward.
Per level: greedy accuracy, sampled accuracy, and the shares of all-correct and all-wrong groups of G.
The gap between greedy and sampled accuracy is what RL's sharpening can take; the group shares are
the zero-variance regime at step 0.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from recipe.study.steps import write_csv

COLUMNS = ["policy", "level", "problems", "greedy", "sampled", "all_correct", "all_wrong", "G", "temperature"]


def measure(
    model_dir: Path, val_parquet: Path, policy: str, n: int = 4, temperature: float = 1.0, seed: int = 0
) -> list[dict[str, Any]]:
    """One row per level of ``val_parquet`` (and ``all``) for the policy in ``model_dir`` (one thread)."""
    import pandas as pd
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from recipe.cpu_backend.sampling import SamplingParams
    from recipe.reward import compute_score
    from recipe.study.fast.rollout import sample_forked
    from recipe.study.testbed.mixed import level_of

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        rows = pd.read_parquet(val_parquet).to_dict("records")
        prompts = [
            tokenizer.apply_chat_template(
                list(r["prompt"]), tokenize=True, add_generation_prompt=True, return_dict=False
            )
            for r in rows
        ]
        answers = [str(r["reward_model"]["ground_truth"]) for r in rows]
        levels = [level_of(str(r["extra_info"]["original_id"])) for r in rows]
        kw = {"eos_token_ids": [tokenizer.eos_token_id], "pad_token_id": tokenizer.pad_token_id}

        def score(sample: Any, answer: str) -> bool:
            text = tokenizer.decode(sample.token_ids, skip_special_tokens=True)
            return bool(compute_score("x", text, answer)["acc"])

        with torch.no_grad():
            sampled = sample_forked(
                model,
                prompts,
                n,
                SamplingParams(temperature=temperature, max_tokens=16),
                generator=torch.Generator().manual_seed(seed),
                **kw,
            )
            greedy = sample_forked(
                model, prompts, 1, SamplingParams(temperature=0.0, max_tokens=16), generator=None, **kw
            )
    finally:
        torch.set_num_threads(threads)
    by: dict[str, list[tuple[bool, list[bool]]]] = defaultdict(list)
    for level, answer, g, ss in zip(levels, answers, greedy, sampled, strict=True):
        item = (score(g[0], answer), [score(s, answer) for s in ss])
        by[level].append(item)
        by["all"].append(item)
    out = []
    for level in sorted(by, key=lambda k: (k == "all", k)):
        items = by[level]
        out.append(
            {
                "policy": policy,
                "level": level,
                "problems": len(items),
                "greedy": sum(g for g, _ in items) / len(items),
                "sampled": sum(sum(s) for _, s in items) / (n * len(items)),
                "all_correct": sum(all(s) for _, s in items) / len(items),
                "all_wrong": sum(not any(s) for _, s in items) / len(items),
                "G": n,
                "temperature": temperature,
            }
        )
    return out


def write(rows: list[dict[str, Any]], path: Path) -> None:
    write_csv(path, rows, COLUMNS)


def levels_markdown(rows: Any) -> str:
    """The levels table (rows: a DataFrame of ``levels.csv``)."""
    lines = [
        "| policy | level | problems | greedy (%) | sampled at T = 1 (%) | gap (points) | all correct (%) | all wrong (%) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for _, r in rows.iterrows():
        lines.append(
            f"| {r.policy} | {r.level} | {r.problems} | {100 * r.greedy:.1f} | {100 * r.sampled:.1f} | "
            f"{100 * (r.greedy - r.sampled):+.1f} | {100 * r.all_correct:.1f} | {100 * r.all_wrong:.1f} |"
        )
    g = int(rows.G.iloc[0])
    lines += ["", f"Every validation problem: one greedy answer and G = {g} samples at T = 1; groups of {g}."]
    return "\n".join(lines) + "\n"
