"""The estimator table (recipe/copo/estimators.py) is the only module that compares estimator names.

The scan reads every non-test module with ``ast`` and fails on a comparison (``==``, ``!=``, ``in``,
``not in``) whose one side is an estimator-name string literal, or a tuple/list/set literal holding one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from copo_core import LOCAL_ADVANTAGES, LOCAL_ESTIMATORS
from recipe.copo import estimators
from recipe.quickstart.run import ALGO_LOSS
from recipe.study.methods import METHODS, method_estimator
from tests.paths import REPO

NAMES = frozenset(estimators.ESTIMATORS) | frozenset(estimators.LOCAL_ESTIMATORS)
SCANNED = ("copo_core", "recipe", "data_prep", "scripts")
TABLE = Path("recipe/copo/estimators.py")


def _literal_names(node: ast.expr) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value} & NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_literal_names(elt) for elt in node.elts)) if node.elts else set()
    return set()


def name_comparisons(source: str) -> list[tuple[int, str]]:
    """``(line, name)`` of each comparison against an estimator-name literal in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                found.extend((node.lineno, name) for name in sorted(_literal_names(side)))
    return found


def test_no_module_but_the_table_compares_estimator_names() -> None:
    offenders = []
    for top in SCANNED:
        for path in sorted((REPO / top).rglob("*.py")):
            relative = path.relative_to(REPO)
            if relative == TABLE:
                continue
            offenders.extend(
                f"{relative}:{line}: compares with {name!r}"
                for line, name in name_comparisons(path.read_text())
            )
    assert not offenders, "read the row from recipe/copo/estimators.py instead:\n" + "\n".join(offenders)


@pytest.mark.parametrize(
    "snippet",
    [
        'if settings.estimator == "gcpo": pass',
        'ok = "copo" != loss_mode',
        'if name in ("grpo", "dapo_filter"): pass',
        'if local not in ["rloo"]: pass',
        'x = a < b == "drgrpo"',
    ],
)
def test_the_scan_catches_a_name_comparison(snippet: str) -> None:
    assert name_comparisons(snippet), snippet


@pytest.mark.parametrize(
    "snippet", ['row = ESTIMATORS["copo"]', 'if method == "dapo_filter": pass', 'if mode == "soft": pass']
)
def test_the_scan_leaves_lookups_and_other_strings(snippet: str) -> None:
    assert name_comparisons(snippet) == []


def test_local_rows_are_copo_cores_maths() -> None:
    assert tuple(estimators.LOCAL_ESTIMATORS) == LOCAL_ESTIMATORS == tuple(LOCAL_ADVANTAGES)


def test_rows_pair_each_recipe_loss_with_its_estimators() -> None:
    for row in estimators.ESTIMATORS.values():
        assert row.overrides() == [
            f"algorithm.adv_estimator={row.name}",
            f"{estimators.LOSS_KEY}={row.loss_mode}",
        ]
        assert (row.section is not None) == row.recipe_step, row.name  # the recipe's step reads its section
    assert estimators.RECIPE_ESTIMATORS == ("copo", "gcpo")
    assert estimators.RECIPE_LOSS_MODES == ("copo",)
    unknown = estimators.estimator("rloo")  # an estimator of verl's: verl's step, vanilla loss
    assert unknown.step == estimators.VERL_STEP and unknown.loss_mode == estimators.VANILLA_LOSS


def test_quickstart_algos_repeat_the_tables_rows() -> None:
    """recipe.quickstart sits below recipe.copo in the layering table, so it spells its two rows; equal here."""
    for name, loss_mode in ALGO_LOSS.items():
        assert estimators.ESTIMATORS[name].loss_mode == loss_mode


def test_study_methods_select_rows_of_the_table() -> None:
    for method, overrides in METHODS.items():
        row = estimators.ESTIMATORS[method_estimator(method)]
        assert f"{estimators.LOSS_KEY}={row.loss_mode}" in overrides, method
