"""recipe/tracking/names.py is tied to the code that computes the metrics: every recipe name it lists is
a key that copo_core returns (under its prefix), every key a step logs is listed, and no other module
spells a recipe metric name by hand."""

from __future__ import annotations

import ast
import re

import pytest
import torch

from copo_core import CopoConfig, GcpoConfig, compute_copo_advantages, gcpo, mechanism, metrics
from recipe.copo import gcpo_step
from recipe.copo.step import StepSettings, advantage_step
from recipe.tracking import names
from tests.paths import REPO
from tests.recipe.copo.copo_batches import make_step_batch

RECIPE_NAME = re.compile(r"^(copo|gcpo|signal|mechanism)/[A-Za-z0-9_]+$")


def test_copo_core_returns_exactly_the_keys_it_exports() -> None:
    batch = make_step_batch()
    adv = compute_copo_advantages(batch.scores, batch.uids, batch.preds)
    assert tuple(metrics.copo_batch_metrics(adv)) == metrics.COPO_METRIC_KEYS
    mask = batch.response_mask()
    signal = metrics.signal_budget_metrics(adv.blended[:, None] * mask, mask, batch.scores, batch.uids)
    assert tuple(signal) == metrics.SIGNAL_METRIC_KEYS
    wrong = mechanism.wrong_answer_metrics(adv.blended[:, None] * mask, mask, batch.scores, batch.uids)
    assert tuple(wrong) == mechanism.MECHANISM_METRIC_KEYS
    shares = torch.rand(batch.n, dtype=torch.float64)
    assert tuple(gcpo.gcpo_metrics(shares, batch.scores, batch.uids)) == gcpo.GCPO_METRIC_KEYS


@pytest.mark.parametrize("estimator,local", [("copo", "grpo"), ("copo", "gcpo"), ("gcpo", "grpo")])
def test_every_key_a_step_logs_is_a_listed_name(estimator: str, local: str) -> None:
    batch = make_step_batch()
    settings = StepSettings(
        estimator=estimator, copo=CopoConfig(local_estimator=local), gcpo=GcpoConfig(embedder="hash")
    )
    texts = [f"answer {p}" for p in batch.preds]
    logged = set(advantage_step(batch.step_inputs(texts=texts), settings).metrics)
    expected = set(names.SIGNAL_KEYS) | set(names.MECHANISM_KEYS)
    if estimator == "copo":
        expected |= set(names.COPO_KEYS)
    if estimator == "gcpo" or local == "gcpo":
        expected |= set(names.GCPO_KEYS) | {names.GCPO_PREFIX + k for k in gcpo_step.TIMING_KEYS}
    assert logged == expected


def test_every_recipe_name_in_names_is_computed_somewhere() -> None:
    listed = {
        v for k, v in vars(names).items() if k.isupper() and isinstance(v, str) and RECIPE_NAME.match(v)
    }
    assert listed, "names.py lists no copo/, gcpo/, signal/ or mechanism/ name"
    assert listed <= set(names.COPO_KEYS) | set(names.SIGNAL_KEYS) | set(names.GCPO_KEYS) | set(
        names.MECHANISM_KEYS
    )


def test_no_module_spells_a_recipe_metric_name_by_hand() -> None:
    """A string constant such as "copo/entropy_mean" outside names.py would be a second home."""
    found = []
    for top in ("copo_core", "recipe", "scripts", "data_prep"):
        for path in sorted((REPO / top).rglob("*.py")):
            if path == REPO / "recipe" / "tracking" / "names.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and RECIPE_NAME.match(node.value)
                ):
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value!r}")
    assert not found, "use recipe.tracking.names instead:\n" + "\n".join(found)
