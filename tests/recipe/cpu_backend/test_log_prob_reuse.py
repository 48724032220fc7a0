"""copo_cpu.yaml's shortcuts leave COPO's loss and gradient unchanged, and the start-up checks
refuse the configs where they would not.

* ``algorithm.rollout_correction.bypass_mode=true``: the hf rollout's log-probs stand in for the
  actor's recomputation of the old log-probs. Compared here on the tiny model: COPO's loss
  (``copo_core.copo_policy_loss``, what ``recipe.copo.actor_loss`` calls per micro-batch) and its
  gradient with respect to every model weight are the same with either anchor, and clearly
  different with the anchor of other weights (so the comparison can fail).
* no reference pass: ``use_kl_loss=false`` (verl then builds no reference model); the installed
  COPO loss with ``use_kl_loss=true, kl_loss_coef=0`` equals it, which is why checks.py refuses
  that combination as a wasted forward pass.
"""

from __future__ import annotations

import pytest
import torch

from copo_core import copo_policy_loss
from recipe.cpu_backend.checks import CpuConfigError, check_cpu_config
from recipe.cpu_backend.sampling import SamplingParams, sample_batch
from recipe.models.tiny import build_tiny_qwen2
from tests.recipe.cpu_backend.cpu_config import cpu_config

EOS = 258
PAD = 256
PROMPTS = [[257, 117, 10, 49, 43, 50, 258, 10, 257, 97, 10], [257, 55, 43, 56, 61, 10, 10]]
N = 4  # responses per prompt


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, torch.nn.Module]:
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("tiny")
    policy = AutoModelForCausalLM.from_pretrained(build_tiny_qwen2(root / "m0"), attn_implementation="sdpa")
    other = AutoModelForCausalLM.from_pretrained(
        build_tiny_qwen2(root / "m5", seed=5), attn_implementation="sdpa"
    )
    return policy.eval(), other.eval()


def _response_log_probs(model, prompts, responses, temperature: float, width: int) -> torch.Tensor:
    """(B, width) log-probs of each response as verl's actor computes them (unpadded forward, logits / T)."""
    from verl.utils.torch_functional import logprobs_from_logits

    rows = []
    for prompt, response in zip(prompts, responses, strict=True):
        logits = model(input_ids=torch.tensor([prompt + response])).logits[0, len(prompt) - 1 : -1]
        lp = logprobs_from_logits(logits.float() / temperature, torch.tensor(response))
        rows.append(torch.nn.functional.pad(lp, (0, width - len(response))))
    return torch.stack(rows)


def _loss_and_grads(model, old, new, fields, mask) -> tuple[torch.Tensor, list[torch.Tensor]]:
    loss, _ = copo_policy_loss(old, new, *fields, mask, loss_agg_mode="token-mean")
    grads = torch.autograd.grad(loss, [p for p in model.parameters() if p.requires_grad], retain_graph=True)
    return loss.detach(), [g.detach() for g in grads]


@pytest.mark.parametrize("temperature", [1.0, 0.8])
def test_rollout_log_probs_as_old_log_probs_keep_loss_and_gradient(models, temperature: float) -> None:
    policy, other = models
    prompts = [p for p in PROMPTS for _ in range(N)]
    gens = [torch.Generator().manual_seed(11 + i) for i in range(len(prompts))]
    samples = sample_batch(
        policy,
        prompts,
        SamplingParams(temperature=temperature),
        max_tokens=[10] * len(prompts),
        eos_token_ids=[EOS],
        pad_token_id=PAD,
        generator=gens,
    )
    responses = [s.token_ids for s in samples]
    width = max(len(r) for r in responses)
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in responses], dtype=torch.float32)
    rollout_old = torch.tensor([s.log_probs + [0.0] * (width - len(s.log_probs)) for s in samples])
    with torch.no_grad():
        recomputed_old = _response_log_probs(policy, prompts, responses, temperature, width)
        stale_old = _response_log_probs(other, prompts, responses, temperature, width)
    gen = torch.Generator().manual_seed(3)
    fields = (
        torch.randn(len(prompts), generator=gen),  # local advantage
        torch.randn(len(prompts), generator=gen),  # global advantage
        torch.rand(len(prompts), generator=gen),  # local-loss weight
    )
    new = _response_log_probs(policy, prompts, responses, temperature, width)  # with grad

    loss_recomputed, grads_recomputed = _loss_and_grads(policy, recomputed_old, new, fields, mask)
    loss_rollout, grads_rollout = _loss_and_grads(policy, rollout_old, new, fields, mask)
    loss_stale, grads_stale = _loss_and_grads(policy, stale_old, new, fields, mask)

    torch.testing.assert_close(loss_rollout, loss_recomputed, rtol=1e-4, atol=1e-6)
    for got, want in zip(grads_rollout, grads_recomputed, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-6)
    # the comparison is sensitive: an anchor from other weights moves the loss and the gradient
    assert (loss_stale - loss_recomputed).abs() > 1e-3 or max(
        (a - b).abs().max() for a, b in zip(grads_stale, grads_recomputed, strict=True)
    ) > 1e-3


