"""The run's actor, built exactly as verl's actor worker builds it, on one rank of this device.

:func:`engine_settings` mirrors verl 0.9.1's ``ActorRolloutRefWorker.init_model`` (actor part,
verl/workers/engine_workers.py) and ``TrainingWorker.__init__``: ``omega_conf_to_dataclass`` of the
composed ``actor_rollout_ref.actor`` / ``.model`` sections, then the same engine-config fields from
the actor and rollout sections. :class:`Actor` builds the engine with ``EngineRegistry.new`` over a
one-rank process group and runs what the worker runs: ``infer_batch`` (the log-prob pass) and
``optimizer_zero_grad`` + ``forward_backward_batch`` + ``optimizer_step`` (``train_batch``), with
the non-tensor fields the v1 trainer and the worker put on each mini-batch.
"""

from __future__ import annotations

import copy
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from omegaconf import DictConfig, open_dict

# Non-tensor fields the v1 trainer's _update_actor / _compute_old_log_prob put on a mini-batch.
_UPDATE_INFO = {"distillation_use_topk": False, "distillation_only": False}


@dataclass(frozen=True)
class Workload:
    """Synthetic sequences: ``sequences`` rows with prompt / response lengths drawn uniformly."""

    sequences: int
    prompt_range: tuple[int, int]
    response_range: tuple[int, int]
    seed: int = 0

    @classmethod
    def for_config(cls, config: DictConfig, sequences: int, tiny: bool) -> Workload:
        """Prompts of 1/4-1/2 of ``data.max_prompt_length``, responses of 1/8-1 of
        ``data.max_response_length`` (paper configs: 256-512 + 256-2048 tokens), or short ones for a
        tiny model on CPU."""
        if tiny:
            return cls(sequences, (8, 24), (16, 48))
        prompt, response = int(config.data.max_prompt_length), int(config.data.max_response_length)
        return cls(sequences, (prompt // 4, prompt // 2), (max(1, response // 8), response))

    def lengths(self) -> list[tuple[int, int]]:
        gen = torch.Generator().manual_seed(self.seed)

        def draw(lo: int, hi: int) -> int:
            return int(torch.randint(lo, hi + 1, (), generator=gen))

        return [(draw(*self.prompt_range), draw(*self.response_range)) for _ in range(self.sequences)]


def engine_settings(config: DictConfig) -> tuple[Any, Any]:
    """(ActorConfig with its model_config, engine config) as verl's actor worker builds them."""
    from verl.utils.config import omega_conf_to_dataclass

    arr = config.actor_rollout_ref
    model_config = omega_conf_to_dataclass(arr.model)
    actor = omega_conf_to_dataclass(arr.actor)
    actor.model_config = model_config
    engine = actor.engine
    engine.use_dynamic_bsz = arr.actor.use_dynamic_bsz
    engine.infer_max_token_len_per_gpu = arr.rollout.log_prob_max_token_len_per_gpu
    engine.infer_micro_batch_size_per_gpu = arr.rollout.log_prob_micro_batch_size_per_gpu
    engine.max_token_len_per_gpu = arr.actor.ppo_max_token_len_per_gpu
    engine.micro_batch_size_per_gpu = arr.actor.ppo_micro_batch_size_per_gpu
    engine.use_remove_padding = model_config.get("use_remove_padding", False)
    engine.use_fused_kernels = model_config.get("use_fused_kernels", False)
    return actor, engine


def vanilla_actor_config(config: DictConfig) -> Any:
    """The actor's ActorConfig with verl's vanilla PPO loss (``policy_loss.loss_mode=vanilla``)."""
    from verl.utils.config import omega_conf_to_dataclass

    section = copy.deepcopy(config.actor_rollout_ref.actor)
    with open_dict(section):
        section.policy_loss.loss_mode = "vanilla"
    return omega_conf_to_dataclass(section)


@contextmanager
def one_rank(device: str) -> Iterator[None]:
    """A one-rank default process group (nccl on CUDA, gloo on CPU), destroyed on exit."""
    import torch.distributed as dist

    with tempfile.TemporaryDirectory() as tmp:
        if device == "cuda":
            torch.cuda.set_device(0)
        for name, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1")):
            os.environ.setdefault(name, value)
        dist.init_process_group(
            "nccl" if device == "cuda" else "gloo", init_method=f"file://{tmp}/pg", rank=0, world_size=1
        )
        try:
            yield
        finally:
            dist.destroy_process_group()


def make_batch(workload: Workload, vocab: int, temperature: float) -> Any:
    """A mini-batch in verl's no-padding layout with everything the PPO and COPO losses read.

    ``advantages`` are one random number per response; COPO's fields make its loss equal verl's
    vanilla loss (local weight 1, local advantage = ``advantages``, a different global advantage
    that weight 0 must cancel). ``old_log_probs`` and ``ref_log_prob`` start at 0: call
    :meth:`Actor.set_old_log_probs` with the log-prob pass's output so the ratio starts at 1 and
    no token is clipped.
    """
    from verl.utils import tensordict_utils as tu

    gen = torch.Generator().manual_seed(workload.seed + 1)
    rows = []
    for prompt_len, response_len in workload.lengths():
        prompt = torch.randint(3, vocab - 3, (prompt_len,), generator=gen)
        response = torch.randint(3, vocab - 3, (response_len,), generator=gen)
        advantage = torch.randn((), generator=gen).expand(response_len).clone()
        rows.append(
            {
                "prompts": prompt,
                "responses": response,
                "input_ids": torch.cat([prompt, response]),
                "position_ids": torch.arange(prompt_len + response_len),
                "response_mask": torch.ones(response_len, dtype=torch.int64),
                "loss_mask": torch.ones(response_len, dtype=torch.int64),
                "old_log_probs": torch.zeros(response_len),
                "ref_log_prob": torch.zeros(response_len),
                "advantages": advantage,
                "copo_local_adv": advantage.clone(),
                "copo_global_adv": torch.randn((), generator=gen).expand(response_len).clone(),
                "copo_local_weight": torch.ones(response_len),
            }
        )
    data = tu.list_of_dict_to_tensordict(rows)
    tu.assign_non_tensor(
        data,
        **_UPDATE_INFO,
        calculate_entropy=False,
        global_batch_size=len(rows),
        temperature=temperature,
        global_token_num=[p + r for p, r in workload.lengths()],
        update_lr_scheduler=False,
        disable_auto_offload=True,
    )
    return data


def tokens(data: Any) -> int:
    """Prompt + response tokens of a batch (what the update computes on)."""
    return int(data["input_ids"].offsets()[-1])


class Actor:
    """The run's actor engine on this device, with the worker's calls (build inside :func:`one_rank`)."""

    def __init__(self, config: DictConfig, device: str) -> None:
        from verl.workers.engine import EngineRegistry
        from verl.workers.utils.losses import ppo_loss

        from recipe.copo.actor_loss import copo_ppo_loss

        self.device = device
        self.config = config
        self.actor_config, self.engine_config = engine_settings(config)
        self.temperature = float(config.actor_rollout_ref.rollout.temperature)
        self.losses: dict[str, Callable[..., Any]] = {
            "copo": partial(copo_ppo_loss, config=self.actor_config),
            "vanilla": partial(ppo_loss, config=vanilla_actor_config(config)),
        }
        start = time.perf_counter()
        self.engine = EngineRegistry.new(
            model_type="language_model",
            backend=self.engine_config.strategy,
            model_config=self.actor_config.model_config,
            engine_config=self.engine_config,
            optimizer_config=self.actor_config.optim,
            checkpoint_config=self.actor_config.checkpoint,
        )
        self.engine.initialize()
        self.build_s = time.perf_counter() - start
        self.vocab = int(self.actor_config.model_config.hf_config.vocab_size)

    def sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    def _with_engine_keys(self, data: Any, forward_only: bool) -> Any:
        """The keys the worker's train_batch / infer_batch inject (engine_workers.py)."""
        from verl.utils import tensordict_utils as tu

        e = self.engine_config
        tu.assign_non_tensor(
            data,
            use_remove_padding=e.use_remove_padding,
            use_dynamic_bsz=e.use_dynamic_bsz,
            max_token_len_per_gpu=e.infer_max_token_len_per_gpu if forward_only else e.max_token_len_per_gpu,
            micro_batch_size_per_gpu=(
                e.infer_micro_batch_size_per_gpu if forward_only else e.micro_batch_size_per_gpu
            ),
            use_fused_kernels=e.use_fused_kernels,
        )
        return data

    def log_prob_pass(self, data: Any) -> tuple[float, Any]:
        """The old-log-prob pass (forward only, with the token entropy): (seconds, output)."""
        from verl.utils import tensordict_utils as tu

        data = self._with_engine_keys(data.clone(), forward_only=True)
        tu.assign_non_tensor(data, calculate_entropy=True, compute_loss=False)
        self.sync()
        start = time.perf_counter()
        with self.engine.eval_mode():
            out = self.engine.infer_batch(data)
        self.sync()
        return time.perf_counter() - start, out["model_output"]

    def set_old_log_probs(self, data: Any) -> Any:
        """``data`` with ``old_log_probs`` (and ``ref_log_prob``) from this actor's log-prob pass."""
        from verl.workers.utils.padding import no_padding_2_padding

        _, out = self.log_prob_pass(data)
        padded = no_padding_2_padding(out["log_probs"], data).float().cpu()
        lengths = data["responses"].offsets().diff().tolist()
        rows = [padded[i, :n] for i, n in enumerate(lengths)]
        nested = torch.nested.nested_tensor(rows, layout=torch.jagged)
        data = data.clone()
        data["old_log_probs"] = nested
        data["ref_log_prob"] = torch.nested.nested_tensor([r - 0.01 for r in rows], layout=torch.jagged)
        return data

    def gradients(self, data: Any, loss: str) -> tuple[list[float], dict[str, torch.Tensor]]:
        """(per-micro-batch losses, every weight's gradient on CPU) of one forward/backward, no step."""
        from torch.distributed.tensor import DTensor

        data = self._with_engine_keys(data.clone(), forward_only=False)
        with self.engine.train_mode():
            self.engine.optimizer_zero_grad()
            out = self.engine.forward_backward_batch(data, self.losses[loss], forward_only=False)
            grads = {}
            for name, p in self.engine.module.named_parameters():
                if p.grad is not None:
                    g = p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
                    grads[name] = g.detach().float().cpu()
            self.engine.optimizer_zero_grad()
        return [float(x) for x in out["loss"]], grads

    def update(self, data: Any, loss: str) -> tuple[float, int]:
        """One optimizer update as the worker's train_batch runs it: (seconds, micro-batches)."""
        data = self._with_engine_keys(data.clone(), forward_only=False)
        self.sync()
        start = time.perf_counter()
        with self.engine.train_mode():
            self.engine.optimizer_zero_grad()
            out = self.engine.forward_backward_batch(data, self.losses[loss], forward_only=False)
            self.engine.optimizer_step()
        self.sync()
        return time.perf_counter() - start, len(out["loss"])
