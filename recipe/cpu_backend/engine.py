"""verl's FSDP training engine for a CPU job, with two savings that leave the loss unchanged.

Both are keys of the ``cpu_backend:`` section of the job config (on in copo_cpu.yaml), passed to
every Ray worker as environment variables by ``activation.activate`` (``settings.SETTINGS``):

* ``cpu_backend.unwrapped_single_rank``: with one trainer rank, train the module unwrapped instead
  of under FSDP2. Over one rank FSDP2 shards nothing, yet it copies every weight into a fresh
  unsharded buffer before each forward and every gradient through a reduce-scatter buffer after
  each backward (the ``world_size == 1`` paths of torch's ``wait_for_unshard`` and
  ``foreach_reduce``), and its optimizer step dispatches through DTensor: here 13-28% of an update
  over plain PyTorch on the same micro-batch. verl's engine already handles an unwrapped module
  (``fsdp_version(module) == 0``): ``clip_grad_norm_``, no gradient-sync context, ``state_dict`` for
  the weight sync, checkpoints of plain tensors (``model_world_size_1_rank_0.pt``, which verl's
  model merger reads).
* ``cpu_backend.response_logits_only`` (packed micro-batches, ``use_remove_padding``): compute the
  LM head and the log-probs only at the positions that predict a response token. verl computes them
  at every position, prompt included, and the loss then keeps the response's
  (``no_padding_2_padding``); for SmolLM2-135M the LM head is a fifth of the model's FLOPs per token
  and its 49k-wide logits the largest tensors of a step. Other positions get log-prob 0 and no
  gradient; nothing reads them. The log-probs come from ``logprob.token_log_probs`` (vectorised,
  one-pass backward), with the token entropy too when it is asked for.

Whatever the settings, a checkpoint's ``huggingface/config.json`` names plain ``sdpa`` rather than
the CPU-only ``sdpa_gqa`` attention (:func:`make_config_portable`), so that verl's model merger,
scripts/evaluate.py and vLLM load what a CPU run saved.

tests/recipe/cpu_backend/test_engine.py runs a COPO step through verl's FSDP2 engine and through
these, and compares losses, gradients and updated weights; tests/e2e/test_cpu_trainer.py merges a
one-rank checkpoint with verl's merger.

The classes are registered for the ``cpu`` device (:func:`register`) when verl's FSDP engine module
is first imported, so processes that never build an engine never import it.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import torch

from recipe.files import atomic_write_text

from .attention import ATTN_IMPLEMENTATION
from .logprob import token_log_probs
from .settings import ENGINE_DEVICE, RESPONSE_LOGITS, UNWRAPPED, dtype_name, enabled

_VERL_FSDP_ENGINE = "verl.workers.engine.fsdp.transformer_impl"
_KEPT = "copo_kept_positions"  # output_args key: the positions whose logits were computed


def _fp32(engine: Any) -> bool:
    mixed = engine.engine_config.mixed_precision or {}
    names = {mixed.get("param_dtype", "bf16"), engine.engine_config.model_dtype}
    return {dtype_name(name) for name in names} == {"fp32"}


class _UnwrappedSingleRank:
    """Mixin over verl's FSDP engine: no FSDP wrapper when the job has a single rank."""

    def _build_fsdp_module(self, module: torch.nn.Module) -> torch.nn.Module:
        if not (enabled(UNWRAPPED) and torch.distributed.get_world_size() == 1):
            return super()._build_fsdp_module(module)  # type: ignore[misc]
        if not _fp32(self):
            # FSDP's mixed precision keeps fp32 weights and computes in param_dtype; an unwrapped
            # module has no such split. recipe/cpu_backend/checks.py refuses this at start-up.
            raise ValueError(
                f"{UNWRAPPED}=true trains the unwrapped fp32 module, but the actor's model_dtype / "
                "mixed_precision.param_dtype is not fp32; use fp32 or set it to false"
            )
        self._autocast_dtype = torch.float32  # what FSDP's setup records for fp32: no autocast
        self.scaler = None
        return module


