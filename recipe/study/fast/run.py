"""One fast training run, with ``main_copo``'s command line::

    python -m recipe.study.fast.run OUT_DIR --config-name testbed2_cpu [hydra overrides]

The overrides are those a ``main_copo`` run would take; the config is composed and validated as
``main_copo`` does (``recipe.copo.config_check.compose_and_validate``) and saved as
``OUT_DIR/config.yaml``. The model and data paths, the seeds, the method and the workload are all
read from it (:mod:`recipe.study.fast.settings`). One thread (``torch.set_num_threads(1)``): a run's
numbers depend only on its config.

Writes into ``OUT_DIR``:

* ``metrics.jsonl``: one row per step (``recipe.tracking.jsonl`` format, verl's metric names where
  verl has one: ``critic/score/mean``, ``signal/*``, ``actor/*``, ``val-core/<task>/acc/mean@n``),
  plus the per-task group census of the generated groups (``groups/<task>/{all_correct,all_wrong,
  zero_variance,accuracy,count}``) and the step's wall and CPU seconds (``perf/step_wall_s``,
  ``perf/step_cpu_s``);
* ``validation.npz``: ``steps`` (V,) and ``correct`` (V, P) correct samples per validation problem;
* ``result.json``: wall and CPU seconds of the whole run and the steps trained, written last (a run
  without it did not finish).

With ``+fast.budget_in_samples=true`` (:mod:`recipe.study.fast.budget`; off by default, and then the files
are as above) the run stops and validates by cumulative generated samples, and records them: every row
has ``training/cumulative_generated_samples`` (0 at step 0) and ``training/sample_budget``, ``validation.npz``
has ``generated_samples`` (V,) and the validations' places on the step budget's axis (``budget_steps``,
``budget_index``: validation ``budget_index[j]`` stands at step ``budget_steps[j]``,
:mod:`recipe.study.common.sample_axis`), and ``result.json`` has ``budget_samples`` and ``generated_samples``.
"""

from __future__ import annotations

import json
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from recipe.study.fast.dapo import StepSample, sample_step
from recipe.study.fast.data import Prompt, data_order, load_prompts
from recipe.study.fast.rollout import Group, rollout
from recipe.study.fast.settings import FastSettings
from recipe.study.fast.update import (
    UpdateBatch,
    batch_from_groups,
    build_optimizer,
    response_log_probs,
    train_on_batch,
)
from recipe.study.fast.validate import seed_for, validate, validation_metrics
from recipe.tracking import names

CONFIG = "config.yaml"
RESULT = "result.json"
VALIDATION = "validation.npz"
METRICS = "metrics.jsonl"
# seed streams: the training rollout and validation sampling of a step never share random numbers
ROLLOUT_STREAM, VALIDATION_STREAM = 1, 2


def group_census(groups: Sequence[Group], prefix: str = names.GROUPS_PREFIX) -> dict[str, float]:
    """Per task (``data_source``) and over all: shares of all-correct, all-wrong and zero-variance groups."""
    by_task: dict[str, list[Group]] = defaultdict(list)
    for g in groups:
        by_task[g.prompt.data_source].append(g)
        by_task[names.GROUPS_ALL].append(g)
    out: dict[str, float] = {}
    for task, mine in by_task.items():
        n = len(mine)
        key = f"{prefix}{task}/"
        out[key + "count"] = float(n)
        out[key + "all_correct"] = sum(all(s > 0 for s in g.scores) for g in mine) / n
        out[key + "all_wrong"] = sum(not any(s > 0 for s in g.scores) for g in mine) / n
        out[key + "zero_variance"] = sum(g.zero_variance for g in mine) / n
        out[key + "accuracy"] = float(np.mean([s > 0 for g in mine for s in g.scores]))
    return out


