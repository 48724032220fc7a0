"""S seeds of one method in one process: the fast trainer's runs with the model passes batched across seeds.

    python -m recipe.study.fast.seeds OUT_ROOT --seeds 0,1,2 --config-name testbed2_cpu [hydra overrides]

trains, in one process, the runs ``python -m recipe.study.fast.run OUT_ROOT/seed<k> --config-name ...
[overrides] data.seed=k actor_rollout_ref.rollout.seed=k`` would train one by one: the composed config
with both seeds set to ``k`` (set on the composed config, the one key pair a seed changes), and writes
each seed's folder in :mod:`recipe.study.fast.run`'s format (``config.yaml``, ``metrics.jsonl``,
``validation.npz``, ``result.json``). :func:`run_seeds` takes S composed configs that differ only in
``data.seed`` and ``actor_rollout_ref.rollout.seed``.

What is shared: one :class:`~recipe.study.fast.grouped.GroupedQwen2` holds the S policies (all start
from ``actor_rollout_ref.model.path``, as S single runs do); each step generates, recomputes log-probs
and updates all S together (:mod:`recipe.study.fast.grouped_step`). What stays each seed's own: its data
order (``data.seed``), its sampling generator (``rollout.seed``, the step and the stream, as
:class:`~recipe.study.fast.run.FastRun`), its advantages, loss, gradient clipping and metrics.

Timing in the rows and ``result.json``: ``perf/step_*`` and ``perf/val_*`` are the batched step's and
validation's seconds (shared by the S seeds); ``result.json``'s ``wall_s``/``cpu_s`` are the whole
process's divided by S (each run's share), with ``batch_wall_s``, ``batch_cpu_s`` and ``seeds_in_batch``.

Not batched (refused with the key): DAPO's dynamic sampling (``algorithm.filter_groups.enable``), whose
rounds differ per seed.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from recipe.study.fast.dapo import StepSample
from recipe.study.fast.data import Prompt, data_order, load_prompts
from recipe.study.fast.grouped import GroupedQwen2, load_seed_into
from recipe.study.fast.grouped_step import sample_seeds, seed_log_probs, train_seeds
from recipe.study.fast.rollout import Group, score_groups
from recipe.study.fast.run import (
    CONFIG,
    METRICS,
    RESULT,
    ROLLOUT_STREAM,
    VALIDATION,
    VALIDATION_STREAM,
    load_reward_and_policy,
    step_row,
)
from recipe.study.fast.settings import FastConfigError, FastSettings
from recipe.study.fast.update import batch_from_groups, build_optimizer
from recipe.study.fast.validate import CHUNK, seed_for, validation_metrics, validation_params
from recipe.tracking import names

SEED_KEYS = ("data.seed", "actor_rollout_ref.rollout.seed")


def _same_run(settings: Sequence[FastSettings], configs: Sequence[Any]) -> None:
    """Refuse configs that differ in anything but the two seeds (or ask for DAPO filtering)."""
    from omegaconf import OmegaConf

    def strip(c: Any) -> dict[str, Any]:
        plain = OmegaConf.to_container(c, resolve=True)
        assert isinstance(plain, dict)
        plain["data"].pop("seed", None)
        plain["actor_rollout_ref"]["rollout"].pop("seed", None)
        return plain

    first = strip(configs[0])
    for c in configs[1:]:
        if strip(c) != first:
            raise FastConfigError(f"run_seeds: the configs differ in more than {SEED_KEYS}")
    if settings[0].filter_groups:
        raise FastConfigError(
            "algorithm.filter_groups.enable=True: DAPO's rounds differ per seed; the batched trainer does not "
            "run them (run the seeds one by one with recipe.study.fast.run)"
        )
    if settings[0].budget_in_samples:
        # without filtering it would equal the step budget, but the rows would lack the cumulative counts
        raise FastConfigError(
            "fast.budget_in_samples=True: the batched trainer budgets in steps (run it with recipe.study.fast.run)"
        )
    seeds = [(s.data_seed, s.rollout_seed) for s in settings]
    if len(set(seeds)) != len(seeds):
        raise FastConfigError(f"run_seeds: two runs with the same seeds {seeds}")


class ManySeeds:
    """The state of S runs: one grouped model and optimizer, a data stream and seeds per run."""

    def __init__(self, configs: Sequence[Any]) -> None:
        from recipe.cpu_backend.sampling import SamplingParams

        self.settings = [FastSettings.from_config(c) for c in configs]
        _same_run(self.settings, configs)
        config = configs[0]
        self.reward_fn, self.tokenizer, model = load_reward_and_policy(config)
        self.model = GroupedQwen2.from_models([model] * len(configs))
        s = self.settings[0]
        self.train = load_prompts(str(config.data.train_files), self.tokenizer, s.max_prompt_length)
        self.val = load_prompts(str(config.data.val_files), self.tokenizer, s.max_prompt_length)
        self.orders = [data_order(len(self.train), x.data_seed, x.shuffle) for x in self.settings]
        self.optimizer, self.scheduler = build_optimizer(self.model, s)
        self.params = SamplingParams(
            temperature=s.temperature, top_p=s.top_p, top_k=s.top_k, max_tokens=s.max_response_length
        )
        self.eos = [int(self.tokenizer.eos_token_id)]
        self.pad = int(self.tokenizer.pad_token_id)
        self.dispatched = [0] * len(configs)

    @property
    def num_seeds(self) -> int:
        return len(self.settings)

    def _generate(
        self, prompts: Sequence[Sequence[Prompt]], uids: Sequence[Sequence[str]], n: int, params: Any,
        generators: Sequence[torch.Generator],
    ) -> list[list[Group]]:  # fmt: skip
        self.model.eval()
        samples = sample_seeds(
            self.model, [[p.ids for p in mine] for mine in prompts], n, params,
            eos_token_ids=self.eos, pad_token_id=self.pad, generators=generators,
        )  # fmt: skip
        return [
            score_groups(self.reward_fn, self.tokenizer, p, u, x)
            for p, u, x in zip(prompts, uids, samples, strict=True)
        ]

    def step(self, step: int) -> list[dict[str, Any]]:
        """Sample, score and update every seed: one metrics row per seed."""
        s = self.settings[0]
        prompts, uids = [], []
        for i, order in enumerate(self.orders):
            prompts.append([self.train[next(order)] for _ in range(s.batch_size)])
            uids.append([str(self.dispatched[i] + j) for j in range(s.batch_size)])
            self.dispatched[i] += s.batch_size
        generators = [
            torch.Generator().manual_seed(seed_for(x.rollout_seed, step, ROLLOUT_STREAM))
            for x in self.settings
        ]
        groups = self._generate(prompts, uids, s.n, self.params, generators)
        batches = [batch_from_groups(g, self.pad) for g in groups]
        if not s.reuse_rollout_log_probs:
            with torch.no_grad():
                self.model.eval()
                old = seed_log_probs(self.model, batches, s.temperature, self.pad, group_size=s.n)
            for b, lp in zip(batches, old, strict=True):
                b.old_log_probs = lp
        metrics = train_seeds(
            self.model, self.optimizer, self.scheduler, batches, s, step, self.pad, group_size=s.n
        )
        return [
            step_row(StepSample(kept=g, generated=g), b, m)
            for g, b, m in zip(groups, batches, metrics, strict=True)
        ]

    def validate(self, step: int) -> list[np.ndarray]:
        """Each seed's ``(P,)`` correct samples per validation problem, as ``validate.validate`` draws them."""
        s = self.settings[0]
        params = validation_params(s)
        n = s.val_n if s.val_do_sample else 1
        generators = [
            torch.Generator().manual_seed(seed_for(x.rollout_seed, step, VALIDATION_STREAM))
            for x in self.settings
        ]
        correct = [np.zeros(len(self.val), dtype=np.int16) for _ in self.settings]
        for start in range(0, len(self.val), CHUNK):  # validate.py's chunks: the same draws per row
            chunk = self.val[start : start + CHUNK]
            uids = [str(p.row) for p in chunk]
            groups = self._generate([chunk] * self.num_seeds, [uids] * self.num_seeds, n, params, generators)
            for i, mine in enumerate(groups):
                correct[i][start : start + len(chunk)] = [sum(g.accs) for g in mine]
        return correct

    def load_into(self, model: torch.nn.Module, seed_index: int) -> None:
        """Copy run ``seed_index``'s current weights into a ``Qwen2ForCausalLM``."""
        load_seed_into(model, self.model, seed_index)


