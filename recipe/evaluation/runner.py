"""The evaluation loop: checkpoints (outer) x datasets (inner), one loaded model at a time.

A checkpoint is merged and loaded only when at least one of its pairs is missing, so a rerun
over finished pairs loads nothing and generates nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from .backends import Backend, SamplingConfig, choose_backend, make_backend
from .checkpoints import ModelSpec, discover_models, resolve_hf_path
from .datasets import Problem, load_problems, problems_fingerprint, resolve_k, unused_overrides
from .metrics import dataset_metrics
from .scoring import DEFAULT_REWARD, load_reward_fn, score_responses
from .store import ResultStore

BackendFactory = Callable[..., Backend]

# Fault-test hook: "N" holds pair N (numbered as the log numbers them) in the middle of its generation,
# after the first progress update, until the process is killed, and says so on stderr first. A test
# then kills at a point the evaluation has reached for certain, instead of after a guessed sleep.
HOLD_PAIR_ENV = "COPO_TEST_HOLD_EVAL_PAIR"
HOLD_MESSAGE = "[eval] test hook: holding pair {number} mid-generation"


@dataclass
class EvalConfig:
    """What to evaluate and how (the CLI arguments of scripts/evaluate.py)."""

    models: Sequence[str]
    data: Sequence[str]
    out: str | Path
    k: int | None = None
    k_overrides: dict[str, int] = field(default_factory=dict)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    batch_size: int = 16
    backend: str = "auto"
    dtype: str = "auto"
    reward: str = DEFAULT_REWARD
    overwrite: bool = False
    vllm_engine: str | None = None  # module:Class in place of vllm.LLM (None: vLLM)


@dataclass
class EvalStats:
    """What a run did; ``generated_pairs == 0`` on a rerun over finished pairs."""

    generated_pairs: int = 0
    skipped_pairs: int = 0
    generated_samples: int = 0
    loaded_models: int = 0
    rows: list[dict[str, Any]] = field(default_factory=list)
    # checkpoints that could not be merged or loaded (name -> why); the others were evaluated
    failed: dict[str, str] = field(default_factory=dict)


def pair_seed(seed: int, dataset: str) -> int:
    """Sampling seed of a dataset: the same for every checkpoint (common random numbers make
    checkpoint-to-checkpoint differences less noisy), different between datasets so their
    samples do not share one random stream."""
    offset = int.from_bytes(hashlib.sha256(dataset.encode()).digest()[:4], "little")
    return (seed + offset) % 2**31


def _log(message: str) -> None:
    tqdm.write(message, file=sys.stderr)


def _held(on_progress: Callable[[int], Any], number: int) -> Callable[[int], Any]:
    """``on_progress``, or, for the pair :data:`HOLD_PAIR_ENV` names, one that holds after its first call."""
    if os.environ.get(HOLD_PAIR_ENV) != str(number):
        return on_progress

    def hold(n: int) -> None:
        on_progress(n)
        _log(HOLD_MESSAGE.format(number=number))
        while True:
            time.sleep(60)

    return hold


def _evaluate_pair(
    backend: Backend,
    spec: ModelSpec,
    model_path: str,
    dataset: str,
    problems: Sequence[Problem],
    params: dict[str, Any],
    cfg: EvalConfig,
    reward_fn,
    label: str,
    number: int,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    k = params["k"]
    sampling = dataclasses.replace(cfg.sampling, seed=pair_seed(cfg.sampling.seed, dataset))
    start = time.time()
    with tqdm(total=len(problems) * k, desc=label, unit="sample", dynamic_ncols=True, file=sys.stderr) as bar:
        completions = backend.generate(
            [p.messages for p in problems], k, sampling, on_progress=_held(bar.update, number)
        )
    responses = [[c.text for c in samples] for samples in completions]
    scores = score_responses(reward_fn, problems, responses)
    metrics = dataset_metrics(
        [[s.correct for s in row] for row in scores],
        [[s.pred for s in row] for row in scores],
        [[c.num_tokens for c in samples] for samples in completions],
    )
    summary = {
        "checkpoint": spec.name,
        "step": spec.step,
        "dataset": dataset,
        "n_problems": metrics.n_problems,
        "mean@k": metrics.mean_at_k,
        "maj@k": metrics.maj_at_k,
        "pass@k": metrics.pass_at_k,
        "mean_response_tokens": metrics.mean_response_tokens,
        **params,
        "backend": backend.name,
        "model_path": model_path,
        "wall_s": round(time.time() - start, 3),
    }
    samples = [
        {
            "checkpoint": spec.name,
            "step": spec.step,
            "dataset": dataset,
            "problem_id": problem.problem_id,
            "sample_index": i,
            "response": completion.text,
            "pred": score.pred,
            "score": score.score,
            "correct": score.correct,
            "response_tokens": completion.num_tokens,
            "ground_truth": problem.ground_truth,
        }
        for problem, row_c, row_s in zip(problems, completions, scores, strict=True)
        for i, (completion, score) in enumerate(zip(row_c, row_s, strict=True))
    ]
    return summary, samples


def run_evaluation(
    cfg: EvalConfig, *, backend_factory: BackendFactory = make_backend, log: Callable[[str], None] = _log
) -> EvalStats:
    """Evaluate every model on every dataset, skipping pairs already complete in ``cfg.out``.

    A checkpoint that cannot be merged or loaded (truncated, corrupted) is reported in ``failed`` and
    skipped; every other checkpoint is evaluated.

    Returns:
        What was generated, skipped and failed, and the summary rows of all complete pairs.
    """
    problems_by_ds = load_problems(cfg.data)
    unknown = unused_overrides(list(problems_by_ds), cfg.k_overrides)
    if unknown:
        raise ValueError(
            f"--k-per-dataset names {unknown} match no data_source; the data holds {sorted(problems_by_ds)}"
        )
    specs = discover_models(list(cfg.models))
    kind = choose_backend(cfg.backend)
    reward_fn = load_reward_fn(cfg.reward)
    store = ResultStore(cfg.out)
    stats = EvalStats()
    n_pairs = len(specs) * len(problems_by_ds)
    log(f"[eval] {len(specs)} model(s) x {len(problems_by_ds)} dataset(s) = {n_pairs} pairs, backend {kind}")

    pair_no = 0
    for spec in specs:
        todo = []
        for dataset, problems in problems_by_ds.items():
            pair_no += 1
            params = {
                "k": resolve_k(dataset, cfg.k, cfg.k_overrides),
                "temperature": cfg.sampling.temperature,
                "top_p": cfg.sampling.top_p,
                "max_tokens": cfg.sampling.max_tokens,
                "seed": cfg.sampling.seed,
                "problems_fingerprint": problems_fingerprint(problems),
            }
            if cfg.overwrite:
                store.remove_pair(spec.name, dataset)
            if store.completed(spec.name, dataset, params) is not None:
                stats.skipped_pairs += 1
                log(f"[eval] [{pair_no}/{n_pairs}] {spec.name} x {dataset}: complete, skipped")
                continue
            todo.append((pair_no, dataset, problems, params))
        if not todo:
            continue
        try:
            model_path = resolve_hf_path(spec, Path(cfg.out), log=log)
            log(f"[eval] loading {spec.name} from {model_path}")
            backend = backend_factory(
                kind, model_path, batch_size=cfg.batch_size, dtype=cfg.dtype, vllm_engine=cfg.vllm_engine
            )
        except Exception as exc:  # a truncated or corrupted checkpoint: the others are still evaluated
            reason = f"{type(exc).__name__}: {str(exc).strip()[-1500:]}"
            stats.failed[spec.name] = reason
            log(f"[eval] ERROR {spec.name} ({spec.source}) cannot be loaded, skipped: {reason}")
            continue
        stats.loaded_models += 1
        try:
            for number, dataset, problems, params in todo:
                label = f"[{number}/{n_pairs}] {spec.name} | {dataset}"
                summary, samples = _evaluate_pair(
                    backend, spec, model_path, dataset, problems, params, cfg, reward_fn, label, number
                )
                store.write_pair(summary, samples)
                store.rebuild_summaries()
                stats.generated_pairs += 1
                stats.generated_samples += len(samples)
                log(
                    f"[eval] {label}: mean@{params['k']} {100 * summary['mean@k']:.2f}  "
                    f"maj@{params['k']} {100 * summary['maj@k']:.2f}  pass@{params['k']} "
                    f"{100 * summary['pass@k']:.2f}  len {summary['mean_response_tokens']:.1f}  "
                    f"({summary['wall_s']:.1f} s)"
                )
        finally:
            backend.close()

    stats.rows = store.rebuild_summaries()
    store.rebuild_samples()
    log(f"[eval] wrote {Path(cfg.out) / 'summary.md'}, summary.csv and samples.jsonl")
    for name, reason in stats.failed.items():
        log(
            f"[eval] NOT EVALUATED: {name}: {reason.splitlines()[-1] if reason.strip() else reason} "
            "(a truncated or corrupted checkpoint: re-save it, or leave it out of --model; a rerun evaluates "
            "only what is missing)"
        )
    return stats
