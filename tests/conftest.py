"""Shared test settings: CPU only, offline, quiet; each test gets its environment back."""

import os
import signal
from collections.abc import Iterator

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

SIGNALS_HEADER = "started with SIGINT ignored: "


@pytest.fixture(autouse=True)
def _restore_environ() -> Iterator[None]:
    """Undo every os.environ change a test makes.

    recipe.cpu_backend.activation.activate() exports VERL_PLATFORM and friends into os.environ (the
    trainer needs them); leaked into later tests' subprocesses they select the CPU platform
    in a process that never registered it.
    """
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@pytest.fixture(autouse=True)
def _restore_signal_handlers() -> Iterator[None]:
    """Undo every stop-signal handler a test leaves in the pytest process.

    ``ray.init`` in-process installs Ray's SIGTERM handler (a ``sys.exit`` that a running test reports as
    a failure): left in place, the pytest process outlives a SIGTERM (``kill``, ``timeout``), and runs on
    with the tests it had left (seen on 2026-11-29: a killed suite ran 35 more minutes beside the next).
    """
    saved = {s: signal.getsignal(s) for s in _STOP_SIGNALS}
    yield
    for s, handler in saved.items():
        if handler is not None and signal.getsignal(s) is not handler:
            signal.signal(s, handler)


_RESTORED_SIGNALS: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    from recipe.proc import restore_default_signals

    # Launched from a background job, pytest inherits SIGINT (and SIGQUIT) as ignored, and so would
    # every process a test starts: the stop tests would then see a group SIGINT ignored and wait out
    # their grace periods. The suite runs the same however it was launched; test_proc pins the
    # launchers' own handling of an inherited ignore.
    _RESTORED_SIGNALS[:] = restore_default_signals()


def pytest_report_header(config: pytest.Config) -> str:
    """Says how the suite was launched (scripts/flake_check.sh reads it)."""
    return f"{SIGNALS_HEADER}{bool(_RESTORED_SIGNALS)} (restored: {', '.join(_RESTORED_SIGNALS) or 'none'})"


def pytest_sessionstart(session: pytest.Session) -> None:
    from tests.faults import session as fault_session

    fault_session.started(list(session.config.invocation_params.args))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A session that wrote fault records leaves ``_session.json`` beside them (tests/faults/session.py)."""
    from tests.faults import session as fault_session

    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    stats = getattr(reporter, "stats", {}) if reporter is not None else {}
    outcomes = {name: len(stats.get(name, [])) for name in ("passed", "failed", "skipped", "error")}
    fault_session.finished(outcomes)
