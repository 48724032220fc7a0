"""The recipe's names in verl's registries and what each does when used outside main_copo."""

from __future__ import annotations

import warnings

import pytest
import torch
from verl.trainer.ppo.core_algos import get_adv_estimator_fn, get_policy_loss_fn
from verl.trainer.ppo.ray_trainer import compute_advantage

import recipe.copo.registry as registry
from copo_core import compute_copo_advantages
from tests.recipe.copo.copo_batches import composed_config, make_step_batch


def test_names_resolve_in_verl() -> None:
    assert get_adv_estimator_fn("copo") is registry.compute_copo_outcome_advantage
    assert get_adv_estimator_fn("gcpo") is registry.compute_gcpo_advantage_placeholder
    assert get_policy_loss_fn("copo") is registry.copo_policy_loss_placeholder
    registry.register_all()  # idempotent
    assert get_adv_estimator_fn("copo") is registry.compute_copo_outcome_advantage


def test_registered_estimator_is_the_single_tensor_approximation() -> None:
    batch = make_step_batch(seed=6)
    config = composed_config("algorithm.copo.k=3.0", "algorithm.copo.blend_mode=soft")
    data = batch.to_dataproto()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        registry._warned = False
        out = compute_advantage(data, adv_estimator="copo", config=config.algorithm)
    assert any("approximation" in str(w.message) for w in caught)
    # reward-class entropy: the answers are NOT used, even though the batch has them
    ref = compute_copo_advantages(
        batch.scores, batch.uids, None, k=3.0, blend_mode="soft", entropy_source="reward"
    )
    want = ref.blended[:, None] * batch.response_mask()
    torch.testing.assert_close(out.batch["advantages"], want, rtol=1e-6, atol=1e-7)
    assert "approximation" in (registry.compute_copo_outcome_advantage.__doc__ or "")


def test_placeholders_point_to_main_copo() -> None:
    with pytest.raises(RuntimeError, match="main_copo"):
        get_policy_loss_fn("copo")(None, None, None, None)
    with pytest.raises(RuntimeError, match="main_copo"):
        get_adv_estimator_fn("gcpo")(token_level_rewards=None, response_mask=None)
