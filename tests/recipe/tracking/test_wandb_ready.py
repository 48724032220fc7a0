"""Logging: console + tensorboard by default; wandb only when asked for, and then checked before Ray."""

from __future__ import annotations

from pathlib import Path

import pytest

from recipe.copo.config_check import compose
from recipe.tracking.wandb_ready import check_wandb_ready
from tests.paths import REPO

CONFIGS = sorted(
    p.stem for p in (REPO / "recipe" / "copo" / "config").glob("*.yaml") if p.stem != "dapo_changes"
)
PATHS = {"DATA_DIR": "/data", "CKPT_DIR": "/ckpt"}
# The controlled studies' pinned workloads log to the console only: their runs write their metrics to
# metrics.jsonl, from which the study's tables and plots come (docs/STUDY_CPU.md).
CONSOLE_ONLY = {"testbed_cpu", "testbed2_cpu", "testbed3_cpu", "regimes_cpu"}  # the studies: console only


@pytest.fixture
def no_wandb_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An environment where W&B's own lookup finds nothing: empty HOME, no key, no mode, no netrc."""
    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_DISABLED", "NETRC", "WANDB_CONFIG_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("config_name", CONFIGS)
def test_every_shipped_config_logs_to_console_and_tensorboard_only(
    config_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in PATHS.items():
        monkeypatch.setenv(name, value)
    config = compose([], config_name=config_name)
    expected = ["console"] if config_name in CONSOLE_ONLY else ["console", "tensorboard"]
    assert list(config.trainer.logger) == expected


def test_wandb_without_credentials_fails_naming_the_key_and_the_fixes(no_wandb_credentials: Path) -> None:
    with pytest.raises(RuntimeError) as err:
        check_wandb_ready(["console", "wandb"])
    message = str(err.value)
    for needle in ("trainer.logger", "WANDB_API_KEY", "WANDB_MODE=offline", "trainer.logger=[console,tensorboard]"):
        assert needle in message
    with pytest.raises(RuntimeError):
        check_wandb_ready("wandb")  # a single name, as verl also accepts


@pytest.mark.parametrize(
    "env",
    [{"WANDB_MODE": "offline"}, {"WANDB_MODE": "disabled"}, {"WANDB_DISABLED": "true"}, {"WANDB_API_KEY": "x" * 40}],
)
def test_wandb_with_a_mode_or_a_key_passes(no_wandb_credentials: Path, monkeypatch, env: dict[str, str]) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    check_wandb_ready(["console", "wandb"])


NETRCS = {
    "wandb.ai": f"machine api.wandb.ai\n  login user\n  password {'a' * 40}\n",
    "coreweave": f"machine api.forge.coreweave.com\n  login user\n  password {'b' * 40}\n",
    "other host": f"machine example.com\n  login user\n  password {'c' * 40}\n",
    "no file": None,
}


@pytest.mark.parametrize("case", sorted(NETRCS))
def test_netrc_verdict_agrees_with_wandbs_own_lookup(
    no_wandb_credentials: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """Our .netrc reading (no wandb import, no service process) against wandb's own reader."""
    from wandb.sdk.lib.wbauth.wbnetrc import read_netrc_auth
    from wandb.sdk.wandb_settings import Settings

    if NETRCS[case] is not None:
        netrc = no_wandb_credentials / ".netrc"
        netrc.write_text(NETRCS[case])
        netrc.chmod(0o600)
    wandb_finds_key = read_netrc_auth(host=Settings().base_url) is not None
    assert wandb_finds_key == (case in ("wandb.ai", "coreweave"))
    if wandb_finds_key:
        check_wandb_ready(["console", "wandb"])
    else:
        with pytest.raises(RuntimeError):
            check_wandb_ready(["console", "wandb"])


def test_no_wandb_needs_nothing(no_wandb_credentials: Path) -> None:
    check_wandb_ready(["console", "tensorboard"])
    check_wandb_ready(None)


def test_main_copo_fails_before_ray_starts(no_wandb_credentials: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    import recipe.copo.main_copo as main_copo

    started: list[str] = []
    monkeypatch.setattr(ray, "init", lambda *a, **k: started.append("ray.init"))
    monkeypatch.setattr("recipe.cpu_backend.activation.activate", lambda *a, **k: started.append("cpu_backend"))
    config = compose(["trainer.logger=[console,wandb]", "trainer.device=cpu"], config_name="copo_cpu")
    with pytest.raises(RuntimeError, match="trainer.logger includes 'wandb'"):
        main_copo.run_copo(config)
    assert started == []
