"""One COPO/GCPO training step on plain tensors: rewards in, per-token fields and metrics out.

No verl import: ``recipe.copo.trainer`` reads the step batch from verl's TransferQueue, calls
:func:`advantage_step` once, and writes the fields back. The step runs on the driver over the whole
step batch (after the reward, before any mini-batching), because verl splits groups across
mini-batches, micro-batches and data-parallel ranks.

* Rows verl adds to make the batch divisible (``is_padding``) get zero fields and take no part in
  any statistic.
* Multi-output sessions (keys ``{uid}_{session}_{index}``) are scored by their final output, whose
  values are broadcast to the session's other outputs, as verl does for GRPO.
* Metrics: ``copo/`` (COPO's statistics), ``gcpo/`` (when GCPO's advantage is computed) and
  ``signal/`` (how the step spends its samples, the same definition verl's own estimators get).

Usage::

    settings = StepSettings.from_config(config)            # once
    result = advantage_step(StepBatch(...), settings, global_step=step)
    result.fields["advantages"]   # (N, L) float32; also "returns" and, for COPO, the copo_* fields
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import torch

from copo_core import (
    CopoConfig,
    GcpoConfig,
    compute_copo_advantages,
    copo_batch_metrics,
    signal_budget_metrics,
    wrong_answer_metrics,
)
from recipe.copo.config_check import sections
from recipe.copo.estimators import PREDS, RECIPE_ESTIMATORS, Estimator, estimator, local_estimator
from recipe.copo.fields import GLOBAL_ADV, LOCAL_ADV, LOCAL_WEIGHT
from recipe.tracking import names

__all__ = [
    "StepBatch",
    "StepResult",
    "StepSettings",
    "advantage_step",
    "answers_from_extra_info",
    "session_rows",
]

MISSING_PRED_MESSAGE = (
    "algorithm.copo.entropy_source=answer needs each response's extracted final answer, but the reward "
    "extra info has no 'pred' key. The reward function (reward.custom_reward_function, default "
    "pkg://recipe.reward compute_score) must return a dict such as {{'score': float, 'acc': bool, "
    "'pred': str}}; verl passes every key but 'score' to the trainer as reward extra info. Either return "
    "'pred' from your reward function or set algorithm.copo.entropy_source=reward (classes = distinct "
    "reward values). {detail}"
)


@dataclasses.dataclass(frozen=True)
class StepSettings:
    """What the step reads from the run's config, typed and checked once."""

    estimator: str
    copo: CopoConfig = CopoConfig()
    gcpo: GcpoConfig = GcpoConfig()
    norm_adv_by_std: bool = True  # verl's algorithm.norm_adv_by_std_in_grpo

    def __post_init__(self) -> None:
        if not self.row.recipe_step:
            raise ValueError(
                f"the COPO step handles algorithm.adv_estimator {' or '.join(RECIPE_ESTIMATORS)}, "
                f"got {self.estimator!r}"
            )

    @property
    def row(self) -> Estimator:
        """The estimator's row in ``recipe/copo/estimators.py``."""
        return estimator(self.estimator)

    @property
    def needs_gcpo(self) -> bool:
        """GCPO's advantage is the step's estimator or COPO's local term."""
        row = self.row
        return row.gcpo_advantage or (
            row.blends and local_estimator(self.copo.local_estimator).gcpo_advantage
        )

    @property
    def needs_answers(self) -> bool:
        return PREDS in self.row.batch_fields and self.copo.entropy_source == "answer"

    @classmethod
    def from_config(cls, config: Any) -> StepSettings:
        """From the composed trainer config (``config.algorithm``)."""
        copo, gcpo = sections(config)
        algorithm = config.algorithm
        return cls(
            estimator=str(algorithm.adv_estimator),
            copo=copo,
            gcpo=gcpo,
            norm_adv_by_std=bool(algorithm.get("norm_adv_by_std_in_grpo", True)),
        )


@dataclasses.dataclass(frozen=True)
class StepBatch:
    """One step batch of N rows with responses padded to L tokens.

    Attributes:
        scores: (N,) outcome reward per row (the reward's token-level scores summed over L).
        uids: length-N prompt ids (verl's ``uid``).
        keys: length-N row keys ``{uid}_{session}_{index}`` (verl's TransferQueue keys).
        is_padding: length-N, True for rows verl appended to make the batch divisible.
        response_mask: (N, L) 1 on response tokens.
        preds: length-N extracted answers (None = unparseable); needed for ``entropy_source=answer``.
        texts: length-N decoded responses; needed when GCPO's advantage is computed.
    """

    scores: torch.Tensor
    uids: Sequence[Hashable]
    keys: Sequence[str]
    is_padding: Sequence[bool]
    response_mask: torch.Tensor
    preds: Sequence[str | None] | None = None
    texts: Sequence[str] | None = None


@dataclasses.dataclass(frozen=True)
class StepResult:
    """``fields``: (N, L) float32 per-token tensors to store; ``metrics``: prefixed python floats."""

    fields: dict[str, torch.Tensor]
    metrics: dict[str, float]


def answers_from_extra_info(
    infos: Sequence[Mapping[str, Any]], is_padding: Sequence[bool]
) -> list[str | None]:
    """The ``pred`` of every row's reward extra info, as a string (None for unparseable and padding rows).

    Raises:
        ValueError: a real row has no ``pred`` (see MISSING_PRED_MESSAGE).
    """
    missing = [
        row
        for row, (info, pad) in enumerate(zip(infos, is_padding, strict=True))
        if not pad and "pred" not in info
    ]
    if missing:
        keys = sorted(set().union(*(info.keys() for info in infos)))
        detail = f"Extra info keys: {keys}; rows without 'pred': {missing[:5]}"
        raise ValueError(MISSING_PRED_MESSAGE.format(detail=detail))
    preds = [None if pad else info["pred"] for info, pad in zip(infos, is_padding, strict=True)]
    return [None if pred is None else str(pred) for pred in preds]


