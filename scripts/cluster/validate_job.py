"""Validate a run script's config before it is submitted to a cluster, without launching anything.

Runs ``DRY_RUN=1 bash RUN_SCRIPT OVERRIDES...`` (every recipe/copo/run_*.sh prints its exact
command as one shell-quoted line and exits), finds the ``-m recipe.copo.main_copo`` call in it,
and composes + validates that config with ``recipe.copo.config_check.compose_and_validate``: an
unknown key, a COPO estimator without the COPO loss, or batch sizes that do not divide over
``trainer.nnodes * trainer.n_gpus_per_node`` fail here instead of minutes into a cluster job.

Usage (from the repository root):
    python scripts/cluster/validate_job.py recipe/copo/run_copo_qwen2.5_7b.sh trainer.nnodes=2
    python scripts/cluster/validate_job.py --submit-line "$(DRY_RUN=1 bash scripts/cluster/submit.sh)"
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
ENTRY_MODULE = "recipe.copo.main_copo"
DEFAULT_CONFIG = "copo_trainer"


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


def parse_trainer_command(line: str) -> TrainerCall:
    """Extract config name and Hydra overrides from a run script's printed command line.

    Accepts leading ``VAR=value`` assignments and any interpreter path before ``-m recipe.copo.main_copo``.
    """
    argv = shlex.split(line)
    try:
        at = next(i for i in range(len(argv) - 1) if argv[i] == "-m" and argv[i + 1] == ENTRY_MODULE)
    except StopIteration:
        raise ValueError(f"no `-m {ENTRY_MODULE}` in the run script's command: {line!r}") from None
    config_name = DEFAULT_CONFIG
    overrides: list[str] = []
    rest = argv[at + 2 :]
    i = 0
    while i < len(rest):
        token = rest[i]
        if token in ("--config-name", "-cn"):
            if i + 1 >= len(rest):
                raise ValueError(f"{token} without a value in {line!r}")
            config_name = rest[i + 1]
            i += 2
            continue
        if token.startswith("--config-name="):
            config_name = token.split("=", 1)[1]
        elif token.startswith("-"):
            raise ValueError(f"unsupported option {token!r} in {line!r}: only --config-name and overrides")
        else:
            overrides.append(token)
        i += 1
    return TrainerCall(config_name=config_name, overrides=overrides)


def split_entrypoint(entrypoint: list[str]) -> tuple[dict[str, str], str, list[str]]:
    """``[env K=V ...] bash RUN_SCRIPT ARGS...`` -> (env assignments, RUN_SCRIPT, ARGS)."""
    env: dict[str, str] = {}
    rest = list(entrypoint)
    if rest and rest[0] == "env":
        rest = rest[1:]
        while rest and "=" in rest[0] and not rest[0].startswith("-"):
            key, _, value = rest.pop(0).partition("=")
            env[key] = value
    if len(rest) < 2 or rest[0] != "bash":
        raise ValueError(f"entrypoint {entrypoint} is not `[env K=V ...] bash RUN_SCRIPT ...`")
    return env, rest[1], rest[2:]


def dry_run_command(
    run_script: str | Path, args: list[str], cwd: Path = REPO_ROOT, env: dict[str, str] | None = None
) -> str:
    """The command line ``DRY_RUN=1 bash run_script args...`` prints (its last non-empty stdout line)."""
    script = Path(cwd, run_script)
    if not script.is_file():
        raise FileNotFoundError(f"run script {run_script} not found under {cwd}")
    env = {**os.environ, **(env or {}), "DRY_RUN": "1"}
    proc = subprocess.run(
        ["bash", str(script), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"DRY_RUN=1 bash {run_script} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        )
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    if not lines:
        raise RuntimeError(f"DRY_RUN=1 bash {run_script} printed nothing on stdout:\n{proc.stderr}")
    return lines[-1]


def validate_run_script(
    run_script: str | Path, args: list[str], cwd: Path = REPO_ROOT, env: dict[str, str] | None = None
):
    """Dry-run ``run_script`` with ``args`` (and ``env``), then compose and validate its config.

    Returns (the parsed trainer call, the composed config).
    """
    from recipe.copo.config_check import compose_and_validate

    call = parse_trainer_command(dry_run_command(run_script, args, cwd=cwd, env=env))
    return call, compose_and_validate(call.overrides, config_name=call.config_name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_script", nargs="?", help="recipe/copo/run_*.sh, relative to the repository root")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides passed to the run script")
    parser.add_argument("--submit-line", help="a `ray job submit ...` line (submit.sh --dry-run) to check")
    parser.add_argument(
        "--working-dir", type=Path, default=REPO_ROOT, help="where RUN_SCRIPT is (default: repo)"
    )
    args = parser.parse_args(argv)

    env: dict[str, str] = {}
    cwd = args.working_dir
    if args.submit_line:
        submit = parse_submit_line(args.submit_line)
        env, run_script, overrides = split_entrypoint(submit.entrypoint)
        cwd = Path(str(submit.options.get("working-dir", cwd)))
    elif args.run_script:
        run_script, overrides = args.run_script, args.overrides
    else:
        parser.error("give RUN_SCRIPT [OVERRIDES...] or --submit-line")

    try:
        call, config = validate_run_script(run_script, overrides, cwd=cwd, env=env)
    except Exception as err:  # report every failure the same way: one clear line, non-zero exit
        print(f"[validate_job] FAILED for {run_script}: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    trainer, rollout = config.trainer, config.actor_rollout_ref.rollout
    print(
        f"[validate_job] OK {run_script}: config={call.config_name} overrides={len(call.overrides)} "
        f"model={config.actor_rollout_ref.model.path} nnodes={trainer.nnodes} "
        f"gpus_per_node={trainer.n_gpus_per_node} train_batch={config.data.train_batch_size} "
        f"n={rollout.n} estimator={config.algorithm.adv_estimator}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
