"""Step-0 groups of G samples, per level and over a whole file: the rates the knob reads and the check.

Every row of a parquet gets ``n`` samples from the step-0 policy at the training sampling (the fast
trainer's sampler, ``recipe.study.fast.rollout``), scored by the reward the runs train on; the rows'
groups are counted per level and over all (``recipe.study.census.census_rows``: all-correct,
all-wrong, mixed). On testbed v3's validation problems this gives the per-level all-wrong rates the
knob (``mixture``) turns into a regime's weights; on a regime's training rows it measures the share
the regime reaches (a different set and different random numbers from the rates it was computed from).
A training row that repeats a problem is its own group, as it is its own draw in training.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from recipe.study.census import census_rows


def sample_census(
    model_dir: Path, parquet: Path, n: int, seed: int, temperature: float = 1.0, max_tokens: int = 16
) -> list[dict[str, Any]]:
    """Census rows (``CENSUS_COLUMNS``) per level of ``parquet`` and ``all``, from ``n`` samples per row."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from recipe.cpu_backend.sampling import SamplingParams
    from recipe.reward import compute_score
    from recipe.study.fast.data import load_prompts
    from recipe.study.fast.rollout import rollout
    from recipe.study.testbed.mixed import level_of

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        prompts = load_prompts(parquet, tokenizer, max_prompt_length=10_000)
        params = SamplingParams(temperature=temperature, top_p=1.0, top_k=-1, max_tokens=max_tokens)
        groups = rollout(
            model,
            tokenizer,
            compute_score,
            prompts,
            [str(p.row) for p in prompts],
            n,
            params,
            torch.Generator().manual_seed(seed),
        )
    finally:
        torch.set_num_threads(threads)
    samples = [
        {
            "dataset": level_of(str(g.prompt.extra_info["original_id"])),
            "problem_id": g.uid,
            "correct": bool(c),
        }
        for g in groups
        for c in g.accs
    ]
    return census_rows(samples)
