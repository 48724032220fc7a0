"""recipe/reward/__init__.py through verl 0.9.1's own reward path (no trainer, no Ray).

verl loads the function by file path (``reward.custom_reward_function.path``), wraps it with
``reward_kwargs``, and the naive reward manager calls it from executor threads; the dict's keys
become ``reward_extra_info`` and then per-key numpy arrays in ``non_tensor_batch`` (agent_loop.py).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

from recipe.models.tiny import build_tiny_tokenizer

REWARD_PY = Path(__file__).resolve().parents[3] / "recipe" / "reward" / "__init__.py"


def _config():
    return OmegaConf.create(
        {
            "reward": {
                "custom_reward_function": {
                    "path": str(REWARD_PY),
                    "name": "compute_score",
                    "reward_kwargs": {"timeout_s": 60.0, "num_procs": 1},
                },
                "reward_manager": {"source": "register", "name": "naive"},
            }
        }
    )


def _item(tokenizer, prompt: str, response: str, gold: str):
    from verl import DataProto

    p = tokenizer.encode(prompt)
    r = tokenizer.encode(response)
    pad = 4  # right padding of the response, as verl's rollout produces
    responses = torch.tensor([r + [tokenizer.pad_token_id] * pad])
    prompts = torch.tensor([p])
    attention = torch.tensor([[1] * (len(p) + len(r)) + [0] * pad])
    return DataProto.from_dict(
        tensors={"prompts": prompts, "responses": responses, "attention_mask": attention},
        non_tensors={
            "data_source": np.array(["HuggingFaceH4/MATH-500"], dtype=object),
            "reward_model": np.array([{"style": "rule", "ground_truth": gold}], dtype=object),
            "extra_info": np.array([{"index": 0}], dtype=object),
        },
    )


def test_naive_reward_manager_propagates_pred():
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
    from verl.trainer.ppo.reward import get_custom_reward_fn

    config = _config()
    tokenizer = build_tiny_tokenizer()
    fn = get_custom_reward_fn(config)  # verl's loader: by file path, kwargs merged
    cases = [
        ("What is 1/2?", "We get $\\boxed{\\dfrac{1}{2}}$.", "\\frac{1}{2}", 1.0, "\\frac{1}{2}"),
        ("Root?", "It is \\boxed{\\sqrt{8}}", "2\\sqrt{2}", 1.0, "\\sqrt{8}"),
        ("Sum?", "The answer is 41.", "42", 0.0, "41"),
        ("Nothing", "no idea", "3", 0.0, ""),
    ]

    async def run() -> list[dict]:
        manager = NaiveRewardManager(config, tokenizer, fn)
        return await asyncio.gather(*(manager.run_single(_item(tokenizer, *c[:3])) for c in cases))

    outs = asyncio.run(run())
    for out, (_, _, _, score, pred) in zip(outs, cases, strict=True):
        assert out["reward_score"] == score
        assert out["reward_extra_info"] == {
            "score": score,
            "acc": score == 1.0,
            "pred": pred,
            "timeout": False,
        }

    # what verl's agent loop does next (agent_loop.py: one numpy array per reward_extra_info key)
    infos = [o["reward_extra_info"] for o in outs]
    keys = list(infos[0].keys())
    non_tensor = {k: np.array([info[k] for info in infos]) for k in keys}
    assert list(non_tensor["pred"]) == [c[4] for c in cases]
    assert non_tensor["acc"].dtype == np.bool_


def test_path_loaded_module_shares_state_with_package():
    """verl's by-path load and ``import recipe.reward`` share one pool and one set of counters."""
    from verl.utils.import_utils import load_extern_object

    from recipe import reward

    by_path = load_extern_object(module_path=str(REWARD_PY), object_name="reward_metrics")
    reward.reset_reward_metrics()
    reward.compute_score("m", "\\boxed{3}", "3")
    assert by_path() == reward.reward_metrics()
    assert by_path()["calls"] == 1
    # the recipe config's form, pkg://recipe.reward, resolves to the same function
    by_pkg = load_extern_object(module_path="pkg://recipe.reward", object_name="compute_score")
    assert by_pkg is reward.compute_score