def load_reward_and_policy(config: Any) -> tuple[Any, Any, Any]:
    """(the rule-based reward function, the tokenizer, the fp32 sdpa policy) a fast run trains with, from
    ``reward.custom_reward_function`` and ``actor_rollout_ref.model.path``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from verl.trainer.ppo.reward import get_custom_reward_fn

    reward_fn = get_custom_reward_fn(config)
    if reward_fn is None:
        raise ValueError("reward.custom_reward_function.path: the fast trainer needs a rule-based reward function")
    path = str(config.actor_rollout_ref.model.path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa")
    return reward_fn, tokenizer, model


class FastRun:
    """The state of one run: model, optimizer, data stream; :meth:`step` trains one step."""

    def __init__(self, config: Any) -> None:
        from recipe.cpu_backend.sampling import SamplingParams

        self.settings = FastSettings.from_config(config)
        self.reward_fn, self.tokenizer, self.model = load_reward_and_policy(config)
        s = self.settings
        self.train = load_prompts(str(config.data.train_files), self.tokenizer, s.max_prompt_length)
        self.val = load_prompts(str(config.data.val_files), self.tokenizer, s.max_prompt_length)
        self.order = data_order(len(self.train), s.data_seed, s.shuffle)
        self.optimizer, self.scheduler = build_optimizer(self.model, s)
        self.params = SamplingParams(
            temperature=s.temperature, top_p=s.top_p, top_k=s.top_k, max_tokens=s.max_response_length
        )
        self.dispatched = 0  # prompts taken from the data stream (uids are their dispatch numbers)

    def next_prompts(self, k: int) -> list[Prompt]:
        return [self.train[next(self.order)] for _ in range(k)]

    def validate(self, step: int) -> np.ndarray:
        return validate(
            self.model,
            self.tokenizer,
            self.reward_fn,
            self.val,
            self.settings,
            seed_for(self.settings.rollout_seed, step, VALIDATION_STREAM),
        )

    def sample(self, step: int) -> StepSample:
        s = self.settings
        generator = torch.Generator().manual_seed(seed_for(s.rollout_seed, step, ROLLOUT_STREAM))
        self.model.eval()

        def generate(prompts: Sequence[Prompt]) -> list[Group]:
            uids = [str(self.dispatched + i) for i in range(len(prompts))]
            self.dispatched += len(prompts)
            return rollout(
                self.model, self.tokenizer, self.reward_fn, prompts, uids, s.n, self.params, generator
            )

        return sample_step(
            self.next_prompts,
            generate,
            s.batch_size,
            filter_groups=s.filter_groups,
            metric=s.filter_metric,
            max_inflight_gen_batches=s.max_inflight_gen_batches,
        )

    def step(self, step: int) -> dict[str, Any]:
        """Sample, score, update: the step's metrics row."""
        s = self.settings
        sample = self.sample(step)
        batch = batch_from_groups(sample.kept, int(self.tokenizer.pad_token_id))
        if not s.reuse_rollout_log_probs:
            with torch.no_grad():
                self.model.eval()
                batch.old_log_probs = response_log_probs(self.model, batch, s.temperature, group_size=s.n)
        metrics = train_on_batch(self.model, self.optimizer, self.scheduler, batch, s, step, group_size=s.n)
        return step_row(sample, batch, metrics)


def step_row(sample: StepSample, batch: UpdateBatch, metrics: dict[str, Any]) -> dict[str, Any]:
    """A step's metrics row from its groups, its batch and the update's metrics (which hold
    ``_advantages``, popped here)."""
    from copo_core import signal_budget_metrics, wrong_answer_metrics

    advantages = metrics.pop("_advantages")
    step_batch = (advantages, batch.response_mask, batch.scores, batch.uids)
    metrics.update(names.prefixed(names.SIGNAL_PREFIX, signal_budget_metrics(*step_batch)))
    # the mechanism: what a wrong answer's advantage is, by group kind and prompt success
    metrics.update(names.prefixed(names.MECHANISM_PREFIX, wrong_answer_metrics(*step_batch)))
    metrics[names.SCORE_MEAN] = float(batch.scores.mean())
    metrics[names.RESPONSE_LENGTH_MEAN] = float(batch.response_mask.sum(-1).mean())
    metrics.update(group_census(sample.generated))
    metrics.update(group_census(sample.kept, prefix="batch_groups/"))
    metrics[names.GENERATED_SAMPLES] = float(sum(len(g.responses) for g in sample.generated))
    metrics[names.FILTER_GROUPS_EVICTED] = float(len(sample.evicted))
    metrics[names.FILTER_GROUPS_DISCARDED_SURPLUS] = float(len(sample.surplus))
    metrics[names.GENERATION_ROUNDS] = float(sample.rounds)
    return metrics


