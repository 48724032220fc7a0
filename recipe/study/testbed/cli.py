"""``scripts/study_cpu.py testbed ...``: the controlled CPU study (docs/STUDY_CPU.md, "Controlled testbed").

    study_cpu.py testbed build                  # tokenizer + SFT policy + data, cached (minutes, once)
    study_cpu.py testbed census                 # step-0 group outcomes at the study's G and sampling
    study_cpu.py testbed run [--seeds 0-7]      # every (seed, method) not finished yet, 2 at a time
    study_cpu.py testbed run --dry-run          # the plan and each run's command
    study_cpu.py testbed summarize              # runs -> docs/study_cpu/testbed/*.csv, summary.md, plots

The workload is pinned in ``recipe/copo/config/testbed_cpu.yaml``; the testbed (task, model, SFT) in
``recipe.study.testbed.build.TestbedSpec``. Runs go to ``runs/study_testbed/`` (ignored by git).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from recipe.files import REPO_ROOT
from recipe.study.methods import DEFAULT_METHODS, parse_methods
from recipe.study.testbed.build import TestbedSpec, ensure_testbed, locate_testbed
from recipe.study.testbed.runs import make_jobs, planned_steps, workload

DEFAULT_RUNS = REPO_ROOT / "runs" / "study_testbed"
DEFAULT_DOCS = REPO_ROOT / "docs" / "study_cpu" / "testbed"
DEFAULT_SEEDS = "0-7"


def parse_seeds(text: str) -> list[int]:
    """``"0-7"`` or ``"0,1,5"`` (or a mix, ``"0-3,8"``) -> sorted distinct seeds."""
    seeds: set[int] = set()
    try:
        for part in filter(None, text.split(",")):
            if "-" in part:
                first, last = (int(x) for x in part.split("-", 1))
                if last < first:
                    raise ValueError(part)
                seeds.update(range(first, last + 1))
            else:
                seeds.add(int(part))
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"--seeds {text!r}: use e.g. 0-7 or 0,1,2 ({err})") from err
    if not seeds or min(seeds) < 0:
        raise argparse.ArgumentTypeError(f"--seeds {text!r}: give one or more non-negative seeds")
    return sorted(seeds)


def _methods(text: str) -> list[str]:
    try:
        return parse_methods(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from err


def cmd_build(args: argparse.Namespace) -> int:
    testbed = ensure_testbed(TestbedSpec(), rebuild=args.rebuild)
    manifest = testbed.manifest()
    print(
        f"[testbed] {testbed.key}: {manifest['parameters'] / 1e6:.2f}M parameters, "
        f"SFT {manifest['build_seconds']:.0f} s, {manifest['train_problems']} train / "
        f"{manifest['val_problems']} val problems"
    )
    print(testbed.root)
    return 0


def cmd_census(args: argparse.Namespace) -> int:
    from recipe.study.census import run_census

    testbed = ensure_testbed(TestbedSpec())
    pinned = workload()
    run_census(
        testbed.model,
        testbed.data,
        args.out / testbed.key,
        args.docs,
        per_task=args.per_task,
        k=int(pinned.actor_rollout_ref.rollout.n),
        max_tokens=int(pinned.data.max_response_length),
        temperature=float(pinned.actor_rollout_ref.rollout.temperature),
        seed=args.seed,
    )
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from recipe.study.driver import run_jobs

    # a dry run shows the plan without building the testbed (minutes of SFT)
    testbed = locate_testbed() if args.dry_run else ensure_testbed(TestbedSpec())
    jobs = make_jobs(testbed, args.methods, args.seeds, args.runs.resolve(), args.steps)
    print(
        f"[study] testbed {testbed.key}: {len(args.methods)} methods x {len(args.seeds)} seeds x "
        f"{planned_steps(args.steps)} steps in {args.runs}"
    )
    failures = run_jobs(jobs, args.parallel, dry_run=args.dry_run)
    return 1 if failures else 0


def cmd_summarize(args: argparse.Namespace) -> int:
    from recipe.study.plots import plot_testbed
    from recipe.study.testbed.analysis import summarize
    from recipe.tracking.plots import setup_matplotlib

    pinned = workload()
    test_freq = int(pinned.trainer.test_freq)
    steps = planned_steps(args.steps)
    note = (
        f"Budget: {steps} steps per run, {int(pinned.data.train_batch_size)} prompts x "
        f"{int(pinned.actor_rollout_ref.rollout.n)} responses per step, greedy validation every "
        f"{test_freq} steps (recipe/copo/config/testbed_cpu.yaml)."
    )
    result = summarize(
        args.runs.resolve(),
        args.docs,
        args.methods,
        args.seeds,
        test_freq,
        threshold_gain=args.threshold_gain,
        budget_note=note,
    )
    plot_testbed(args.docs / "steps.csv", args.docs, setup_matplotlib)
    print((args.docs / "summary.md").read_text())
    print(f"[study] {len(result['runs'])} runs summarized into {args.docs}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="study_cpu.py testbed", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="action", required=True)
    build = sub.add_parser("build", help="build (or find) the cached testbed; prints its folder last")
    build.add_argument("--rebuild", action="store_true", help="build again even when cached")

    census = sub.add_parser(
        "census", help="step-0 group outcomes of the SFT policy (all correct / wrong / mixed)"
    )
    census.add_argument("--per-task", type=int, default=256, help="training prompts per level (half of them)")
    census.add_argument("--seed", type=int, default=0, help="sampling seed")
    census.add_argument("--out", type=Path, default=DEFAULT_RUNS / "census", help="samples (resumable)")
    census.add_argument("--docs", type=Path, default=DEFAULT_DOCS, help="census.csv / census.md")

    plan = argparse.ArgumentParser(add_help=False)
    plan.add_argument("--runs", type=Path, default=DEFAULT_RUNS, help="run folders")
    plan.add_argument("--methods", type=_methods, default=list(DEFAULT_METHODS), help="comma-separated")
    plan.add_argument("--seeds", type=parse_seeds, default=parse_seeds(DEFAULT_SEEDS), help="e.g. 0-7 or 0,1")
    plan.add_argument(
        "--steps", type=int, default=None, help="steps per run (a pilot); default: testbed_cpu.yaml's budget"
    )
    run = sub.add_parser("run", parents=[plan], help="train every (seed, method) not finished yet")
    run.add_argument("--parallel", type=int, default=2, help="runs at once, one thread each")
    run.add_argument("--dry-run", action="store_true", help="print the plan and commands only")
    summ = sub.add_parser("summarize", parents=[plan], help="CSVs, summary.md and plots")
    summ.add_argument("--docs", type=Path, default=DEFAULT_DOCS, help="output folder")
    summ.add_argument(
        "--threshold-gain",
        type=float,
        default=None,
        help="steps-to-threshold: accuracy above step 0 to reach (default: analysis.THRESHOLD_GAIN)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "threshold_gain", 0) is None:
        from recipe.study.testbed.analysis import THRESHOLD_GAIN

        args.threshold_gain = THRESHOLD_GAIN
    if getattr(args, "steps", None) is not None and args.steps < 1:
        raise SystemExit(f"study_cpu.py testbed: --steps must be >= 1, got {args.steps}")
    commands = {"build": cmd_build, "census": cmd_census, "run": cmd_run, "summarize": cmd_summarize}
    from recipe.study.driver import dispatch

    return dispatch(commands, args.action, args)
