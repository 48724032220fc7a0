"""The cluster scripts' generated commands, checked without a cluster (and one real local Ray round trip).

* submit.sh / slurm_copo_7b.sbatch / gpu_smoke.sh dry runs print the exact `ray job submit` (or
  training) command; it is parsed, and the job's own command (config name + overrides) with the job's
  own environment (the runtime env's env_vars) must compose and validate with the paper's values
  (SPEC section 7) and the cluster shape the scripts asked for; what submit.sh validates is what it
  submits, and settings never travel through the environment.
* Missing paths / variables fail with a message naming them.
* A real CPU Ray head is started by start_head.sh, a job goes through submit.sh to it, and stop.sh
  stops exactly the head's processes (a bystander survives).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from recipe import verl_pin
from recipe.copo import validate_job
from tests.paths import REPO

ROOT = REPO
CLUSTER = ROOT / "scripts" / "cluster"


def run(
    cmd: list[str], env: dict[str, str] | None = None, timeout: int = 180, **kw
) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHON": sys.executable, **(env or {})}
    # A HOME of its own: a head started here makes its auth token there, never in the user's ~/.ray.
    if "HOME" not in (env or {}):
        full_env["HOME"] = tempfile.mkdtemp(prefix="copo_home_")
    full_env["PATH"] = f"{Path(sys.executable).parent}:{full_env['PATH']}"
    for key in (
        "RAY_ADDRESS",
        "ENV_FILE",
        "DRY_RUN",
        "NNODES",
        "GPUS_PER_NODE",
        "CONFIG",
        "MODEL_PATH",
        "DATA_DIR",
        "CKPT_DIR",
        "RAY_AUTH_MODE",
        "RAY_AUTH_TOKEN",
        "RAY_AUTH_TOKEN_PATH",
    ):
        if key not in (env or {}):
            full_env.pop(key, None)
    return subprocess.run(
        cmd, cwd=kw.pop("cwd", ROOT), env=full_env, capture_output=True, text=True, timeout=timeout, **kw
    )


# ---------------------------------------------------------------------------------------------
# parsers


def test_parse_trainer_command_handles_quoting_env_prefix_and_config_name() -> None:
    line = (
        "HYDRA_FULL_ERROR=1 /opt/venv/bin/python -m recipe.copo.main_copo --config-name copo_cpu "
        "trainer.logger=\\[\\\"console\\\"\\] 'data.val_files=[/a b/x.parquet]' +x.y=1"
    )
    call = validate_job.parse_trainer_command(shlex.split(line))
    assert call.config_name == "copo_cpu"
    assert call.overrides == ['trainer.logger=["console"]', "data.val_files=[/a b/x.parquet]", "+x.y=1"]
    assert (
        validate_job.parse_trainer_command(["python3", "-m", "recipe.copo.main_copo", "a=1"]).config_name
        == "copo_trainer"
    )
    with pytest.raises(ValueError, match="recipe.copo.main_copo"):
        validate_job.parse_trainer_command(shlex.split("python3 -m verl.trainer.main_ppo a=1"))
    with pytest.raises(ValueError, match="--oops"):
        validate_job.parse_trainer_command(shlex.split("python3 -m recipe.copo.main_copo --oops a=1"))


def test_parse_submit_line() -> None:
    line = shlex.join(
        [
            "/v/bin/ray",
            "job",
            "submit",
            "--address=http://h:8265",
            '--runtime-env-json={"env_vars":{"DATA_DIR":"/d x"}}',
            "--no-wait",
            "--",
            "python",
            "-m",
            "recipe.copo.main_copo",
            "a=1 2",
        ]
    )
    call = validate_job.parse_submit_line(line)
    assert call.options["address"] == "http://h:8265" and call.options["no-wait"] is True
    assert call.entrypoint == ["python", "-m", "recipe.copo.main_copo", "a=1 2"]
    assert call.env_vars == {"DATA_DIR": "/d x"}
    with pytest.raises(ValueError, match="no `--`"):
        validate_job.parse_submit_line("ray job submit --address=x bash a.sh")
    with pytest.raises(ValueError, match="not a `ray job submit`"):
        validate_job.parse_submit_line("ray start --head")


# ---------------------------------------------------------------------------------------------
# submit.sh -> run script -> config check


def submit_dry_run(env: dict[str, str], *overrides: str) -> validate_job.SubmitCall:
    proc = run(["bash", str(CLUSTER / "submit.sh"), "--dry-run", "--", *overrides], env=env)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1, f"dry run must print exactly one command line, got:\n{proc.stdout}"
    return validate_job.parse_submit_line(lines[0])


def validate_entrypoint(call: validate_job.SubmitCall):
    """The job's command with the job's env_vars, composed, resolved and validated as the job will."""
    assert Path(str(call.options["working-dir"])).is_dir()
    _, config, _ = validate_job.compose_job(call.entrypoint, call.env_vars)
    return config


PATHS = {"DATA_DIR": "/shared/data/copo", "CKPT_DIR": "/shared/ckpts"}


@pytest.mark.parametrize(
    ("config_name", "n", "k", "b"),
    [
        ("copo_qwen2.5_7b", 8, 5.0, 1.0),
        ("copo_qwen2.5_3b", 6, 20.0, 1.5),
    ],
)
def test_submit_command_runs_a_valid_paper_config(config_name: str, n: int, k: float, b: float) -> None:
    env = {
        **PATHS,
        "RAY_ADDRESS": "http://10.1.2.3:8265",
        "NNODES": "2",
        "GPUS_PER_NODE": "8",
        "CONFIG": config_name,
        "SUBMISSION_ID": "copo-test",
        "MODEL_PATH": "/from/env",
        "WANDB_API_KEY": "secret",
        "COPO_K": "99",  # an old settings variable: must reach neither the job nor its config
    }
    call = submit_dry_run(env, "trainer.total_training_steps=3")
    assert call.options["address"] == "http://10.1.2.3:8265"
    assert call.options["submission-id"] == "copo-test"
    assert Path(str(call.options["working-dir"])) == ROOT
    assert call.entrypoint[0] == sys.executable  # PYTHON is the job's interpreter too
    assert call.entrypoint[1:5] == ["-m", "recipe.copo.main_copo", "--config-name", config_name]
    # paths and shape exported locally reach the job; secrets and settings never do
    assert {k: call.env_vars[k] for k in ("MODEL_PATH", "NNODES", "GPUS_PER_NODE", *PATHS)} == {
        "MODEL_PATH": "/from/env",
        "NNODES": "2",
        "GPUS_PER_NODE": "8",
        **PATHS,
    }
    assert "WANDB_API_KEY" not in call.env_vars and "COPO_K" not in call.env_vars
    assert call.env_vars["NCCL_DEBUG"] == "WARN"  # the static runtime env is part of it

    config = validate_entrypoint(call)
    # The cluster shape the submit asked for, the user's overrides, and the paper row (SPEC 7).
    assert (config.trainer.nnodes, config.trainer.n_gpus_per_node) == (2, 8)
    assert config.actor_rollout_ref.model.path == "/from/env"
    assert config.trainer.total_training_steps == 3
    assert config.trainer.default_local_dir.startswith("/shared/ckpts/copo/")
    assert config.algorithm.adv_estimator == "copo"
    assert config.actor_rollout_ref.actor.policy_loss.loss_mode == "copo"
    assert config.actor_rollout_ref.rollout.n == n
    assert (float(config.algorithm.copo.k), float(config.algorithm.copo.b)) == (k, b)
    assert config.algorithm.copo.blend_mode == "soft_with_zero"
    assert config.data.train_batch_size == 512
    assert config.actor_rollout_ref.actor.ppo_mini_batch_size == 32
    assert config.actor_rollout_ref.rollout.name == "vllm"


def test_slurm_dry_run_submits_the_7b_job_over_all_nodes() -> None:
    env = {
        **PATHS,
        "DRY_RUN": "1",
        "DRY_RUN_NODES": "gpu-a gpu-b gpu-c gpu-d",
        "HEAD_IP": "10.9.9.9",
        "GPUS_PER_NODE": "8",
        "SUBMISSION_ID": "copo-slurm-test",
    }
    proc = run(["bash", str(CLUSTER / "slurm_copo_7b.sbatch"), "trainer.total_training_steps=2"], env=env)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip() and not ln.startswith("#")]
    head, workers, submit = lines[0], lines[1:-1], lines[-1]
    assert "-w gpu-a" in head and "start_head.sh" in head and "NODE_IP=10.9.9.9" in head and "BLOCK=1" in head
    assert [w.split("-w ")[1].split()[0] for w in workers] == ["gpu-b", "gpu-c", "gpu-d"]
    assert all("start_worker.sh" in w for w in workers)
    call = validate_job.parse_submit_line(submit)
    assert call.options["address"] == "http://10.9.9.9:8265"
    assert call.options["no-wait"] is True  # the batch script follows the job itself (follow_job)
    assert validate_job.parse_trainer_command(call.entrypoint).config_name == "copo_qwen2.5_7b"
    config = validate_entrypoint(call)
    assert (config.trainer.nnodes, config.trainer.n_gpus_per_node) == (4, 8)
    assert config.trainer.total_training_steps == 2
    assert (config.actor_rollout_ref.rollout.n, float(config.algorithm.copo.k)) == (8, 5.0)


def test_slurm_refuses_a_loopback_head_address() -> None:
    # `hostname --ip-address` answers 127.0.1.1 on Debian/Ubuntu images: workers would never join.
    env = {"DRY_RUN": "1", "DRY_RUN_NODES": "gpu-a gpu-b", "HEAD_IP": "127.0.1.1"}
    proc = run(["bash", str(CLUSTER / "slurm_copo_7b.sbatch")], env=env)
    assert proc.returncode != 0 and "HEAD_IP=127.0.1.1 is a loopback address" in proc.stderr, proc.stderr


def test_submit_validation_rejects_a_cluster_shape_the_batch_does_not_divide() -> None:
    # 512 prompts x 8 responses = 4096 sequences cannot be split over 3 nodes x 8 GPUs: submit.sh's
    # local validation must refuse before anything reaches a cluster (no Ray needed: it fails first).
    proc = run(
        ["bash", str(CLUSTER / "submit.sh")],
        env={**PATHS, "RAY_ADDRESS": "http://127.0.0.1:9", "NNODES": "3", "GPUS_PER_NODE": "8"},
        timeout=300,
    )
    assert proc.returncode != 0
    assert "divisible" in proc.stderr and "config validation failed" in proc.stderr, proc.stderr


def test_submit_validation_names_a_missing_path_variable() -> None:
    proc = run(
        ["bash", str(CLUSTER / "submit.sh")],
        env={"CKPT_DIR": "/shared/ckpts", "RAY_ADDRESS": "http://127.0.0.1:9"},
        timeout=300,
    )
    assert proc.returncode != 0
    assert "DATA_DIR is not set for the job" in proc.stderr, proc.stderr


def fake_ray(bin_dir: Path, record: Path, script: str = "") -> Path:
    """A `ray` on PATH that records its arguments (and environment) and exits 0, or runs ``script``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    python = bin_dir / "python"  # a wrapper, not a symlink: the venv must stay active
    python.write_text(f'#!/usr/bin/env bash\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    ray = bin_dir / "ray"
    ray.write_text(
        "#!/usr/bin/env bash\n"
        f'printf "%s\\n" "$@" > {record}\n'
        f"env > {record}.env\n" + (script or "exit 0\n")
    )
    ray.chmod(0o755)
    return ray


def test_what_submit_validates_is_what_it_submits(tmp_path: Path) -> None:
    # The old bug: GCPO_ALPHA=2 validated alpha=2 while the job trained alpha=1. Now submit.sh
    # validates the very command and env_vars it hands to `ray job submit` (a recording fake here),
    # and settings exported in the shell reach neither.
    record = tmp_path / "submitted"
    fake_ray(tmp_path / "bin", record)
    token = tmp_path / "auth_token"
    token.write_text(os.urandom(32).hex())
    token.chmod(0o600)
    env = {
        **PATHS,
        "RAY_AUTH_TOKEN_PATH": str(token),
        "NO_WAIT": "1",  # the recording fake ray keeps only its last call: the submission
        "PYTHON": str(tmp_path / "bin" / "python"),
        "CONFIG": "gcpo_qwen2.5_7b",
        "NNODES": "2",
        "GCPO_ALPHA": "2",
        "COPO_K": "9",
        "GPUS_PER_NODE": "4",
    }
    proc = run(["bash", str(CLUSTER / "submit.sh"), "--", "algorithm.gcpo.beta=0.5"], env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    checked = re.search(r"\[validate_job\] OK (.*)", proc.stderr)
    assert checked, proc.stderr
    argv = record.read_text().splitlines()
    # the submission is authenticated through the token file, and the token never shows on a command line
    seen = dict(line.split("=", 1) for line in Path(f"{record}.env").read_text().splitlines() if "=" in line)
    assert seen["RAY_AUTH_MODE"] == "token" and seen["RAY_AUTH_TOKEN_PATH"] == str(token)
    assert token.read_text() not in "\n".join(argv) + proc.stderr
    call = validate_job.parse_submit_line(shlex.join(["ray", *argv]))
    # Compose the submitted job from scratch, in an environment holding only what the job gets.
    job_call, config, read = validate_job.compose_job(call.entrypoint, call.env_vars)
    assert job_call.config_name == "gcpo_qwen2.5_7b" and job_call.overrides == ["algorithm.gcpo.beta=0.5"]
    assert (config.algorithm.gcpo.alpha, config.algorithm.gcpo.beta) == (1.0, 0.5)
    assert float(config.algorithm.copo.k) == 5.0
    assert (config.trainer.nnodes, config.trainer.n_gpus_per_node) == (2, 4)
    assert set(read) == {"DATA_DIR", "CKPT_DIR", "NNODES", "GPUS_PER_NODE"}
    assert validate_job._report(job_call, config, read).split("] OK ", 1)[1] == checked.group(1)


def _as_from_a_background_job() -> None:
    """What ``cmd &`` in a script (or ``nohup cmd &``) gives the command: SIGINT and SIGQUIT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGQUIT, signal.SIG_IGN)


@pytest.mark.parametrize(("target", "launch"), [("group", "terminal"), ("pid", "terminal"), ("group", "background")])
@pytest.mark.parametrize(("signum", "times"), [(signal.SIGTERM, 1), (signal.SIGINT, 2)])
def test_a_stop_signal_stops_the_submitted_job(
    tmp_path: Path, target: str, launch: str, signum: int, times: int
) -> None:
    # Ctrl-C / scancel reach submit.sh's whole group, `timeout` / `docker stop` its PID alone; either way,
    # once or twice, the job it submitted is stopped on the cluster (not left training) and it exits
    # 128 + the signal. A fake `ray`: the job never ends on its own, `ray job stop` is recorded.
    # Launched from a background job, submit.sh starts with SIGINT ignored, which bash cannot trap:
    # scripts/default_signals.sh restarts it with the default, and the group SIGINT stops it the same way.
    calls = tmp_path / "calls"
    script = (
        f'echo "$1 $2 ${{@: -1}}" >> {calls}\n'
        'case "$2" in\n'
        "  logs) echo job-running; exec sleep 600 ;;\n"
        '  status) echo "Status for job: RUNNING" ;;\n'
        "esac\n"
    )
    fake_ray(tmp_path / "bin", tmp_path / "args", script)
    token = tmp_path / "auth_token"
    token.write_text(os.urandom(32).hex())
    token.chmod(0o600)
    env = {
        **os.environ,
        **PATHS,
        "HOME": str(tmp_path),
        "PYTHON": str(tmp_path / "bin" / "python"),
        "RAY_AUTH_TOKEN_PATH": str(token),
        "RAY_ADDRESS": "http://127.0.0.1:9",
        "VALIDATE": "0",
        "SUBMISSION_ID": "copo-sig-test",
        "COPO_TEST_TAG": str(tmp_path),
    }
    env.pop("RAY_AUTH_MODE", None)
    log = (tmp_path / "submit.log").open("w")
    proc = subprocess.Popen(
        ["bash", str(CLUSTER / "submit.sh")],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=log,
        start_new_session=True,
        preexec_fn=_as_from_a_background_job if launch == "background" else None,  # noqa: PLW1509
    )
    try:
        deadline = time.monotonic() + 120
        while not (calls.is_file() and " logs " in calls.read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "submit.log").read_text()
            time.sleep(0.2)
        time.sleep(0.5)
        for _ in range(times):
            if target == "group":
                os.killpg(proc.pid, signum)
            else:
                proc.send_signal(signum)
            time.sleep(0.2)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = (tmp_path / "submit.log").read_text()
    assert rc == 128 + signum, text
    assert "job stop copo-sig-test" in calls.read_text(), calls.read_text()
    assert "stopping job copo-sig-test" in text

    def tagged() -> dict[int, str]:
        found = {}
        for entry in Path("/proc").glob("[0-9]*"):
            try:
                ours = f"COPO_TEST_TAG={tmp_path}".encode() in (entry / "environ").read_bytes().split(b"\0")
                if ours and (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z":
                    found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
        return found

    # the SIGTERM'd log stream may take a moment to exit: poll (a bound, not a fixed sleep)
    deadline = time.monotonic() + 30
    while (left := tagged()) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:  # never leave the fake log stream behind, whatever the assertion says
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"submit.sh left its log stream running: {left}"


def test_forward_list_is_exactly_what_the_configs_read() -> None:
    # One forward list (common.sh) for submit.sh and the start scripts; it must name every variable a
    # shipped config reads, and nothing else (a path added to a YAML must be forwarded too).
    proc = run(["bash", "-c", f"source {CLUSTER / 'common.sh'} && echo $COPO_JOB_ENV_VARS"])
    forwarded = set(proc.stdout.split())
    read = set()
    for yaml_file in (ROOT / "recipe" / "copo" / "config").rglob("*.yaml"):
        read |= set(validate_job.ENV_INTERPOLATION.findall(yaml_file.read_text()))
    assert forwarded == read == {"MODEL_PATH", "DATA_DIR", "CKPT_DIR", "NNODES", "GPUS_PER_NODE"}


def test_ray_daemons_never_inherit_a_job_variable(tmp_path: Path) -> None:
    # A node's own DATA_DIR/CKPT_DIR (e.g. from its env file) must not reach a job: the job would
    # read a value submit.sh never validated.
    record = tmp_path / "ray_args"
    fake_ray(tmp_path / "bin", record, 'echo "fake ray failed" >&2\nexit 1\n')
    env = {
        **PATHS,
        "MODEL_PATH": "/m",
        "PYTHON": str(tmp_path / "bin" / "python"),
        "SKIP_ENV_CHECK": "1",
        "RAY_START_ATTEMPTS": "1",
        "COPO_RAY_STATE_DIR": str(tmp_path / "state"),
        "RAY_TEMP_DIR": f"/tmp/rd{os.getpid()}",
        "NODE_IP": "127.0.0.1",
        "GPUS_PER_NODE": "0",
        "HF_HOME": "/keep/me",
    }
    run(["bash", str(CLUSTER / "start_head.sh")], env=env, timeout=120)
    seen = dict(line.split("=", 1) for line in Path(f"{record}.env").read_text().splitlines() if "=" in line)
    assert not {"MODEL_PATH", "DATA_DIR", "CKPT_DIR", "NNODES", "GPUS_PER_NODE"} & set(seen)
    assert seen["HF_HOME"] == "/keep/me"  # the node's other settings still reach Ray
    shutil.rmtree(env["RAY_TEMP_DIR"], ignore_errors=True)


def test_node_ip_detection_skips_loopback(tmp_path: Path) -> None:
    # `hostname -I` first answering a loopback address must not make the head advertise it; with no
    # other address the start script fails naming NODE_IP. (Fake `ip`/`hostname`: nothing is sent.)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tools = {
        "ip": "exit 1\n",  # no `ip`: detection falls through to hostname -I
        "hostname": 'if [ "$1" = -I ]; then echo "$FAKE_ADDRESSES"; else echo vm; fi\n',
    }
    for name, body in tools.items():
        (bin_dir / name).write_text("#!/usr/bin/env bash\n" + body)
        (bin_dir / name).chmod(0o755)
    base = {"PATH": f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}", "GPUS_PER_NODE": "0"}
    env = {**base, "FAKE_ADDRESSES": "127.0.1.1 10.20.30.40"}
    proc = run(["bash", str(CLUSTER / "start_head.sh"), "--dry-run"], env=env)
    assert proc.returncode == 0, proc.stderr
    assert "--node-ip-address=10.20.30.40" in proc.stdout
    proc = run(["bash", str(CLUSTER / "start_head.sh"), "--dry-run"], env={**base, "FAKE_ADDRESSES": "127.0.1.1"})
    assert proc.returncode != 0 and "non-loopback" in proc.stderr and "NODE_IP" in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("said", "status"),
    [  # what Ray 2.60's `ray job status` writes (dashboard/modules/job/cli.py, _log_job_status), on stderr
        ("Job 'job1' succeeded", "SUCCEEDED"),
        ("Job 'job1' was stopped", "STOPPED"),
        ("Job 'job1' failed\nStatus message: boom", "FAILED"),
        ("Status for job 'job1': RUNNING", "RUNNING"),
        ("Status for job 'job1': PENDING", "PENDING"),
        ("could not reach the head", ""),
    ],
)
def test_job_status_reads_what_ray_writes(tmp_path: Path, said: str, status: str) -> None:
    fake_ray(tmp_path / "bin", tmp_path / "args", f"printf '%s\\n' {shlex.quote(said)} >&2\n")
    proc = run(
        ["bash", "-c", f"source {CLUSTER / 'common.sh'}; job_status http://h:8265 job1"],
        env={"PYTHON": str(tmp_path / "bin" / "python")},
    )
    assert proc.returncode == 0 and proc.stdout.strip() == status, (proc.stdout, proc.stderr)


@pytest.mark.parametrize(("final", "expected_rc"), [("SUCCEEDED", 0), ("FAILED", 1)])
def test_a_dropped_log_stream_does_not_end_the_job_wait(tmp_path: Path, final: str, expected_rc: int) -> None:
    # Under Slurm the batch script lives as long as follow_job: a log stream that exits non-zero while
    # the job still runs must be reopened, and only the job's final status decides the exit code.
    calls = tmp_path / "calls"
    script = (
        f'echo "$1 $2" >> {calls}\n'
        'if [ "$2" = logs ]; then echo "stream dropped" >&2; exit 1; fi\n'
        f'n=$(grep -c status {calls})\n'
        f'if [ "$n" -lt 2 ]; then echo "Status for job: RUNNING"; else echo "Status for job: {final}"; fi\n'
    )
    fake_ray(tmp_path / "bin", tmp_path / "args", script)
    env = {"PYTHON": str(tmp_path / "bin" / "python"), "FOLLOW_RETRY_S": "0"}
    proc = run(
        ["bash", "-c", f"set -euo pipefail; source {CLUSTER / 'common.sh'}; follow_job http://h:8265 job1"],
        env=env,
    )
    assert proc.returncode == expected_rc, proc.stderr
    assert calls.read_text().split() == ["job", "logs", "job", "status", "job", "logs", "job", "status"]
    assert f"job job1 {final}" in proc.stderr


def test_gpu_smoke_dry_run_is_a_valid_two_step_single_gpu_config(tmp_path: Path) -> None:
    model = tmp_path / "qwen0.5b"
    model.mkdir()
    (model / "config.json").write_text("{}")
    proc = run(
        ["bash", "scripts/gpu_smoke.sh"],
        env={"DRY_RUN": "1", "MODEL_PATH": str(model), "OUT_DIR": str(tmp_path / "out")},
    )
    assert proc.returncode == 0, proc.stderr
    train_line, eval_line = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    call = validate_job.parse_trainer_command(shlex.split(train_line))
    from recipe.copo.config_check import compose_and_validate

    config = compose_and_validate(call.overrides, config_name=call.config_name)
    assert (config.trainer.nnodes, config.trainer.n_gpus_per_node) == (1, 1)
    assert config.trainer.total_training_steps == 2 and config.trainer.save_freq == 2
    assert config.actor_rollout_ref.rollout.name == "vllm"
    assert config.actor_rollout_ref.rollout.tensor_model_parallel_size == 1
    assert config.actor_rollout_ref.model.path == str(model)  # local folder: used as is, offline
    assert config.algorithm.adv_estimator == "copo"
    assert config.trainer.default_local_dir == str(tmp_path / "out" / "ckpt")
    # The evaluation reads the checkpoint the training saves at its last step.
    eval_argv = shlex.split(eval_line)
    assert eval_argv[1] == "scripts/evaluate.py" and (ROOT / eval_argv[1]).is_file()
    assert eval_argv[eval_argv.index("--model") + 1] == str(tmp_path / "out" / "ckpt" / "global_step_2")
    assert eval_argv[eval_argv.index("--k") + 1] == "2"


# ---------------------------------------------------------------------------------------------
# errors name what is missing


@pytest.mark.parametrize(
    ("cmd", "env", "needle"),
    [
        (
            ["scripts/cluster/submit.sh", "--dry-run"],
            {"CONFIG": "copo_nope"},
            "CONFIG='copo_nope' is not a config of recipe/copo/config/",
        ),
        (
            ["scripts/cluster/submit.sh", "--dry-run"],
            {"RUNTIME_ENV": "/nonexistent/rt.yaml"},
            "RUNTIME_ENV='/nonexistent/rt.yaml'",
        ),
        (["scripts/cluster/submit.sh", "--dry-run"], {"NNODES": "two"}, "NNODES='two'"),
        (
            ["scripts/cluster/submit.sh", "--run-script", "recipe/copo/run_copo_qwen2.5_7b.sh", "--dry-run"],
            {},
            "--config NAME",
        ),
        (["scripts/cluster/start_worker.sh", "--dry-run"], {}, "HEAD_ADDRESS is not set"),
        (["scripts/cluster/start_worker.sh", "--dry-run"], {"HEAD_ADDRESS": "10.0.0.1"}, "IP:PORT"),
        (
            ["scripts/cluster/start_head.sh", "--dry-run", "--env-file", "/nonexistent/c.env"],
            {},
            "/nonexistent/c.env",
        ),
        (["scripts/cluster/start_head.sh", "--dry-run"], {"GPUS_PER_NODE": "-1"}, "GPUS_PER_NODE='-1'"),
        (["scripts/cluster/stop.sh", "--bogus"], {}, "unknown argument '--bogus'"),
        (
            ["scripts/cluster/slurm_copo_7b.sbatch"],
            {"SLURM_JOB_NODELIST": ""},
            "not inside a Slurm allocation",
        ),
        (
            ["scripts/gpu_smoke.sh"],
            {"MODEL_PATH": "/nonexistent/model", "DRY_RUN": "1"},
            "MODEL_PATH='/nonexistent/model'",
        ),
    ],
)
def test_clear_errors(cmd: list[str], env: dict[str, str], needle: str) -> None:
    proc = run(["bash", *cmd], env={"NODE_IP": "127.0.0.1", **env})
    assert proc.returncode != 0
    assert needle in proc.stderr, proc.stderr


def test_env_file_loads_and_environment_wins(tmp_path: Path) -> None:
    env_file = tmp_path / "c.env"
    env_file.write_text(
        "# comment\nGPUS_PER_NODE=4\nexport RAY_PORT=7000\nNUM_CPUS=12\nDASHBOARD_PORT=9000\n"
    )
    proc = run(
        ["bash", str(CLUSTER / "start_head.sh"), "--dry-run", "--env-file", str(env_file)],
        env={"NODE_IP": "10.0.0.5", "DASHBOARD_PORT": "9999"},
    )
    assert proc.returncode == 0, proc.stderr
    argv = shlex.split(proc.stdout.strip())
    assert argv[1:3] == ["start", "--head"]
    for flag in (
        "--num-gpus=4",
        "--port=7000",
        "--num-cpus=12",
        "--node-ip-address=10.0.0.5",
        "--dashboard-port=9999",
        "--dashboard-host=10.0.0.5",  # the node's cluster address, never 0.0.0.0 by default
    ):
        assert flag in argv, (flag, argv)
    bad = tmp_path / "bad.env"
    bad.write_text("not an assignment\n")
    proc = run(
        ["bash", str(CLUSTER / "start_head.sh"), "--dry-run", "--env-file", str(bad)],
        env={"NODE_IP": "1.2.3.4"},
    )
    assert proc.returncode != 0 and "expected KEY=VALUE" in proc.stderr


def test_worker_dry_run_command() -> None:
    proc = run(
        ["bash", str(CLUSTER / "start_worker.sh"), "--dry-run"],
        env={"HEAD_ADDRESS": "10.0.0.1:6379", "GPUS_PER_NODE": "8", "NODE_IP": "10.0.0.2", "BLOCK": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    argv = shlex.split(proc.stdout.strip())
    assert argv[1] == "start" and "--head" not in argv
    for flag in ("--address=10.0.0.1:6379", "--num-gpus=8", "--node-ip-address=10.0.0.2", "--block"):
        assert flag in argv


def test_check_env_pin(tmp_path: Path) -> None:
    """scripts/cluster/check_env.py, run as every node runs it (it must work before the project is
    installed, so it loads recipe/verl_pin.py, the one reader of the pin, by path)."""

    def check_env(*args: str) -> int:
        return subprocess.run(
            [sys.executable, str(CLUSTER / "check_env.py"), *args], capture_output=True, text=True, timeout=120
        ).returncode

    pin_file = tmp_path / "REQUIRED_VERL.txt"
    pin_file.write_text("# a comment naming 1.2.3 is ignored\nverl==0.9.1\n")
    assert verl_pin.required_verl(pin_file) == "0.9.1"
    assert check_env("--required-file", str(pin_file)) == 0  # this venv has verl 0.9.1
    pin_file.write_text("verl==0.0.1\n")
    assert check_env("--required-file", str(pin_file)) == 1
    pin_file.write_text("# no pin here\nverl>=0.9\n")
    assert check_env("--required-file", str(pin_file)) == 2
    assert check_env("--required-file", str(tmp_path / "missing.txt")) == 2
    assert verl_pin.required_verl(ROOT / "recipe" / "copo" / "REQUIRED_VERL.txt") == "0.9.1"
    assert '"recipe" / "verl_pin.py"' in (CLUSTER / "check_env.py").read_text()


# ---------------------------------------------------------------------------------------------
# a real (CPU) Ray head: start, submit through submit.sh, stop only what was started


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def settle(done: Callable[[], bool], timeout_s: float = 30.0) -> None:
    """Poll ``done`` until true or ``timeout_s`` passes (the caller then asserts): a bound, not a guessed sleep."""
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        time.sleep(0.2)


def test_head_submit_stop_round_trip(tmp_path: Path) -> None:
    temp_dir = f"/tmp/rc{os.getpid()}"  # short: Ray's socket paths must stay < 108 bytes
    state_dir = tmp_path / "state"
    dash = free_port()
    # Token auth as Ray >= 2.5x sets it up, but with a private token (not ~/.ray/auth_token).
    token = tmp_path / "auth_token"
    token.write_text(os.urandom(32).hex())
    token.chmod(0o600)  # start_head.sh refuses a token others may read
    env = {
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(token),
        "COPO_RAY_STATE_DIR": str(state_dir),
        "RAY_TEMP_DIR": temp_dir,
        "NODE_IP": "127.0.0.1",
        "RAY_PORT": str(free_port()),
        "DASHBOARD_PORT": str(dash),
        "RAY_CLIENT_PORT": str(free_port()),
        "DASHBOARD_AGENT_PORT": str(free_port()),
        "GPUS_PER_NODE": "0",
        "NUM_CPUS": "2",
        "STOP_TIMEOUT_S": "30",
    }
    # A bystander Ray-looking process that stop.sh must leave alone (like another user's Ray).
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "raylet", "/tmp/ray"])
    try:
        # A leftover record from a run whose processes are gone (reboot, ended Slurm step) is stale.
        state_dir.mkdir()
        stale = state_dir / f"{socket.gethostname()}.head.state"
        stale.write_text(f'ROLE=head\nRAY_TEMP_DIR={temp_dir}\nRAY_CLIENT_PORT=\nPIDS="{2**22 + 1}"\n')
        proc = run(["bash", str(CLUSTER / "start_head.sh")], env=env, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "removing stale state file" in proc.stderr
        states = list(state_dir.glob("*.head.state"))
        assert len(states) == 1
        fields = dict(line.split("=", 1) for line in states[0].read_text().splitlines())
        pids = [int(p) for p in fields["PIDS"].strip('"').split()]
        assert fields["RAY_TEMP_DIR"] == temp_dir and len(pids) >= 3 and all(alive(p) for p in pids)
        assert bystander.pid not in pids
        # a second head from the same script is refused while the first is recorded
        again = run(["bash", str(CLUSTER / "start_head.sh")], env={**env, "SKIP_ENV_CHECK": "1"})
        assert again.returncode != 0 and "run stop.sh first" in again.stderr

        # A real job through submit.sh: its own working dir and runtime env, and a stand-in for the
        # job's interpreter (JOB_PYTHON) that reports what the job received.
        work = tmp_path / "work"
        (work / "jobs").mkdir(parents=True)
        hello = work / "jobs" / "hello.sh"
        hello.write_text(
            '#!/usr/bin/env bash\necho "job-args:$*"\necho "cwd-has:$(ls jobs)"\n'
            'echo "job-env:${COPO_TEST_VAR:-}:${DATA_DIR:-}:${COPO_K:-}"\n'
        )
        hello.chmod(0o755)
        runtime_env = tmp_path / "rt.yaml"
        runtime_env.write_text("env_vars:\n  COPO_TEST_VAR: '1'\n")
        submit_env = {
            "RAY_ADDRESS": f"http://127.0.0.1:{dash}",
            "WORKING_DIR": str(work),
            "RUNTIME_ENV": str(runtime_env),
            "JOB_PYTHON": "./jobs/hello.sh",
            "CONFIG": "copo_cpu",
            "VALIDATE": "0",
            "DATA_DIR": "/data",
            "COPO_K": "1",
        }
        # RAY_AUTH_MODE unset on the client: submit.sh must find the token and enable it.
        job = run(
            ["bash", str(CLUSTER / "submit.sh"), "--", "x=1"],
            env={**submit_env, "RAY_AUTH_TOKEN_PATH": str(token)},
            timeout=300,
        )
        assert job.returncode == 0, job.stdout + job.stderr
        assert "job-args:-m recipe.copo.main_copo --config-name copo_cpu x=1" in job.stdout
        # the runtime env's variables and the forwarded path reach the job; a setting does not
        assert "job-env:1:/data:" in job.stdout
        assert "cwd-has:hello.sh" in job.stdout
    finally:
        stop = run(["bash", str(CLUSTER / "stop.sh")], env=env, timeout=180)
        settle(lambda: not [p for p in pids if alive(p)])  # a stopped process may take a moment to go
        bystander_alive = bystander.poll() is None
        bystander.kill()
        shutil.rmtree(temp_dir, ignore_errors=True)  # Ray's session logs
    assert stop.returncode == 0, stop.stderr
    assert not list(state_dir.glob("*.state")), "stop.sh must remove the state file"
    assert not [p for p in pids if alive(p)], "processes of the head survived stop.sh"
    assert bystander_alive, "stop.sh killed a process it did not start"
    leftovers = []
    for proc_dir in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if temp_dir in cmdline and alive(int(proc_dir.name)):
            leftovers.append(f"{proc_dir.name}: {cmdline[:120]}")
    assert not leftovers, f"processes still name {temp_dir}: {leftovers}"


def test_blocking_head_stops_with_its_owner(tmp_path: Path) -> None:
    # BLOCK=1 is how Slurm steps and containers run Ray: SIGTERM to the script (end of step,
    # `docker stop`) must stop every process of the head and drop the state record.
    temp_dir = f"/tmp/rb{os.getpid()}"
    state_dir = tmp_path / "state"
    token = tmp_path / "auth_token"  # private token auth, as in the round trip above
    token.write_text(os.urandom(32).hex())
    token.chmod(0o600)  # start_head.sh refuses a token others may read
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHON": sys.executable,
        "BLOCK": "1",
        "COPO_RAY_STATE_DIR": str(state_dir),
        "RAY_TEMP_DIR": temp_dir,
        "NODE_IP": "127.0.0.1",
        "RAY_PORT": str(free_port()),
        "DASHBOARD_PORT": str(free_port()),
        "RAY_CLIENT_PORT": str(free_port()),
        "DASHBOARD_AGENT_PORT": str(free_port()),
        "GPUS_PER_NODE": "0",
        "NUM_CPUS": "1",
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(token),
    }
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    env.pop("RAY_ADDRESS", None)
    log = (tmp_path / "head.log").open("w")
    owner = subprocess.Popen(
        ["bash", str(CLUSTER / "start_head.sh")], cwd=ROOT, env=env, stdout=log, stderr=log
    )
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 240
        while not list(state_dir.glob("*.head.state")):
            assert owner.poll() is None, (tmp_path / "head.log").read_text()
            assert time.monotonic() < deadline, "the blocking head never recorded its state"
            time.sleep(2)
        state = next(state_dir.glob("*.head.state")).read_text()
        pids = [int(p) for p in state.split('PIDS="')[1].split('"')[0].split()]
        assert pids and all(alive(p) for p in pids)
        assert owner.poll() is None, "BLOCK=1 must keep the script in the foreground"
        owner.send_signal(15)
        owner.wait(timeout=120)
    finally:
        if owner.poll() is None:
            owner.kill()
        for pid in pids:  # never leave a stray Ray behind, whatever failed above
            if alive(pid):
                os.kill(pid, 9)
        shutil.rmtree(temp_dir, ignore_errors=True)
    settle(lambda: not [p for p in pids if alive(p)])
    assert not [p for p in pids if alive(p)], (tmp_path / "head.log").read_text()
    assert not list(state_dir.glob("*.state")), "the blocking owner must remove its state file on exit"


def test_failed_ray_start_is_retried_then_reported(tmp_path: Path) -> None:
    # A `ray` that always fails (as Ray does when a loaded node misses its 30 s startup wait):
    # start_head.sh retries RAY_START_ATTEMPTS times, then fails naming the count; nothing recorded.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    fake_ray = bin_dir / "ray"
    fake_ray.write_text(
        f'#!/usr/bin/env bash\necho "$*" >> {tmp_path}/calls\necho "fake ray failed" >&2\nexit 1\n'
    )
    fake_ray.chmod(0o755)
    env = {
        "HOME": str(tmp_path),  # the head makes its auth token there, not in the user's HOME
        "PYTHON": str(bin_dir / "python"),
        "SKIP_ENV_CHECK": "1",
        "RAY_START_ATTEMPTS": "2",
        "COPO_RAY_STATE_DIR": str(tmp_path / "state"),
        "RAY_TEMP_DIR": f"/tmp/rf{os.getpid()}",
        "NODE_IP": "127.0.0.1",
        "GPUS_PER_NODE": "0",
    }
    proc = run(["bash", str(CLUSTER / "start_head.sh")], env=env, timeout=120)
    assert proc.returncode != 0
    assert "ray start failed 2 time(s)" in proc.stderr and "attempt 1 of 2" in proc.stderr, proc.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert len(calls) == 2 and all(c.startswith("start --head") for c in calls)
    assert not list((tmp_path / "state").glob("*.state"))
    shutil.rmtree(env["RAY_TEMP_DIR"], ignore_errors=True)