def test_no_kl_loss_equals_zero_coefficient_kl_loss() -> None:
    """The installed COPO loss with use_kl_loss=false equals use_kl_loss=true, kl_loss_coef=0."""
    from recipe.copo.actor_loss import copo_ppo_loss
    from tests.recipe.copo.copo_batches import (
        actor_config,
        make_step_batch,
        nested_model_output,
        set_global_batch_info,
        worker_minibatch,
    )
    from tests.recipe.copo.test_actor_loss import _step_fields

    batch = make_step_batch(seed=4)
    copo_fields = {k: v for k, v in _step_fields(batch).items() if k.startswith("copo_")}
    results = []
    for kl in ("use_kl_loss=false", "use_kl_loss=true"):
        config, _ = actor_config(f"actor_rollout_ref.actor.{kl}", "actor_rollout_ref.actor.kl_loss_coef=0")
        data, seq_logps, _, _ = worker_minibatch(batch, copo_fields)
        set_global_batch_info(data, len(data))
        loss, _ = copo_ppo_loss(
            config=config,
            model_output={"log_probs": nested_model_output(seq_logps, range(len(data)))},
            data=data,
        )
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in seq_logps]))
    (loss_off, grads_off), (loss_zero, grads_zero) = results
    torch.testing.assert_close(loss_off, loss_zero, rtol=0, atol=0)
    for a, b in zip(grads_off, grads_zero, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_copo_cpu_defaults_reuse_log_probs_and_skip_the_reference_pass() -> None:
    from verl.trainer.ppo.utils import need_reference_policy

    config = cpu_config()
    check_cpu_config(config)
    assert config.algorithm.rollout_correction.bypass_mode is True
    assert config.actor_rollout_ref.rollout.calculate_log_probs is True
    assert not need_reference_policy(config)  # verl builds no reference worker: no ref pass


@pytest.mark.parametrize(
    ("updates", "message"),
    [
        (
            {"actor_rollout_ref__rollout__calculate_log_probs": False},
            "actor_rollout_ref.rollout.calculate_log_probs=false",
        ),
        ({"actor_rollout_ref__rollout__dtype": "bfloat16"}, "actor_rollout_ref.rollout.dtype=bf16"),
        (
            {"actor_rollout_ref__actor__use_kl_loss": True, "actor_rollout_ref__actor__kl_loss_coef": 0.0},
            "use_kl_loss=true with kl_loss_coef=0",
        ),
    ],
)
def test_checks_refuse_shortcuts_that_would_change_the_loss_or_waste_a_pass(updates, message: str) -> None:
    with pytest.raises(CpuConfigError, match=message):
        check_cpu_config(cpu_config(**updates))


def test_checks_accept_recomputation_and_a_real_kl_term() -> None:
    check_cpu_config(
        cpu_config(
            algorithm__rollout_correction__bypass_mode=False,
            actor_rollout_ref__rollout__dtype="bfloat16",
            actor_rollout_ref__actor__use_kl_loss=True,
            actor_rollout_ref__actor__kl_loss_coef=0.01,
        )
    )
