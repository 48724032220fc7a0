"""The hf rollout server as a Ray actor: log-probs vs the actor's recomputation, batching, weights."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
import torch

from recipe.models.tiny import build_tiny_qwen2

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

PROMPTS = [[257, 117, 10, 49, 43, 50, 258, 10, 257, 97, 10], [257, 49, 10], [257, 55, 43, 56, 61, 10, 10]]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_qwen2(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def server(tiny: Path):
    import ray
    from verl.workers.config import HFModelConfig, RolloutConfig

    from recipe.cpu_backend.hf_server import HFRolloutServer, server_actor_name

    env = {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": os.getcwd()}
    ray.init(num_cpus=2, include_dashboard=False, runtime_env={"env_vars": env}, log_to_driver=False)
    try:
        config = RolloutConfig(
            name="hf", mode="async", prompt_length=32, response_length=12, dtype="float32", seed=7
        )
        handle = (
            ray.remote(HFRolloutServer)
            .options(max_concurrency=64, name=server_actor_name(0))  # the name the adapter looks up
            .remote(config, HFModelConfig(path=str(tiny)))
        )
        ray.get(handle.launch_server.remote())
        yield handle
    finally:
        ray.shutdown()


def _generate_all(handle, prompts, sampling_params) -> list:
    async def _all():
        refs = [
            handle.generate.remote(prompt_ids=p, sampling_params=dict(sampling_params), request_id=f"r{i}")
            for i, p in enumerate(prompts)
        ]
        return await asyncio.gather(*refs)

    return asyncio.run(_all())


def _actor_log_probs(model, prompt: list[int], response: list[int], temperature: float) -> torch.Tensor:
    """verl's actor recomputation: unpadded forward, logits / T, ``logprobs_from_logits``."""
    from verl.utils.torch_functional import logprobs_from_logits

    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + response])).logits[0, len(prompt) - 1 : -1].float()
    return logprobs_from_logits(logits / temperature, torch.tensor(response))


def test_log_probs_match_actor_recomputation_and_requests_are_batched(server, tiny: Path) -> None:
    import ray
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny, attn_implementation="sdpa").eval()
    before = ray.get(server.get_stats.remote())
    # n=4 copies of each prompt, sent concurrently as verl's agent loop does for a group
    prompts = [p for p in PROMPTS for _ in range(4)]
    outs = _generate_all(server, prompts, {"temperature": 0.8, "top_p": 0.95, "top_k": 100, "logprobs": True})
    stats = ray.get(server.get_stats.remote())
    assert stats["requests"] - before["requests"] == len(prompts)
    assert stats["max_batch"] > 1, f"concurrent requests were decoded one by one: {stats}"
    for prompt, out in zip(prompts, outs, strict=True):
        assert 1 <= len(out.token_ids) <= 12 and len(out.log_probs) == len(out.token_ids)
        assert out.stop_reason == "completed"
        if out.token_ids[-1] != 258:  # stopped by length, not eos: then it used the whole budget
            assert len(out.token_ids) == 12
        assert 258 not in out.token_ids[:-1]  # nothing after eos
        expected = _actor_log_probs(model, prompt, out.token_ids, 0.8)
        torch.testing.assert_close(torch.tensor(out.log_probs), expected, atol=1e-3, rtol=0)
    # the 4 copies of a prompt are independent samples, not one sample repeated
    assert len({tuple(o.token_ids) for o in outs[:4]}) > 1


def test_max_tokens_and_greedy(server, tiny: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny).eval()
    out = _generate_all(server, PROMPTS[:1], {"temperature": 0, "max_tokens": 3, "ignore_eos": True})[0]
    ids = list(PROMPTS[0])
    for _ in range(3):
        with torch.no_grad():
            ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    assert out.token_ids == ids[len(PROMPTS[0]) :]


def test_update_weights_changes_the_sampling_model(server, tiny: Path) -> None:
    import ray
    from transformers import AutoModelForCausalLM

    old_model = AutoModelForCausalLM.from_pretrained(tiny).eval()
    other = AutoModelForCausalLM.from_pretrained(build_tiny_qwen2(tiny.parent / "seed5", seed=5)).eval()
    assert ray.get(server.update_weights.remote(dict(other.state_dict()), global_steps=1)) > 0
    outs = _generate_all(server, PROMPTS, {"temperature": 1.0, "max_tokens": 6, "ignore_eos": True})
    for prompt, out in zip(PROMPTS, outs, strict=True):
        got = torch.tensor(out.log_probs)
        # the tokens' log-probs are those of the pushed weights, not of the weights loaded from disk
        torch.testing.assert_close(
            got, _actor_log_probs(other, prompt, out.token_ids, 1.0), atol=1e-3, rtol=0
        )
        assert (got - _actor_log_probs(old_model, prompt, out.token_ids, 1.0)).abs().max() > 1e-2
        assert out.extra_fields["global_steps"] == 1
    with pytest.raises(ray.exceptions.RayTaskError, match="no_such.weight"):
        ray.get(server.update_weights.remote({"no_such.weight": torch.zeros(1)}))


def test_adapter_streams_weights_in_buckets_and_the_server_samples_from_them(
    server, tiny: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker-side adapter's push (numpy buckets, two in flight) leaves the server sampling
    from exactly the pushed weights, counted as one weight update."""
    import ray
    from transformers import AutoModelForCausalLM
    from verl.workers.config import HFModelConfig, RolloutConfig

    from recipe.cpu_backend import adapter as adapter_mod

    pushed = AutoModelForCausalLM.from_pretrained(build_tiny_qwen2(tiny.parent / "seed9", seed=9)).eval()
    monkeypatch.setattr(adapter_mod, "BUCKET_BYTES", 4096)  # many buckets, so several are in flight
    config = RolloutConfig(name="hf", mode="async", prompt_length=32, response_length=12, dtype="float32")
    client = adapter_mod.HFServerAdapter(
        config, HFModelConfig(path=str(tiny)), device_mesh=None, replica_rank=0
    )
    updates_before = ray.get(server.get_stats.remote())["weight_updates"]
    asyncio.run(client.update_weights(pushed.named_parameters(), global_steps=3))
    assert ray.get(server.get_stats.remote())["weight_updates"] == updates_before + 1

    outs = _generate_all(server, PROMPTS, {"temperature": 1.0, "max_tokens": 6, "ignore_eos": True})
    for prompt, out in zip(PROMPTS, outs, strict=True):
        torch.testing.assert_close(
            torch.tensor(out.log_probs),
            _actor_log_probs(pushed, prompt, out.token_ids, 1.0),
            atol=1e-4,
            rtol=0,
        )
        assert out.extra_fields["global_steps"] == 3
