"""Synthetic verl batches for the recipe tests: a step batch as the driver sees it (the step's plain
inputs) and a mini-batch as the actor worker sees it (TensorDict in verl's no-padding layout)."""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass

import numpy as np
import torch
from omegaconf import DictConfig
from tensordict import TensorDict
from verl.utils import tensordict_utils as tu
from verl.utils.config import omega_conf_to_dataclass
from verl.workers.config import ActorConfig

from recipe.copo import step
from recipe.copo.config_check import compose

BASE_OVERRIDES = [
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.model.path=/nonexistent/model",
    "actor_rollout_ref.rollout.n=4",
    "data.train_batch_size=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=4",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=3",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=3",
    "trainer.n_gpus_per_node=1",
]


@dataclass
class StepBatch:
    """One step: N responses of P prompts (groups interleaved, unequal sizes)."""

    uids: list[str]
    scores: torch.Tensor  # (N,)
    preds: list[str | None]  # (N,)
    prompt_lens: list[int]
    response_lens: list[int]

    @property
    def n(self) -> int:
        return len(self.uids)

    def response_mask(self) -> torch.Tensor:
        """(N, L) right-padded 0/1 mask."""
        width = max(self.response_lens)
        return (torch.arange(width)[None, :] < torch.tensor(self.response_lens)[:, None]).to(torch.int64)

    def token_level_rewards(self) -> torch.Tensor:
        """(N, L) outcome reward on the last response token, as verl's reward loop writes it."""
        mask = self.response_mask()
        rewards = torch.zeros(mask.shape, dtype=torch.float32)
        rewards[torch.arange(self.n), torch.tensor(self.response_lens) - 1] = self.scores
        return rewards

    def keys(self) -> list[str]:
        """verl's TransferQueue keys ``{uid}_{session}_{index}``: one session per response."""
        return [f"{uid}_{i}_0" for i, uid in enumerate(self.uids)]

    def step_inputs(self, with_pred: bool = True, texts: list[str] | None = None) -> step.StepBatch:
        """The step's plain inputs, as the trainer builds them from TransferQueue (no padding rows)."""
        return step.StepBatch(
            scores=self.token_level_rewards().sum(dim=-1),
            uids=list(self.uids),
            keys=self.keys(),
            is_padding=[False] * self.n,
            response_mask=self.response_mask(),
            preds=list(self.preds) if with_pred else None,
            texts=texts,
        )


def make_step_batch(seed: int = 0, group_sizes: tuple[int, ...] = (4, 4, 3, 4, 2, 4)) -> StepBatch:
    """Groups with varied outcomes (all right, all wrong, mixed, split answers), interleaved order."""
    gen = torch.Generator().manual_seed(seed)
    uids: list[str] = []
    scores: list[float] = []
    preds: list[str | None] = []
    answer_pool = ["1", "2", "3", "", None]
    for g, size in enumerate(group_sizes):
        kind = g % 4
        for i in range(size):
            uids.append(f"prompt{g}")
            if kind == 0:
                scores.append(1.0)
                preds.append("7")
            elif kind == 1:
                scores.append(0.0)
                preds.append(answer_pool[int(torch.randint(0, 5, (1,), generator=gen))])
            else:
                right = bool(torch.rand((), generator=gen) < 0.5) or i == 0
                scores.append(1.0 if right else 0.0)
                preds.append("7" if right else answer_pool[int(torch.randint(0, 5, (1,), generator=gen))])
    order = torch.randperm(len(uids), generator=gen).tolist()  # groups are NOT contiguous
    return StepBatch(
        uids=[uids[i] for i in order],
        scores=torch.tensor([scores[i] for i in order], dtype=torch.float32),
        preds=[preds[i] for i in order],
        prompt_lens=[int(x) for x in torch.randint(2, 6, (len(uids),), generator=gen)],
        response_lens=[int(x) for x in torch.randint(1, 9, (len(uids),), generator=gen)],
    )


@functools.lru_cache(maxsize=64)
def _composed(overrides: tuple[str, ...]) -> DictConfig:
    return compose([*BASE_OVERRIDES, *overrides])


