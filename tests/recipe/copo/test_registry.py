"""Under verl's own main_ppo, the recipe's names resolve and fail pointing to main_copo: no approximation."""

from __future__ import annotations

import numpy as np
import pytest
from verl import DataProto
from verl.trainer.ppo.core_algos import get_adv_estimator_fn, get_policy_loss_fn
from verl.trainer.ppo.ray_trainer import compute_advantage

import recipe.copo.registry  # noqa: F401  (what VERL_USE_EXTERNAL_MODULES=recipe.copo.registry loads)
from tests.recipe.copo.copo_batches import composed_config, make_step_batch


@pytest.mark.parametrize("estimator", ["copo", "gcpo"])
def test_verl_advantage_step_with_copo_or_gcpo_fails_pointing_to_main_copo(estimator: str) -> None:
    batch = make_step_batch(seed=6)
    config = composed_config(f"algorithm.adv_estimator={estimator}")
    data = DataProto.from_dict(
        tensors={"token_level_rewards": batch.token_level_rewards(), "response_mask": batch.response_mask()},
        non_tensors={"uid": np.array(batch.uids, dtype=object)},
    )
    with pytest.raises(RuntimeError, match=r"python -m recipe\.copo\.main_copo") as err:
        compute_advantage(data, adv_estimator=estimator, config=config.algorithm)
    assert f"algorithm.adv_estimator={estimator}" in str(err.value)
    assert "advantages" not in data.batch.keys()  # nothing was computed  # noqa: SIM118


def test_copo_loss_name_fails_pointing_to_main_copo() -> None:
    with pytest.raises(RuntimeError, match=r"loss_mode=copo runs only under the COPO trainer"):
        get_policy_loss_fn("copo")(None, None, None, None)


def test_importing_twice_keeps_one_registration() -> None:
    import importlib

    before = get_adv_estimator_fn("copo")
    importlib.reload(recipe.copo.registry)
    assert get_adv_estimator_fn("copo") is before
