"""The vllm_cpu tests run last and, when scripts/test.sh is still building the second venv beside the
suite, wait for that build.

The wait sits outside pytest-timeout's clock (a wrapper of the whole test protocol, ahead of
pytest-timeout's own), so a slow build is not counted as the first vLLM test's time; a build that
failed or never ended fails each vllm_cpu test in its setup with the build log's tail.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.vllm_cpu.venv import wait_for_build

_BUILD_PROBLEM: list[str] = []  # the message once the wait found a problem (asked once per session)
_WAITED: list[bool] = []


def _is_vllm(item: pytest.Item) -> bool:
    return item.get_closest_marker("vllm_cpu") is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Stable: every other test keeps its order; the vLLM ones move to the end, to run after the build.
    items.sort(key=_is_vllm)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    if _is_vllm(item) and not _WAITED:
        _WAITED.append(True)
        problem = wait_for_build()
        if problem:
            _BUILD_PROBLEM.append(problem)
    yield


def pytest_runtest_setup(item: pytest.Item) -> None:
    if _is_vllm(item) and _BUILD_PROBLEM:
        pytest.fail(_BUILD_PROBLEM[0], pytrace=False)