def composed_config(*overrides: str) -> DictConfig:
    """The recipe config with the test base overrides (a fresh copy; composition is cached)."""
    return copy.deepcopy(_composed(tuple(overrides)))


def actor_config(*overrides: str) -> tuple[ActorConfig, DictConfig]:
    """The actor's ActorConfig as verl builds it from the recipe config (plus overrides)."""
    config = composed_config(*overrides)
    return omega_conf_to_dataclass(config.actor_rollout_ref.actor), config


def worker_minibatch(
    batch: StepBatch, token_fields: dict[str, torch.Tensor], seed: int = 1
) -> tuple[TensorDict, list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """The mini-batch an actor worker receives, in verl's no-padding layout, plus model outputs.

    Args:
        batch: the step batch.
        token_fields: (N, L) padded per-token fields to ship (advantages, copo_* ...).

    Returns:
        ``(data, seq_logps, old_log_prob, ref_log_prob)``: ``data`` holds nested prompts, responses,
        response_mask, input_ids, old_log_probs, ref_log_prob and ``token_fields``; ``seq_logps[i]``
        is row i's model output over prompt+response (a leaf that requires grad; position t
        predicts token t+1); ``old_log_prob``/``ref_log_prob`` are (N, L) padded.
    """
    gen = torch.Generator().manual_seed(seed)
    width = max(batch.response_lens)
    old = -torch.rand((batch.n, width), generator=gen) * 2.0
    new = old + (torch.rand((batch.n, width), generator=gen) - 0.5) * 0.8  # ratios clip on both sides
    ref = old + (torch.rand((batch.n, width), generator=gen) - 0.5) * 0.3
    mask = batch.response_mask().to(torch.float32)
    rows = []
    seq_logps = []
    for i in range(batch.n):
        lp, lr = batch.prompt_lens[i], batch.response_lens[i]
        row = {
            "prompts": torch.randint(3, 50, (lp,), generator=gen),
            "responses": torch.randint(3, 50, (lr,), generator=gen),
            "response_mask": torch.ones(lr, dtype=torch.int64),
            "old_log_probs": old[i, :lr].clone(),
            "ref_log_prob": ref[i, :lr].clone(),
        }
        row["input_ids"] = torch.cat([row["prompts"], row["responses"]])
        for name, value in token_fields.items():
            row[name] = value[i, :lr].float().clone()
        rows.append(row)
        seq = torch.full((lp + lr,), -3.0)
        seq[lp - 1 : lp + lr - 1] = new[i, :lr]
        seq_logps.append(seq.requires_grad_(True))
    return tu.list_of_dict_to_tensordict(rows), seq_logps, old * mask, ref * mask


def padded_response_logps(batch: StepBatch, seq_logps: list[torch.Tensor]) -> torch.Tensor:
    """(N, L) response log-probs taken from the model outputs (differentiable), zero-padded."""
    width = max(batch.response_lens)
    out = []
    for i, seq in enumerate(seq_logps):
        lp, lr = batch.prompt_lens[i], batch.response_lens[i]
        out.append(torch.nn.functional.pad(seq[lp - 1 : lp + lr - 1], (0, width - lr)))
    return torch.stack(out)


def nested_model_output(seq_logps: list[torch.Tensor], rows: range) -> torch.Tensor:
    """Nested (B, seq_len_i) log-probs of ``rows``, as the engine's model output for one micro-batch."""
    parts = [seq_logps[i] for i in rows]
    offsets = torch.tensor([0, *np.cumsum([len(p) for p in parts]).tolist()])
    return torch.nested.nested_tensor_from_jagged(torch.cat(parts), offsets=offsets)


def set_global_batch_info(data: TensorDict, micro_batch_size: int) -> None:
    """Non-tensor entries verl's engine/trainer add before calling the loss (dp_size 1)."""
    tu.assign_non_tensor(
        data,
        dp_size=1,
        batch_num_tokens=int(data["response_mask"].values().sum().item()),
        global_batch_size=len(data),
        use_dynamic_bsz=False,
        micro_batch_size_per_gpu=micro_batch_size,
    )