def run_seeds(configs: Sequence[Any], out_dirs: Sequence[str | Path]) -> list[dict[str, Any]]:
    """Train S runs of composed configs (differing only in seeds) into ``out_dirs`` (see the module docstring)."""
    from omegaconf import OmegaConf

    from recipe.tracking.jsonl import JsonlMetricsWriter

    if len(configs) != len(out_dirs) or not configs:
        raise ValueError("run_seeds: one output folder per config, at least one")
    torch.set_num_threads(1)
    started_wall, started_cpu = time.monotonic(), time.process_time()
    outs = [Path(o) for o in out_dirs]
    for out, config in zip(outs, configs, strict=True):
        out.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(config, out / CONFIG)
    runs = ManySeeds(configs)
    s = runs.settings[0]
    writers = [JsonlMetricsWriter(str(out / METRICS)) for out in outs]
    val_steps: list[int] = []
    val_correct: list[list[np.ndarray]] = [[] for _ in outs]
    n = s.val_n if s.val_do_sample else 1

    def validate_into(step: int, rows: list[dict[str, Any]]) -> None:
        t_wall, t_cpu = time.monotonic(), time.process_time()
        correct = runs.validate(step)
        val_steps.append(step)
        for i, row in enumerate(rows):
            val_correct[i].append(correct[i])
            row.update(validation_metrics(runs.val, correct[i], n))
            row[names.PERF_VAL_WALL_S] = time.monotonic() - t_wall
            row[names.PERF_VAL_CPU_S] = time.process_time() - t_cpu

    try:
        if s.val_before_train:
            rows: list[dict[str, Any]] = [{} for _ in outs]
            validate_into(0, rows)
            for w, row in zip(writers, rows, strict=True):
                w.write(row, step=0)
        for step in range(1, s.steps + 1):
            t_wall, t_cpu = time.monotonic(), time.process_time()
            rows = runs.step(step)
            wall, cpu = time.monotonic() - t_wall, time.process_time() - t_cpu
            for row in rows:
                row[names.PERF_STEP_WALL_S] = wall
                row[names.PERF_STEP_CPU_S] = cpu
                row[names.STEP_TIME] = wall
            if (s.test_freq > 0 and step % s.test_freq == 0) or step == s.steps:
                validate_into(step, rows)
            for w, row in zip(writers, rows, strict=True):
                w.write(row, step=step)
            accs = " ".join(f"{row[names.SCORE_MEAN]:.3f}" for row in rows)
            print(f"[fast x{len(outs)}] step {step}/{s.steps}  train acc {accs}  {wall:.2f} s", flush=True)
    finally:
        for w in writers:
            w.close()
    batch_wall, batch_cpu = time.monotonic() - started_wall, time.process_time() - started_cpu
    results = []
    for i, out in enumerate(outs):
        np.savez_compressed(
            out / VALIDATION, steps=np.array(val_steps), correct=np.stack(val_correct[i]), n=n
        )
        result = {
            "wall_s": round(batch_wall / len(outs), 2),
            "cpu_s": round(batch_cpu / len(outs), 2),
            "steps": s.steps,
            "torch_threads": torch.get_num_threads(),
            "batch_wall_s": round(batch_wall, 2),
            "batch_cpu_s": round(batch_cpu, 2),
            "seeds_in_batch": len(outs),
        }
        (out / RESULT).write_text(json.dumps(result, indent=2) + "\n")
        results.append(result)
    return results


def with_seed(config: Any, seed: int) -> Any:
    """A copy of a composed config with ``data.seed`` and ``actor_rollout_ref.rollout.seed`` set to ``seed``."""
    from omegaconf import OmegaConf

    out = OmegaConf.create(OmegaConf.to_container(config, resolve=False))
    OmegaConf.update(out, "data.seed", int(seed))
    OmegaConf.update(out, "actor_rollout_ref.rollout.seed", int(seed))
    return out


def main(argv: list[str] | None = None) -> int:
    from recipe.copo.config_check import compose_and_validate

    args = sys.argv[1:] if argv is None else argv
    if len(args) < 5 or args[1] != "--seeds" or args[3] != "--config-name":
        print(__doc__, file=sys.stderr)
        return 2
    root, seeds, config_name, overrides = (
        Path(args[0]),
        [int(x) for x in args[2].split(",")],
        args[4],
        args[5:],
    )
    base = compose_and_validate(overrides, config_name=config_name)
    run_seeds([with_seed(base, k) for k in seeds], [root / f"seed{k}" for k in seeds])
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["ManySeeds", "run_seeds", "with_seed"]
