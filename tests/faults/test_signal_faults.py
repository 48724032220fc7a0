"""Stop signals to a launcher's whole process group (issue item 0), once and twice in quick succession.

A terminal's Ctrl-C (SIGINT) and Slurm's ``scancel`` (SIGTERM) reach every process of the launcher's
process group, not only the launcher (tests/e2e/test_stop.py covers the launcher's PID alone). Each case
starts a launcher as a user would (its own session), waits until a training step is under way (for the
evaluation: a pair is being generated), signals the whole group once, or twice 0.2 s apart, and checks:
the launcher exits with 128 + the signal, no process of the run is left (every one
carries a tag in its environment; for a Ray job, its driver and actors on the cluster), and the last
checkpoint is complete (the tracker names a sealed folder) or the finished evaluation pairs are intact.

Launchers: ``main_copo``, ``scripts/quickstart.sh``, ``scripts/study_cpu.sh`` (the SmolLM2 path, on a tiny
model with SmolLM2's tokenizer, and the ``testbed`` path on the study's cached testbed), ``scripts/evaluate.py``
and ``scripts/cluster/submit.sh`` (a job on a head started by start_head.sh).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from recipe.copo.checkpoint_guard import is_complete, read_tracker, step_dir
from tests.e2e.cpu_run import cpu_env
from tests.faults.harness import RUN_TIMEOUT_S, Launched, logged_steps, tiny_run
from tests.faults.records import record
from tests.paths import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.faults, pytest.mark.timeout(RUN_TIMEOUT_S + 600)]

STOP_LIMIT_S = 150.0  # the slowest launcher's stop ladder (SIGINT, then SIGTERM, then SIGKILL) fits in it
SIGNALS = [(signal.SIGTERM, 1), (signal.SIGTERM, 2), (signal.SIGINT, 1), (signal.SIGINT, 2)]
LAUNCHERS = ["main_copo", "quickstart", "study_smollm2", "study_testbed", "evaluate", "submit"]


def record_key(launcher: str, signum: int, times: int) -> str:
    return f"0-{launcher.replace('_', '-')}-{signal.Signals(signum).name.lower()}-x{times}"


RECORD_KEYS = [record_key(launcher, signum, times) for launcher in LAUNCHERS for signum, times in SIGNALS]


@dataclass
class Case:
    """How to start one launcher, when it is mid-step, and what it must leave behind."""

    cmd: list[str]
    env: dict[str, str]
    ready: Callable[[], bool]
    runs: list[Path] = field(default_factory=list)  # run folders: metrics.jsonl + checkpoint root
    ckpt_of: Callable[[Path], Path] = lambda run: run / "checkpoints"
    exit_codes: Callable[[int], set[int]] = lambda signum: {128 + signum}
    extra_check: Callable[[], str] | None = None  # more checks after the stop; returns a note
    leftovers: Callable[[], list[str]] | None = None  # processes of the run the tag cannot see
    context: str = ""  # what the table's reader needs to know about this launcher's numbers


def training(runs: list[Path]) -> Callable[[], bool]:
    return lambda: any(logged_steps(r / "metrics.jsonl") for r in runs)


# --------------------------------------------------------------------------------------------------
# launchers


@pytest.fixture(scope="session")
def small_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from recipe.models.tiny import build_tiny_qwen2

    return build_tiny_qwen2(tmp_path_factory.mktemp("small") / "tiny")


@pytest.fixture(scope="session")
def tiny_smollm2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer random Llama with SmolLM2-135M-Instruct's own tokenizer and chat template, so the
    study's prompts have the lengths the study pins (the byte-level test tokenizer makes them ~3x longer)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    source = subprocess.run(
        [sys.executable, "scripts/prepare_smollm2.py"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()[-1]
    config = AutoConfig.from_pretrained(source)
    config.update(
        {
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "intermediate_size": 128,
            "head_dim": 16,
        }
    )
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("smollm2") / "tiny"
    AutoModelForCausalLM.from_config(config).save_pretrained(out)
    AutoTokenizer.from_pretrained(source).save_pretrained(out)
    for name in ("generation_config.json",):
        if (Path(source) / name).is_file():
            shutil.copy(Path(source) / name, out / name)
    return out


def main_copo_case(tmp_path: Path, inputs) -> Case:
    run = tiny_run(tmp_path / "run", inputs)
    return Case(
        cmd=run.command(40),
        env=cpu_env(),
        ready=training([run.folder]),
        runs=[run.folder],
        ckpt_of=lambda folder: folder / "ckpt",
    )


def quickstart_case(tmp_path: Path, model: Path, cache: Path) -> Case:
    out = tmp_path / "quickstart"
    cmd = ["bash", "scripts/quickstart.sh", "--model", str(model), "--out", str(out), "--steps", "30"]
    cmd += [
        "--train-size",
        "32",
        "--val-size",
        "4",
        "data.max_prompt_length=512",
        "data.max_response_length=16",
    ]
    cmd += ["trainer.save_freq=1", "trainer.val_before_train=false"]
    env = {**cpu_env(), "COPO_CACHE": str(cache), "COPO_VENV": str(Path(sys.executable).parents[1])}
    return Case(
        cmd=cmd,
        env=env,
        ready=training([out]),
        runs=[out],
        context="trainer.save_freq=1 set here (the quickstart saves at its end by default)",
    )


def study_smollm2_case(tmp_path: Path, model: Path, cache: Path) -> Case:
    runs = tmp_path / "runs"
    env = {
        **cpu_env(),
        "COPO_CACHE": str(cache),
        "COPO_VENV": str(Path(sys.executable).parents[1]),
        "MODEL": str(model),
        "RUNS": str(runs),
        "DOCS": str(tmp_path / "docs"),
        "STEPS": "30",
        "SEEDS": "0",
        "METHODS": "grpo,copo_soft",
        "TRAIN_SIZE": "32",
        "VAL_SIZE": "4",
        "TEST_FREQ": "100",
    }
    folders = [runs / "grpo-s0", runs / "copo_soft-s0"]
    return Case(
        cmd=["bash", "scripts/study_cpu.sh"],
        env=env,
        ready=training(folders),
        runs=folders,
        context="the study saves every 2nd step (--save-freq 2): a step logged after the last save is retrained",
    )


def study_testbed_case(tmp_path: Path) -> Case:
    runs = tmp_path / "runs"
    env = {
        **cpu_env(),
        "COPO_VENV": str(Path(sys.executable).parents[1]),
        "RUNS": str(runs),
        "DOCS": str(tmp_path / "docs"),
        "SEEDS": "0",
        "METHODS": "grpo,copo_soft",
    }
    env.pop("COPO_CACHE", None)  # the study's own testbed cache (built once per machine, ~11 min)
    folders = [runs / "grpo-s0", runs / "copo_soft-s0"]
    return Case(
        cmd=["bash", "scripts/study_cpu.sh", "testbed"],
        env=env,
        ready=training(folders),
        runs=folders,
        context="the testbed's runs keep no checkpoint (an interrupted run starts over, by design)",
    )


def write_eval_dataset(path: Path, data_source: str, word: str, rows: int) -> Path:
    import pandas as pd

    records = [
        {
            "prompt": [{"role": "user", "content": f"{word} question {i}: what is {i}+1?"}],
            "data_source": data_source,
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(i + 1)},
            "extra_info": {"split": "test", "index": i},
        }
        for i in range(rows)
    ]
    pd.DataFrame(records).to_parquet(path)
    return path


def evaluate_case(tmp_path: Path, model: Path) -> Case:
    fast = write_eval_dataset(tmp_path / "fast.parquet", "fast_ds", "fast", 4)
    slow = write_eval_dataset(tmp_path / "slow.parquet", "slow_ds", "slow", 4)
    out = tmp_path / "out"
    cmd = [sys.executable, "scripts/evaluate.py", "--model", str(model), "--data", str(fast), str(slow)]
    cmd += [
        "--k",
        "2",
        "--out",
        str(out),
        "--backend",
        "vllm",
        "--vllm-engine",
        "tests.recipe.evaluation.slow_engine:SlowEngine",
    ]
    # two stand-in "GPUs": two worker process groups, each with an engine-core grandchild (as vLLM)
    env = {**cpu_env(), "CUDA_VISIBLE_DEVICES": "0,1", "SLOW_ENGINE_PIDS": str(tmp_path / "engine_pids")}

    def fast_pair_kept() -> str:
        summaries = list(out.glob("pairs/*/fast_ds-*.summary.json"))
        assert summaries and json.loads(summaries[0].read_text())["dataset"] == "fast_ds"
        assert not list(out.glob("pairs/*/slow_ds-*.summary.json")), "the pair in flight must not be stored"
        return "the finished pair stayed on disk, the one in flight was not stored"

    return Case(
        cmd=cmd,
        env=env,
        ready=lambda: bool(list(out.glob("pairs/*/fast_ds-*.summary.json"))),
        extra_check=fast_pair_kept,
    )


# -- a Ray head for submit.sh: one per session, stopped with stop.sh ------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Head:
    env: dict[str, str]
    address: str


@pytest.fixture(scope="session")
def ray_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Head]:
    folder = tmp_path_factory.mktemp("head")
    token = folder / "auth_token"
    token.write_text(os.urandom(32).hex())
    token.chmod(0o600)
    dash = free_port()
    env = {
        **cpu_env(),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "PYTHON": sys.executable,
        "COPO_RAY_STATE_DIR": str(folder / "state"),
        "RAY_AUTH_TOKEN_PATH": str(token),
        "RAY_TEMP_DIR": f"/tmp/rs{os.getpid()}",
        "NODE_IP": "127.0.0.1",
        "RAY_PORT": str(free_port()),
        "DASHBOARD_PORT": str(dash),
        "RAY_CLIENT_PORT": str(free_port()),
        "DASHBOARD_AGENT_PORT": str(free_port()),
        "GPUS_PER_NODE": "1",
        "REQUIRE_CUDA": "0",
        "NUM_CPUS": "16",
        "STOP_TIMEOUT_S": "30",
    }
    for key in (
        "RAY_ADDRESS",
        "ENV_FILE",
        "DRY_RUN",
        "NNODES",
        "MODEL_PATH",
        "DATA_DIR",
        "CKPT_DIR",
        "RAY_AUTH_MODE",
    ):
        env.pop(key, None)
    started = subprocess.run(
        ["bash", "scripts/cluster/start_head.sh", "--", "--object-store-memory=400000000"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert started.returncode == 0, started.stderr[-3000:]
    try:
        yield Head(env=env, address=f"http://127.0.0.1:{dash}")
    finally:
        subprocess.run(
            ["bash", "scripts/cluster/stop.sh"], cwd=REPO, env=env, capture_output=True, timeout=180
        )
        shutil.rmtree(env["RAY_TEMP_DIR"], ignore_errors=True)


def job_processes(marker: str) -> list[str]:
    """Processes whose command line names ``marker`` (the job's own run folder): its driver."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state != "Z" and "pytest" not in cmdline:
            found.append(f"{entry.name} {cmdline[:160]}")
    return found


def job_actors(head: Head, submission_id: str) -> list[str]:
    """Alive Ray actors of the job (Ray's state API, authenticated with the head's token)."""
    code = f"""
import json
from ray.job_submission import JobSubmissionClient
from ray.util.state import list_actors
info = JobSubmissionClient("{head.address}").get_job_info("{submission_id}")
actors = [a.class_name for a in list_actors(address="{head.address}", filters=[("job_id", "=", info.job_id)],
          limit=10000, raise_on_missing_output=False) if a.state == "ALIVE"] if info.job_id else []
print(json.dumps({{"status": str(info.status), "actors": actors}}))
"""
    env = {**head.env, "RAY_AUTH_MODE": "token"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    state = json.loads(proc.stdout.strip().splitlines()[-1])
    return [f"actor {name}" for name in state["actors"]] + (
        [] if "STOPPED" in state["status"] else [f"job {state['status']}"]
    )


def submit_case(tmp_path: Path, inputs, head: Head) -> Case:
    run = tiny_run(tmp_path / "job", inputs)
    submission = f"copo-signal-{os.getpid()}-{int(time.time() * 1000) % 10**8}"
    overrides = run.spec.overrides() + [
        "trainer.total_training_steps=40",
        "ray_kwargs.ray_init.num_cpus=null",
        "ray_kwargs.ray_init.num_gpus=null",
    ]
    env = {**head.env, "RAY_ADDRESS": head.address, "CONFIG": "copo_cpu", "SUBMISSION_ID": submission}
    env["JOB_PYTHON"] = sys.executable
    return Case(
        cmd=["bash", "scripts/cluster/submit.sh", "--", *overrides],
        env=env,
        ready=training([run.folder]),
        runs=[run.folder],
        ckpt_of=lambda folder: folder / "ckpt",
        leftovers=lambda: job_processes(str(run.folder)) + job_actors(head, submission),
        context="the job was STOPPED on the cluster (ray job stop); its driver and actors are gone",
    )


# --------------------------------------------------------------------------------------------------
# the test


@pytest.fixture
def make_case(request, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory):
    def make(launcher: str) -> Case:
        if launcher == "main_copo":
            return main_copo_case(tmp_path, request.getfixturevalue("fault_inputs"))
        if launcher == "quickstart":
            return quickstart_case(
                tmp_path, request.getfixturevalue("small_model"), tmp_path_factory.getbasetemp() / "qs_cache"
            )
        if launcher == "study_smollm2":
            return study_smollm2_case(
                tmp_path,
                request.getfixturevalue("tiny_smollm2"),
                tmp_path_factory.getbasetemp() / "study_cache",
            )
        if launcher == "study_testbed":
            return study_testbed_case(tmp_path)
        if launcher == "evaluate":
            return evaluate_case(tmp_path, request.getfixturevalue("small_model"))
        return submit_case(
            tmp_path, request.getfixturevalue("fault_inputs"), request.getfixturevalue("ray_head")
        )

    return make


def checkpoint_state(case: Case) -> tuple[int | None, str]:
    """(steps lost, what was checked) over the case's runs: every tracker names a complete checkpoint."""
    lost, checked = [], []
    for run in case.runs:
        ckpt = case.ckpt_of(run)
        saved = read_tracker(ckpt)
        logged = logged_steps(run / "metrics.jsonl")
        if saved is not None:
            assert is_complete(step_dir(ckpt, saved)), (
                f"{ckpt}: the tracker names an incomplete global_step_{saved}"
            )
            checked.append(f"global_step_{saved}")
        if logged:
            lost.append(max(logged) - (saved or 0))
    return (max(lost) if lost else None), (
        "complete " + ", ".join(checked) if checked else "no checkpoint yet"
    )


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize(("signum", "times"), SIGNALS, ids=["TERM-x1", "TERM-x2", "INT-x1", "INT-x2"])
def test_group_signal_stops_everything_and_keeps_the_checkpoint(
    make_case, tmp_path: Path, launcher: str, signum: int, times: int
) -> None:
    case = make_case(launcher)
    launched = Launched(case.cmd, tmp_path / "launcher.log", env=case.env)
    try:
        launched.wait_for(case.ready, "a step under way", timeout=RUN_TIMEOUT_S + 300)
        time.sleep(1.0)  # into the next step
        running = launched.processes()
        load = os.getloadavg()[0]
        t0 = time.monotonic()
        launched.signal_group(signum)
        if times == 2:
            time.sleep(0.2)
            with contextlib.suppress(ProcessLookupError):  # all gone: the second signal hit nothing
                launched.signal_group(signum)
        stop_s, left = launched.stopped_after(t0, timeout=STOP_LIMIT_S)
        if case.leftovers is not None and not left:
            deadline = time.monotonic() + 60
            while (left := case.leftovers()) and time.monotonic() < deadline:
                time.sleep(1)
            stop_s = time.monotonic() - t0
    finally:
        launched.cleanup()
    log = launched.text()
    assert not left, (
        f"{launcher}: {len(left)} process(es) left after {signal.Signals(signum).name} x{times}:\n"
        + "\n".join(left[:20])
        + "\n"
        + log[-3000:]
    )
    assert launched.proc.returncode in case.exit_codes(signum), (launched.proc.returncode, log[-4000:])
    steps_lost, checked = checkpoint_state(case)
    note = "; ".join(filter(None, [case.extra_check() if case.extra_check else checked, case.context]))
    name = signal.Signals(signum).name
    record(
        record_key(launcher, signum, times),
        f"{name} {'twice (0.2 s apart)' if times == 2 else 'once'} to {launcher}'s process group",
        f"os.killpg on the launcher's group {'mid-step' if case.runs else 'mid-pair'} ({len(running)} processes running)",
        stop_s=stop_s,
        steps_lost=steps_lost,
        processes_left=len(left),
        resumed_same_next_step=None,
        note=note,
        load_1min=load,
    )
