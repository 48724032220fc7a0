"""Fail before any worker starts when a run logs to W&B but W&B cannot log.

verl creates its ``Tracking`` (and with it ``wandb.init``) only after Ray, the workers and the
rollout engines are up: minutes of GPU time on a cluster. Without credentials or a mode, that
``wandb.init`` then crashes the job. :func:`check_wandb_ready` runs on the job's driver before
``ray.init`` and looks where ``wandb login`` leaves credentials (``WANDB_API_KEY``, an identity
token file, the ``.netrc`` entry of the W&B host), without importing wandb (whose ``login`` starts
a service process) and without a network call.
"""

from __future__ import annotations

import netrc
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from urllib.parse import urlsplit

# WANDB_MODE values that need no account: nothing is sent (offline keeps a local copy to sync later).
NO_ACCOUNT_MODES = ("offline", "disabled", "dryrun")
# Hosts `wandb login` writes to .netrc by default (wandb >= 0.2x: the CoreWeave API, then its upstream).
DEFAULT_HOSTS = ("api.wandb.ai", "api.forge.coreweave.com")

NOT_READY_MESSAGE = (
    "trainer.logger includes 'wandb', but W&B has no credentials in this environment and WANDB_MODE is "
    "{mode}: the job would crash at wandb.init, after Ray and every worker had started. Either\n"
    "  - set WANDB_API_KEY (cluster: in the env file given to start_head.sh/start_worker.sh, see "
    "scripts/cluster/cluster.env.example) or run `wandb login` on the node that runs the job, or\n"
    "  - set WANDB_MODE=offline (sync later with `wandb sync`) or WANDB_MODE=disabled, or\n"
    "  - log without W&B: trainer.logger=[console,tensorboard] (the recipe's default)."
)


def _backends(logger: str | Iterable[str] | None) -> list[str]:
    if logger is None:
        return []
    if isinstance(logger, str):
        return [logger]
    return [str(name) for name in logger]


def netrc_has_wandb_key(env: Mapping[str, str]) -> bool:
    """True when the .netrc that W&B reads (``$NETRC``, else ``~/.netrc``) holds a key for its host."""
    path = Path(env.get("NETRC") or Path(env.get("HOME") or Path.home()) / ".netrc")
    try:
        entries = netrc.netrc(str(path))
    except (OSError, netrc.NetrcParseError):
        return False
    base_url = env.get("WANDB_BASE_URL", "")
    hosts = ((urlsplit(base_url).hostname or base_url),) if base_url else DEFAULT_HOSTS
    return any((entries.authenticators(host) or (None, None, None))[2] for host in hosts)


def check_wandb_ready(
    logger: str | Iterable[str] | None, env: Mapping[str, str] | None = None
) -> None:
    """Raise ``RuntimeError`` when ``trainer.logger`` asks for wandb and wandb could not log.

    Args:
        logger: the value of ``trainer.logger`` (a name or a list of names).
        env: the environment the job runs with (default ``os.environ``).
    """
    if "wandb" not in _backends(logger):
        return
    env = os.environ if env is None else env
    mode = env.get("WANDB_MODE", "").strip().lower()
    if mode in NO_ACCOUNT_MODES or env.get("WANDB_DISABLED", "").strip().lower() in ("1", "true"):
        return
    if env.get("WANDB_API_KEY", "").strip() or env.get("WANDB_IDENTITY_TOKEN_FILE", "").strip():
        return
    if netrc_has_wandb_key(env):
        return
    raise RuntimeError(NOT_READY_MESSAGE.format(mode=repr(mode) if mode else "unset"))
