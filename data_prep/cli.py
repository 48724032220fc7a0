"""``python -m data_prep <dataset> --out DIR [...]``: write verl RL parquet files.

Datasets (output file name in DIR):
    dapo_math_17k  train  dapo_math_17k.parquet  (with --fraction F: dapo_math_17k_frac<F>_seed<S>.parquet)
    math           train  math.parquet
    math500        test   math500.parquet
    aime24         test   aime24.parquet
    aime25         test   aime25.parquet
    amc23          test   amc23.parquet
    gsm8k          test   gsm8k.parquet
    reasoning_gym  offline generator: train.parquet (+ val.parquet with --val-size)

``--prompt-template {dapo,boxed}``: ``dapo`` is DAPO-Math-17k's published prompt (end with an ``Answer:``
line), the template the paper runs trained on and the default of every dataset above but reasoning_gym, so
evaluation prompts match the training prompts; ``boxed`` asks for ``\\boxed{}`` (reasoning_gym's default).
A non-default template is named in the file name (``math500_boxed.parquet``), so the two never overwrite
each other. ``--fraction`` samples the de-duplicated problems (0.1 of DAPO-Math-17k is about 1.7k problems):
it is NOT the subset the authors trained on (see docs/REPRODUCE.md).

``--source`` is a local .json/.jsonl/.parquet file or a folder of them (offline), or a hub repo id;
without it the dataset's default hub repo is used. Malformed rows are listed with their 0-based
source row numbers and skipped (``--strict``: fail, write nothing). Files are written atomically.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from data_prep.converters import SPECS, ConversionReport, DatasetSpec, convert_records
from data_prep.io import load_hub, load_local, log, write_parquet_atomic
from data_prep.schema import PAPER_TEMPLATE, PROMPT_TEMPLATES, REASONING_GYM_TEMPLATE, check_rows

__all__ = ["main", "build_parser"]

_MAX_LISTED_ERRORS = 20


class CliError(Exception):
    """A user-facing error: printed without a traceback, exit code 2."""


def _add_template_option(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument(
        "--prompt-template",
        choices=sorted(PROMPT_TEMPLATES),
        default=default,
        help=f"prompt format (default {default}): dapo = DAPO-Math-17k's 'Answer:' prompt, as the paper runs "
        "train on; boxed = 'output the final answer within \\boxed{}'",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m data_prep",
        description="Convert math datasets to verl's RL parquet format, or generate offline problems.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n", 2)[2],
    )
    sub = parser.add_subparsers(dest="dataset", required=True, metavar="dataset")
    for spec in SPECS.values():
        p = sub.add_parser(
            spec.name,
            help=f"{spec.split} set, data_source={spec.data_source!r}",
            description=f"{spec.name}: default hub {spec.hub_id} (split {spec.hub_split}). Columns: {spec.columns}",
        )
        p.add_argument("--out", required=True, type=Path, help="output folder")
        p.add_argument("--source", help="local file/folder (json, jsonl, parquet) or a hub repo id")
        p.add_argument("--hub-config", help="hub config name (default: the dataset's)")
        p.add_argument(
            "--split", help=f"hub split, or file-name filter in a --source folder (default {spec.hub_split})"
        )
        p.add_argument(
            "--strict", action="store_true", help="fail on any malformed row instead of skipping it"
        )
        _add_template_option(p, PAPER_TEMPLATE)
        if spec.name == "dapo_math_17k":
            p.add_argument(
                "--fraction",
                type=float,
                default=1.0,
                help="keep a seeded random subset of the de-duplicated problems (0.1: about 1.7k problems; "
                "not the authors' training file, which holds every problem: see docs/REPRODUCE.md; default %(default)s: all)",
            )
            p.add_argument(
                "--seed", type=int, default=0, help="seed of the --fraction subset (default %(default)s)"
            )

    g = sub.add_parser("reasoning_gym", help="offline generator (reasoning-gym package)")
    g.add_argument("--out", required=True, type=Path, help="output folder (train.parquet, val.parquet)")
    g.add_argument(
        "--tasks",
        default="basic_arithmetic,chain_sum,gsm_symbolic",
        help="comma list of reasoning-gym tasks, each optionally name@easy or name@hard (default %(default)s)",
    )
    g.add_argument("--size", type=int, required=True, help="number of train rows (split evenly over tasks)")
    g.add_argument(
        "--val-size",
        type=int,
        default=0,
        help="number of val rows (disjoint from train) (default %(default)s)",
    )
    g.add_argument("--seed", type=int, default=0, help="(default %(default)s)")
    g.add_argument(
        "--task-config",
        help='JSON (or a .json file) of per-task config overrides, e.g. {"chain_sum": {"max_digits": 1}}',
    )
    _add_template_option(g, REASONING_GYM_TEMPLATE)
    return parser


def _load(spec: DatasetSpec, args: argparse.Namespace) -> list[dict]:
    split = args.split or spec.hub_split
    if args.source and Path(args.source).expanduser().exists():
        return load_local(args.source, split=args.split)
    if args.source and (
        args.source.startswith((".", "/", "~")) or Path(args.source).suffix in (".json", ".jsonl", ".parquet")
    ):
        raise CliError(f"--source {args.source} does not exist")
    repo = args.source or spec.hub_id
    configs = [args.hub_config] if args.hub_config else list(spec.hub_configs)
    records: list[dict] = []
    for config in configs:
        records += load_hub(repo, config, split)
    return records


def _write_checked(rows: list[dict], path: Path) -> Path:
    """Write ``rows`` after checking them against the schema the trainer checks (data_prep/schema.py)."""
    errors = check_rows(rows)
    if errors:
        raise CliError(
            f"{len(errors)} row(s) meant for {path} break the RL schema, first {errors[0]}; nothing written "
            "(a data_prep bug: please report it with the command line)"
        )
    return write_parquet_atomic(rows, path)


def _report_errors(report: ConversionReport) -> None:
    for err in report.errors[:_MAX_LISTED_ERRORS]:
        log(f"malformed {err}")
    if len(report.errors) > _MAX_LISTED_ERRORS:
        log(f"... and {len(report.errors) - _MAX_LISTED_ERRORS} more malformed rows")


def _run_dataset(spec: DatasetSpec, args: argparse.Namespace) -> int:
    t0 = time.monotonic()
    records = _load(spec, args)
    log(f"{spec.name}: {len(records)} source records")
    fraction = getattr(args, "fraction", 1.0)
    seed = getattr(args, "seed", 0)
    rows, report = convert_records(spec, records, template=args.prompt_template, fraction=fraction, seed=seed)
    _report_errors(report)
    if report.errors and args.strict:
        raise CliError(f"{len(report.errors)} malformed rows (--strict): {report.errors[0]}; nothing written")
    if not rows:
        raise CliError(f"no valid rows in {len(records)} source records; nothing written")
    name = spec.output_file(args.prompt_template, fraction, seed)
    path = _write_checked(rows, args.out / name)
    reasons = ", ".join(f"{k}: {v}" for k, v in report.reasons().items()) or "none"
    print(
        f"{spec.name}: wrote {len(rows)} rows ({args.prompt_template} prompts) to {path} "
        f"(source {report.total}, skipped malformed {len(report.errors)} [{reasons}], "
        f"duplicates dropped {report.duplicates}, not sampled {report.sampled_out}) in {time.monotonic() - t0:.1f}s"
    )
    return 0


def _task_overrides(value: str | None) -> dict:
    if not value:
        return {}
    text = (
        Path(value).read_text(encoding="utf-8") if value.endswith(".json") and Path(value).exists() else value
    )
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(f"--task-config is not valid JSON ({exc.msg}): {value[:80]}") from exc
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise CliError('--task-config must be an object of objects, e.g. {"chain_sum": {"max_digits": 1}}')
    return data


def _run_reasoning_gym(args: argparse.Namespace) -> int:
    from data_prep.reasoning_gym_gen import generate, parse_tasks  # imports reasoning-gym: only when asked

    t0 = time.monotonic()
    specs = parse_tasks(args.tasks, _task_overrides(args.task_config))
    log(
        f"reasoning_gym: generating {args.size} train + {args.val_size} val rows over {[s.label for s in specs]}"
    )
    try:
        train, val = generate(specs, args.size, args.seed, args.val_size, template=args.prompt_template)
    except TypeError as exc:  # an unknown config key reaches the reasoning-gym config dataclass
        raise CliError(f"--task-config: {exc}") from exc
    paths = [_write_checked(train, args.out / "train.parquet")]
    if val:
        paths.append(_write_checked(val, args.out / "val.parquet"))
    print(
        f"reasoning_gym: wrote {len(train)} train rows to {paths[0]}"
        + (f" and {len(val)} val rows to {paths[1]}" if val else "")
        + f" in {time.monotonic() - t0:.1f}s"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.dataset == "reasoning_gym":
            return _run_reasoning_gym(args)
        return _run_dataset(SPECS[args.dataset], args)
    except (CliError, ValueError, FileNotFoundError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
