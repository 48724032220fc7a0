"""Check a cluster job's config before it is submitted, composed exactly as the job will compose it.

A job is ``python -m recipe.copo.main_copo [--config-name NAME] OVERRIDES...`` plus the environment
variables submitted with it (the named configs read paths and cluster shape with ``${oc.env:...}``).
This composes that command with that environment (every variable the config reads takes the job's
value, or is unset when the job does not set it), resolves every interpolation, and runs
``recipe.copo.config_check.compose_and_validate``: an unknown key, a missing DATA_DIR, a COPO
estimator without the COPO loss, or batch sizes that do not divide over the GPUs fail here instead of
minutes into a cluster job. Nothing is launched.

The command line is ``scripts/cluster/validate_job.py``.

Usage:
    # what scripts/cluster/submit.sh runs: validate, then print the job's runtime env as JSON
    python scripts/cluster/validate_job.py --runtime-env recipe/copo/runtime_env.yaml \\
        --env DATA_DIR=/shared/data --env CKPT_DIR=/shared/ckpt \\
        -- python -m recipe.copo.main_copo --config-name copo_qwen2.5_7b trainer.total_training_steps=5
    # check a printed submission (the line submit.sh --dry-run prints)
    python scripts/cluster/validate_job.py --submit-line "$(bash scripts/cluster/submit.sh --dry-run)"
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ENTRY_MODULE = "recipe.copo.main_copo"
DEFAULT_CONFIG = "copo_trainer"  # main_copo's own default
# `${oc.env:NAME` or `${oc.env:NAME,default}` inside a config value.
ENV_INTERPOLATION = re.compile(r"\$\{oc\.env:([A-Za-z_][A-Za-z0-9_]*)")
MISSING_ENV = re.compile(r"Environment variable '([^']+)' not found")


@dataclass(frozen=True)
class TrainerCall:
    """A ``python -m recipe.copo.main_copo`` invocation split into its Hydra parts."""

    config_name: str
    overrides: list[str]


@dataclass(frozen=True)
class SubmitCall:
    """A ``ray job submit ... -- ENTRYPOINT`` line split into its options and entrypoint."""

    options: dict[str, str | bool]
    entrypoint: list[str]

    @property
    def env_vars(self) -> dict[str, str]:
        """The ``env_vars`` of the job's ``--runtime-env-json`` (empty without one)."""
        raw = self.options.get("runtime-env-json")
        return dict(json.loads(raw).get("env_vars", {})) if isinstance(raw, str) else {}


def parse_submit_line(line: str) -> SubmitCall:
    """Split a shell-quoted ``ray job submit [--opt=value|--flag ...] -- entrypoint...`` line."""
    argv = shlex.split(line)
    try:
        start = next(i for i in range(len(argv) - 1) if argv[i + 1] == "submit" and argv[i].endswith("job"))
    except StopIteration:
        raise ValueError(f"not a `ray job submit` command line: {line!r}") from None
    if "--" not in argv[start:]:
        raise ValueError(f"`ray job submit` line has no `--` before its entrypoint: {line!r}")
    sep = argv.index("--", start)
    options: dict[str, str | bool] = {}
    for token in argv[start + 2 : sep]:
        if not token.startswith("--"):
            raise ValueError(f"unexpected token {token!r} in the options of {line!r} (use --opt=value)")
        key, eq, value = token[2:].partition("=")
        options[key] = value if eq else True
    entrypoint = argv[sep + 1 :]
    if not entrypoint:
        raise ValueError(f"`ray job submit` line has an empty entrypoint: {line!r}")
    return SubmitCall(options=options, entrypoint=entrypoint)


def parse_trainer_command(argv: Sequence[str]) -> TrainerCall:
    """Config name and Hydra overrides of ``[VAR=value ...] PYTHON -m recipe.copo.main_copo ...``."""
    argv = list(argv)
    try:
        at = next(i for i in range(len(argv) - 1) if argv[i] == "-m" and argv[i + 1] == ENTRY_MODULE)
    except StopIteration:
        raise ValueError(f"no `-m {ENTRY_MODULE}` in the job's command: {shlex.join(argv)}") from None
    config_name = DEFAULT_CONFIG
    overrides: list[str] = []
    rest = argv[at + 2 :]
    i = 0
    while i < len(rest):
        token = rest[i]
        if token in ("--config-name", "-cn"):
            if i + 1 >= len(rest):
                raise ValueError(f"{token} without a value in {shlex.join(argv)}")
            config_name = rest[i + 1]
            i += 2
            continue
        if token.startswith("--config-name="):
            config_name = token.split("=", 1)[1]
        elif token.startswith("-"):
            raise ValueError(f"unsupported option {token!r} in {shlex.join(argv)}: only --config-name and overrides")
        else:
            overrides.append(token)
        i += 1
    return TrainerCall(config_name=config_name, overrides=overrides)