def session_rows(keys: Sequence[str], is_padding: Sequence[bool]) -> tuple[list[int], torch.Tensor]:
    """Rows that represent each session, and the map from every row to its representative.

    The representative of a session is its output with the highest index (the final turn).

    Returns:
        ``(final_rows, row_to_final)``: row numbers of the representatives (in first-seen order) and
        an (N,) int64 tensor giving, for every row, the position of its representative in
        ``final_rows`` (-1 for padding rows).
    """
    best: dict[str, tuple[int, int]] = {}
    row_session: list[str | None] = []
    for row, (key, pad) in enumerate(zip(keys, is_padding, strict=True)):
        if pad:
            row_session.append(None)
            continue
        parts = key.rsplit("_", 2)
        session, out_index = (f"{parts[0]}_{parts[1]}", int(parts[2])) if len(parts) == 3 else (key, 0)
        row_session.append(session)
        if session not in best or out_index > best[session][0]:
            best[session] = (out_index, row)
    position = {session: pos for pos, session in enumerate(best)}  # dicts keep first-seen order
    row_to_final = torch.tensor([-1 if s is None else position[s] for s in row_session], dtype=torch.int64)
    return [row for _, row in best.values()], row_to_final


def _to_tokens(values: torch.Tensor, row_to_final: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """(P,) per-session values -> (N, L) per-token values, zero on padding rows and padded tokens."""
    gathered = torch.zeros(row_to_final.shape[0], dtype=torch.float32)
    real = row_to_final >= 0
    gathered[real] = values.detach().float().cpu()[row_to_final[real]]
    return gathered.unsqueeze(-1) * response_mask.to(torch.float32)


def advantage_step(batch: StepBatch, settings: StepSettings, global_step: int = 0) -> StepResult:
    """All per-token fields and metrics of one COPO or GCPO step.

    Args:
        batch: the whole step batch (see :class:`StepBatch`).
        settings: estimator and sections.
        global_step: added to ``algorithm.gcpo.seed`` for GCPO's Monte Carlo permutations.

    Returns:
        fields ``advantages`` and ``returns`` (plus, for COPO, ``copo_local_adv``, ``copo_global_adv``,
        ``copo_local_weight``), each (N, L) float32; metrics under ``copo/``, ``gcpo/``, ``signal/``.
    """
    final_rows, row_to_final = session_rows(batch.keys, batch.is_padding)
    if not final_rows:
        raise ValueError("the step batch has no real (non-padding) rows")
    scores = batch.scores.float()[final_rows]
    uids = [batch.uids[row] for row in final_rows]
    metrics: dict[str, float] = {}
    gcpo_adv = None
    if settings.needs_gcpo:
        from recipe.copo.gcpo_step import gcpo_advantage  # loads the embedder stack only for GCPO

        if batch.texts is None:
            raise ValueError("GCPO's advantage needs the decoded responses (StepBatch.texts)")
        gcpo_adv, gcpo_metrics = gcpo_advantage(
            [batch.texts[row] for row in final_rows],
            scores,
            uids,
            settings.gcpo,
            norm_adv_by_std=settings.norm_adv_by_std,
            global_step=global_step,
        )
        metrics.update(names.prefixed(names.GCPO_PREFIX, gcpo_metrics))

    if not settings.row.blends:  # GCPO's advantage alone
        per_session = {"advantages": gcpo_adv}
    else:
        copo = settings.copo
        answers = None
        if settings.needs_answers:
            if batch.preds is None:
                raise ValueError(MISSING_PRED_MESSAGE.format(detail="The step batch carries no answers."))
            answers = [batch.preds[row] for row in final_rows]
        adv = compute_copo_advantages(
            scores,
            uids,
            answers,
            k=copo.k,
            b=copo.b,
            blend_mode=copo.blend_mode,
            entropy_source=copo.entropy_source,
            entropy_penalty=copo.entropy_penalty,
            norm_adv_by_std=settings.norm_adv_by_std,
            local_estimator=copo.local_estimator,
            wrong_answer_global=copo.wrong_answer_global,
        )
        if gcpo_adv is not None:  # local_estimator=gcpo: GCPO's advantage is the local term
            adv = dataclasses.replace(adv, local_adv=gcpo_adv.to(adv.local_adv.device, torch.float32))
        metrics.update(names.prefixed(names.COPO_PREFIX, copo_batch_metrics(adv)))
        per_session = {
            "advantages": adv.blended,
            LOCAL_ADV: adv.local_adv,
            GLOBAL_ADV: adv.global_adv,
            LOCAL_WEIGHT: adv.local_weight,
        }

    mask = batch.response_mask
    fields = {name: _to_tokens(values, row_to_final, mask) for name, values in per_session.items()}
    fields["returns"] = fields["advantages"].clone()
    real = [row for row, pad in enumerate(batch.is_padding) if not pad]
    real_step = (
        fields["advantages"][real],
        mask[real],
        batch.scores[real],
        [batch.uids[row] for row in real],
    )
    metrics.update(names.prefixed(names.SIGNAL_PREFIX, signal_budget_metrics(*real_step)))
    metrics.update(names.prefixed(names.MECHANISM_PREFIX, wrong_answer_metrics(*real_step)))
    return StepResult(fields=fields, metrics=metrics)