def make_config_portable(config_json: Path) -> bool:
    """Name plain ``sdpa`` instead of ``sdpa_gqa`` in a saved HF ``config.json``; True if it changed.

    ``sdpa_gqa`` computes SDPA's attention (recipe/cpu_backend/attention.py) but is registered only
    in this project's CPU processes: verl's model merger, vLLM or a plain ``from_pretrained`` refuse
    a config that names it.
    """
    config = json.loads(config_json.read_text())
    if config.get("attn_implementation") != ATTN_IMPLEMENTATION:
        return False
    config["attn_implementation"] = "sdpa"
    atomic_write_text(config_json, json.dumps(config, indent=2, sort_keys=True) + "\n")
    return True


class _PortableCheckpoint:
    """Mixin over verl's FSDP engine: checkpoints load outside this project's CPU processes."""

    def save_checkpoint(self, local_path: str, *args: Any, **kwargs: Any) -> None:
        super().save_checkpoint(local_path, *args, **kwargs)  # type: ignore[misc]
        # rank 0 wrote huggingface/config.json (with the full weights, when saved); the driver
        # records the step as checkpointed only after every rank has returned from here
        config_json = Path(local_path) / "huggingface" / "config.json"
        if torch.distributed.get_rank() == 0 and config_json.is_file():
            make_config_portable(config_json)


def response_positions(micro_batch: Any) -> torch.Tensor:
    """Packed-row positions whose next token is a response token, in row order.

    Row i spans ``[end_i - len_i, end_i)`` of the packed row and ends with its ``r_i`` response
    tokens; position ``p`` predicts token ``p + 1``, so the response is predicted at
    ``[end_i - r_i - 1, end_i - 1)``: the slice verl's ``no_padding_2_padding`` takes for the loss.
    """
    ends = micro_batch["input_ids"].offsets()[1:]
    lengths = micro_batch["responses"].offsets().diff()
    firsts = ends - lengths - 1
    within = torch.arange(int(lengths.sum())) - torch.repeat_interleave(lengths.cumsum(0) - lengths, lengths)
    return torch.repeat_interleave(firsts, lengths) + within