def env_vars_read(config) -> set[str]:
    """Names of the environment variables a composed (unresolved) config reads with ``oc.env``."""
    from omegaconf import OmegaConf

    text = OmegaConf.to_yaml(config, resolve=False)
    return set(ENV_INTERPOLATION.findall(text))


@contextlib.contextmanager
def job_environment(names: set[str], env_vars: Mapping[str, str]) -> Iterator[None]:
    """Inside: each variable in ``names`` has the job's value, or is unset when the job has none."""
    saved = {name: os.environ.get(name) for name in names}
    try:
        for name in names:
            if name in env_vars:
                os.environ[name] = str(env_vars[name])
            else:
                os.environ.pop(name, None)
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def compose_job(entrypoint: Sequence[str], env_vars: Mapping[str, str]):
    """Compose, resolve and validate the job's config as the job will; returns (call, config, env read).

    Raises ValueError naming an environment variable the config needs but the job does not set.
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import InterpolationResolutionError

    from recipe.copo.config_check import compose, compose_and_validate

    call = parse_trainer_command(entrypoint)
    read = env_vars_read(compose(call.overrides, config_name=call.config_name))
    with job_environment(read, env_vars):
        try:
            config = compose_and_validate(call.overrides, config_name=call.config_name)
            OmegaConf.resolve(config)  # every interpolation, as the job's TaskRunner does
        except InterpolationResolutionError as err:
            missing = MISSING_ENV.search(str(err))
            if not missing:
                raise
            raise ValueError(
                f"{missing.group(1)} is not set for the job, and config {call.config_name} reads it "
                f"({err.full_key} = ${{oc.env:{missing.group(1)}}}). Export it (a path every node sees) "
                "before submitting, or put it in the --env-file."
            ) from None
    return call, config, {name: env_vars[name] for name in sorted(read) if name in env_vars}


def job_runtime_env(path: Path, env_vars: Mapping[str, str]) -> dict:
    """The runtime env the job is submitted with: ``path`` (YAML) plus ``env_vars``.

    ``working_dir`` is dropped: submit.sh passes ``--working-dir`` itself. A variable set in both
    takes the forwarded value.
    """
    import yaml

    if not path.is_file():
        raise FileNotFoundError(f"runtime env {path} does not exist")
    runtime_env = yaml.safe_load(path.read_text()) or {}
    runtime_env.pop("working_dir", None)
    runtime_env["env_vars"] = {**(runtime_env.get("env_vars") or {}), **env_vars}
    return runtime_env


def _key_value(text: str) -> tuple[str, str]:
    key, eq, value = text.partition("=")
    if not eq or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
        raise argparse.ArgumentTypeError(f"--env expects NAME=VALUE, got {text!r}")
    return key, value


def _report(call: TrainerCall, config, read: Mapping[str, str]) -> str:
    trainer, rollout = config.trainer, config.actor_rollout_ref.rollout
    env = " ".join(f"{k}={v}" for k, v in read.items()) or "-"
    return (
        f"[validate_job] OK config={call.config_name} overrides={len(call.overrides)} "
        f"model={config.actor_rollout_ref.model.path} nnodes={trainer.nnodes} "
        f"gpus_per_node={trainer.n_gpus_per_node} train_batch={config.data.train_batch_size} "
        f"n={rollout.n} estimator={config.algorithm.adv_estimator} ckpt={trainer.default_local_dir} env: {env}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="validate_job.py",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--submit-line", help="a `ray job submit ... -- ENTRYPOINT` line to check")
    parser.add_argument("--runtime-env", type=Path, help="runtime env YAML the job is submitted with")
    parser.add_argument(
        "--env", type=_key_value, action="append", default=[], metavar="NAME=VALUE",
        help="an environment variable the job gets (repeatable)",
    )
    parser.add_argument("--no-check", action="store_true", help="only print the runtime env JSON")
    parser.add_argument("entrypoint", nargs="*", help="the job's command, after --")
    args = parser.parse_args(argv)

    if args.submit_line:
        submit = parse_submit_line(args.submit_line)
        entrypoint, env_vars = submit.entrypoint, submit.env_vars
    elif args.entrypoint:
        entrypoint, env_vars = args.entrypoint, dict(args.env)
    else:
        parser.error("give --submit-line LINE, or -- ENTRYPOINT... (with --runtime-env/--env)")

    try:
        runtime_env = job_runtime_env(args.runtime_env, env_vars) if args.runtime_env else None
        if not args.no_check:
            # stdout carries only the runtime env JSON: verl's own messages go to stderr
            with contextlib.redirect_stdout(sys.stderr):
                call, config, read = compose_job(entrypoint, env_vars)
            print(_report(call, config, read), file=sys.stderr)
    except Exception as err:  # one clear line and a non-zero exit, whatever failed
        print(f"[validate_job] FAILED: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    if runtime_env is not None:
        print(json.dumps(runtime_env, sort_keys=True, separators=(",", ":")))
    return 0