def run(config: Any, out_dir: str | Path) -> dict[str, Any]:
    """Train one run of a composed config into ``out_dir`` (see the module docstring)."""
    from omegaconf import OmegaConf

    from recipe.tracking.jsonl import JsonlMetricsWriter

    torch.set_num_threads(1)
    started_wall, started_cpu = time.monotonic(), time.process_time()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(config, out / CONFIG)
    fast = FastRun(config)
    s = fast.settings
    writer = JsonlMetricsWriter(str(out / METRICS))
    val_steps: list[int] = []
    val_correct: list[np.ndarray] = []
    n = s.val_n if s.val_do_sample else 1

    def validate_into(step: int, row: dict[str, Any]) -> None:
        t_wall, t_cpu = time.monotonic(), time.process_time()
        correct = fast.validate(step)
        val_steps.append(step)
        val_correct.append(correct)
        row.update(validation_metrics(fast.val, correct, n))
        row[names.PERF_VAL_WALL_S] = time.monotonic() - t_wall
        row[names.PERF_VAL_CPU_S] = time.process_time() - t_cpu

    budget = s.sample_budget  # None: the budget is in steps (the default, rows as before)
    cumulative = 0  # generated samples so far (recorded only with a sample budget)
    val_samples: list[int] = []
    # each validation's place on the step budget's axis: the steps whose sample counts it first reached
    budget_steps: list[int] = []
    budget_index: list[int] = []
    trained = 0
    try:
        if s.val_before_train:
            row: dict[str, Any] = {}
            if budget is not None:
                row[names.CUMULATIVE_GENERATED_SAMPLES] = 0.0
                row[names.SAMPLE_BUDGET] = float(budget.total)
                val_samples.append(0)
                budget_steps.append(0)
                budget_index.append(0)
            validate_into(0, row)
            writer.write(row, step=0)
        # with a sample budget every step generates >= train_batch_size x n samples, so the budget is
        # reached within total_training_steps steps and this loop never ends before it
        for step in range(1, s.steps + 1):
            t_wall, t_cpu = time.monotonic(), time.process_time()
            row = fast.step(step)
            row[names.PERF_STEP_WALL_S] = time.monotonic() - t_wall
            row[names.PERF_STEP_CPU_S] = time.process_time() - t_cpu
            row[names.STEP_TIME] = row[names.PERF_STEP_WALL_S]
            trained = step
            if budget is None:
                do_validate = (s.test_freq > 0 and step % s.test_freq == 0) or step == s.steps
            else:
                before, cumulative = cumulative, cumulative + int(row[names.GENERATED_SAMPLES])
                row[names.CUMULATIVE_GENERATED_SAMPLES] = float(cumulative)
                row[names.SAMPLE_BUDGET] = float(budget.total)  # the driver finishes the run by it
                reached = budget.crossed(before, cumulative)
                do_validate = bool(reached)
                if do_validate:
                    val_samples.append(cumulative)
                    budget_steps.extend(m // budget.per_step for m in reached)
                    budget_index.extend(len(val_samples) - 1 for _ in reached)
            if do_validate:
                validate_into(step, row)
            writer.write(row, step=step)
            print(
                f"[fast] step {step}/{s.steps}  train acc {row[names.SCORE_MEAN]:.3f}  "
                f"zero-var {row[names.GROUPS_ALL_ZERO_VARIANCE]:.2f}  {row[names.PERF_STEP_WALL_S]:.2f} s",
                flush=True,
            )
            if budget is not None and budget.exhausted(cumulative):
                break
    finally:
        writer.close()
    arrays: dict[str, Any] = {"steps": np.array(val_steps), "correct": np.stack(val_correct), "n": n}
    if budget is not None:
        arrays["generated_samples"] = np.array(val_samples)  # cumulative, at each validation
        # the report's axis (docs/STUDY_PLAN.md): validation budget_index[j] stands at step budget_steps[j]
        arrays["budget_steps"], arrays["budget_index"] = np.array(budget_steps), np.array(budget_index)
    np.savez_compressed(out / VALIDATION, **arrays)
    result: dict[str, Any] = {
        "wall_s": round(time.monotonic() - started_wall, 2),
        "cpu_s": round(time.process_time() - started_cpu, 2),
        "steps": trained,  # = trainer.total_training_steps without a sample budget
        "torch_threads": torch.get_num_threads(),
    }
    if budget is not None:
        result["budget_samples"] = budget.total
        result["generated_samples"] = cumulative
    (out / RESULT).write_text(json.dumps(result, indent=2) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    from recipe.copo.config_check import compose_and_validate

    args = sys.argv[1:] if argv is None else argv
    if len(args) < 3 or args[1] != "--config-name":
        print(__doc__, file=sys.stderr)
        return 2
    out_dir, config_name, overrides = args[0], args[2], args[3:]
    run(compose_and_validate(overrides, config_name=config_name), out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