class _ResponseLogitsOnly:
    """Mixin over verl's FSDP LM engine: LM head and log-probs at response-predicting positions only."""

    def _keeps_response_logits_only(self, micro_batch: Any) -> bool:
        from verl.utils import tensordict_utils as tu

        def flag(key: str, default: bool) -> bool:
            return bool(tu.get_non_tensor_data(data=micro_batch, key=key, default=default))

        if not enabled(RESPONSE_LOGITS) or not flag("use_remove_padding", True):
            return False
        # paths whose outputs cover every position: fused kernels, distillation, sum(pi^2), SP, static pads
        if any(
            flag(key, False)
            for key in (
                "use_fused_kernels",
                "distillation_use_topk",
                "distillation_only",
                "calculate_sum_pi_squared",
            )
        ):
            return False
        if self.use_ulysses_sp or self.pad_to_length:
            return False
        keys = micro_batch.keys()
        if "prompts" not in keys or "responses" not in keys or not micro_batch["responses"].is_nested:
            return False
        from .sampling import takes_logits_to_keep

        return takes_logits_to_keep(self.module)

    def prepare_model_inputs(self, micro_batch: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        model_inputs, output_args = super().prepare_model_inputs(micro_batch)  # type: ignore[misc]
        if self._keeps_response_logits_only(micro_batch) and not output_args.get("pad_size", 0):
            kept = response_positions(micro_batch).to(model_inputs["input_ids"].device)
            model_inputs["logits_to_keep"] = kept  # transformers: lm_head(hidden[:, kept])
            output_args[_KEPT] = kept
        return model_inputs, output_args

    def prepare_model_outputs(
        self, output: Any, output_args: dict[str, Any], micro_batch: Any, logits_processor_func: Any
    ) -> dict[str, Any]:
        kept = output_args.get(_KEPT)
        if kept is None:
            return super().prepare_model_outputs(output, output_args, micro_batch, logits_processor_func)  # type: ignore[misc]
        from verl.utils import tensordict_utils as tu

        logits = output.logits.squeeze(0)  # (K, vocab): the kept positions only
        labels = output_args["input_ids_rmpad_rolled"]  # (total_nnz,)
        temperature = output_args["temperature_rmpad"][kept]
        offsets = micro_batch["input_ids"].offsets()

        def packed(values: torch.Tensor) -> torch.Tensor:  # (K,) -> nested (B, seq_len_i), 0 elsewhere
            full = values.new_zeros(labels.shape[0]).index_put((kept,), values)
            return torch.nested.nested_tensor_from_jagged(full, offsets)

        log_probs = token_log_probs(logits, labels[kept], temperature)
        if not tu.get_non_tensor_data(data=micro_batch, key="calculate_entropy", default=False):
            return {"log_probs": packed(log_probs)}
        # the token entropy: verl's own steps (scaled logits, then entropy) on the kept rows. The
        # log-probs stay token_log_probs': verl's logprobs_from_logits would loop over the rows in
        # Python without flash-attn (logprobs_from_logits_v2).
        from verl.workers.engine.fsdp.transformer_impl import _scale_logits_by_temperature

        logits = _scale_logits_by_temperature(
            logits,
            temperature.unsqueeze(-1),
            is_unit_temperature=output_args.get("temperature_is_one", False),
        )
        if self.engine_config.entropy_checkpointing:
            entropy = torch.utils.checkpoint.checkpoint(self.compute_entropy_from_logits, logits)
        elif self.engine_config.entropy_from_logits_with_chunking:
            chunk = self.engine_config.entropy_from_logits_chunk_size
            entropy = self.compute_entropy_from_logits(logits, chunk_size=chunk)
        else:
            entropy = self.compute_entropy_from_logits(logits)
        return {"entropy": packed(entropy), "log_probs": packed(log_probs)}


# model type -> the registered class (filled by register())
ENGINES: dict[str, type] = {}


def register() -> None:
    """Register the CPU engines for device ``cpu`` in verl's EngineRegistry (idempotent)."""
    if ENGINES:
        return
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead, FSDPEngineWithValueHead

    for model_type, bases in (
        (
            "language_model",
            (_ResponseLogitsOnly, _UnwrappedSingleRank, _PortableCheckpoint, FSDPEngineWithLMHead),
        ),
        ("value_model", (_UnwrappedSingleRank, _PortableCheckpoint, FSDPEngineWithValueHead)),
    ):
        verl_engine = bases[-1]
        engine = type(
            "CPU" + verl_engine.__name__.removeprefix("FSDP"),
            bases,
            {"__doc__": f"verl's {verl_engine.__name__} with the cpu_backend engine settings."},
        )
        EngineRegistry.register(model_type=model_type, backend=["fsdp", "fsdp2"], device=ENGINE_DEVICE)(
            engine
        )
        ENGINES[model_type] = engine


class _RegisterAfterImport(importlib.abc.MetaPathFinder):
    """Runs :func:`register` right after verl imports its FSDP engine module in this process."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != _VERL_FSDP_ENGINE:
            return None
        sys.meta_path.remove(self)  # find the real spec without this finder, once
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_register(module: Any) -> None:
            exec_module(module)
            sys.meta_path[:] = [f for f in sys.meta_path if f is not self]
            register()

        spec.loader.exec_module = exec_then_register  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Register now if verl's FSDP engine is already imported, else as soon as it is."""
    if _VERL_FSDP_ENGINE in sys.modules:
        register()
    elif not any(isinstance(f, _RegisterAfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _RegisterAfterImport())
