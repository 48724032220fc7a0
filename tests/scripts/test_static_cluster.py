"""The cluster scripts' generated commands, checked without a cluster (and one real local Ray round trip).

* submit.sh / slurm_copo_7b.sbatch / gpu_smoke.sh dry runs print the exact `ray job submit` (or
  training) command; it is parsed, its run script must exist, the run script's own DRY_RUN=1 command
  gives the Hydra overrides, and recipe.copo.config_check.compose_and_validate must accept them with
  the paper's values (SPEC section 7) and the cluster shape the scripts asked for.
* Missing paths / variables fail with a message naming them.
* A real CPU Ray head is started by start_head.sh, a job goes through submit.sh to it, and stop.sh
  stops exactly the head's processes (a bystander survives).
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

from tests.paths import REPO

ROOT = REPO
CLUSTER = ROOT / "scripts" / "cluster"


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


validate_job = _load("copo_cluster_validate_job", CLUSTER / "validate_job.py")
check_env = _load("copo_cluster_check_env", CLUSTER / "check_env.py")


def run(
    cmd: list[str], env: dict[str, str] | None = None, timeout: int = 180, **kw
) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHON": sys.executable, **(env or {})}
    full_env["PATH"] = f"{Path(sys.executable).parent}:{full_env['PATH']}"
    for key in (
        "RAY_ADDRESS",
        "ENV_FILE",
        "DRY_RUN",
        "NNODES",
        "GPUS_PER_NODE",
        "RUN_SCRIPT",
        "MODEL_PATH",
        "RAY_AUTH_MODE",
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
    call = validate_job.parse_trainer_command(line)
    assert call.config_name == "copo_cpu"
    assert call.overrides == ['trainer.logger=["console"]', "data.val_files=[/a b/x.parquet]", "+x.y=1"]
    assert (
        validate_job.parse_trainer_command("python3 -m recipe.copo.main_copo a=1").config_name
        == "copo_trainer"
    )
    with pytest.raises(ValueError, match="recipe.copo.main_copo"):
        validate_job.parse_trainer_command("python3 -m verl.trainer.main_ppo a=1")
    with pytest.raises(ValueError, match="--oops"):
        validate_job.parse_trainer_command("python3 -m recipe.copo.main_copo --oops a=1")


def test_parse_submit_line() -> None:
    line = shlex.join(
        [
            "/v/bin/ray",
            "job",
            "submit",
            "--address=http://h:8265",
            "--no-wait",
            "--",
            "bash",
            "recipe/copo/run_copo_qwen2.5_7b.sh",
            "a=1 2",
        ]
    )
    call = validate_job.parse_submit_line(line)
    assert call.options == {"address": "http://h:8265", "no-wait": True}
    assert call.entrypoint == ["bash", "recipe/copo/run_copo_qwen2.5_7b.sh", "a=1 2"]
    with pytest.raises(ValueError, match="no `--`"):
        validate_job.parse_submit_line("ray job submit --address=x bash a.sh")
    with pytest.raises(ValueError, match="not a `ray job submit`"):
        validate_job.parse_submit_line("ray start --head")
    assert validate_job.split_entrypoint(["env", "A=1", "B=x=y", "bash", "r.sh", "k=v"]) == (
        {"A": "1", "B": "x=y"},
        "r.sh",
        ["k=v"],
    )
    assert validate_job.split_entrypoint(["bash", "r.sh"]) == ({}, "r.sh", [])
    with pytest.raises(ValueError, match="not `\\[env"):
        validate_job.split_entrypoint(["python", "r.py"])


# ---------------------------------------------------------------------------------------------
# submit.sh -> run script -> config check


def submit_dry_run(env: dict[str, str], *overrides: str) -> validate_job.SubmitCall:
    proc = run(["bash", str(CLUSTER / "submit.sh"), "--dry-run", "--", *overrides], env=env)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1, f"dry run must print exactly one command line, got:\n{proc.stdout}"
    return validate_job.parse_submit_line(lines[0])


def validate_entrypoint(call: validate_job.SubmitCall):
    """The run script named by the entrypoint exists; its DRY_RUN overrides pass compose_and_validate."""
    env, run_script, args = validate_job.split_entrypoint(call.entrypoint)
    working_dir = Path(str(call.options["working-dir"]))
    assert (working_dir / run_script).is_file(), f"{run_script} not in the uploaded working dir {working_dir}"
    from recipe.copo.config_check import compose_and_validate

    line = validate_job.dry_run_command(run_script, args, cwd=working_dir, env=env)
    trainer_call = validate_job.parse_trainer_command(line)
    return compose_and_validate(trainer_call.overrides, config_name=trainer_call.config_name)


@pytest.mark.parametrize(
    ("run_script", "n", "k", "b"),
    [
        ("recipe/copo/run_copo_qwen2.5_7b.sh", 8, 5.0, 1.0),
        ("recipe/copo/run_copo_qwen2.5_3b.sh", 6, 20.0, 1.5),
    ],
)
def test_submit_command_runs_a_valid_paper_config(run_script: str, n: int, k: float, b: float) -> None:
    env = {
        "RAY_ADDRESS": "http://10.1.2.3:8265",
        "NNODES": "2",
        "GPUS_PER_NODE": "8",
        "RUN_SCRIPT": run_script,
        "SUBMISSION_ID": "copo-test",
        "MODEL_PATH": "/from/env",
        "WANDB_API_KEY": "secret",
    }
    call = submit_dry_run(
        env, "actor_rollout_ref.model.path=/shared/models/qwen", "trainer.total_training_steps=3"
    )
    assert call.options["address"] == "http://10.1.2.3:8265"
    assert call.options["submission-id"] == "copo-test"
    assert Path(str(call.options["working-dir"])) == ROOT
    runtime_env = Path(str(call.options["runtime-env"]))
    assert runtime_env.is_file(), f"runtime env {runtime_env} missing"
    job_env, job_script, _ = validate_job.split_entrypoint(call.entrypoint)
    assert job_script == run_script
    # run-script settings exported locally reach the job; secrets never go on its command line
    assert job_env["MODEL_PATH"] == "/from/env" and job_env["NNODES"] == "2"
    assert "WANDB_API_KEY" not in job_env

    config = validate_entrypoint(call)
    # The cluster shape the submit asked for, the user's overrides, and the paper row (SPEC 7).
    assert (config.trainer.nnodes, config.trainer.n_gpus_per_node) == (2, 8)
    assert config.actor_rollout_ref.model.path == "/shared/models/qwen"
    assert config.trainer.total_training_steps == 3
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
    assert validate_job.split_entrypoint(call.entrypoint)[1] == "recipe/copo/run_copo_qwen2.5_7b.sh"
    config = validate_entrypoint(call)
    assert (config.trainer.nnodes, config.trainer.n_gpus_per_node) == (4, 8)
    assert config.trainer.total_training_steps == 2
    assert (config.actor_rollout_ref.rollout.n, float(config.algorithm.copo.k)) == (8, 5.0)


def test_submit_validation_rejects_a_cluster_shape_the_batch_does_not_divide() -> None:
    # 512 prompts x 8 responses = 4096 sequences cannot be split over 3 nodes x 8 GPUs: submit.sh's
    # local validation must refuse before anything reaches a cluster (no Ray needed: it fails first).
    proc = run(
        ["bash", str(CLUSTER / "submit.sh")],
        env={"RAY_ADDRESS": "http://127.0.0.1:9", "NNODES": "3", "GPUS_PER_NODE": "8"},
        timeout=300,
    )
    assert proc.returncode != 0
    assert "divisible" in proc.stderr and "config validation failed" in proc.stderr, proc.stderr


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
    call = validate_job.parse_trainer_command(train_line)
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
            {"RUN_SCRIPT": "recipe/copo/nope.sh"},
            "RUN_SCRIPT='recipe/copo/nope.sh'",
        ),
        (
            ["scripts/cluster/submit.sh", "--dry-run"],
            {"RUNTIME_ENV": "/nonexistent/rt.yaml"},
            "RUNTIME_ENV='/nonexistent/rt.yaml'",
        ),
        (["scripts/cluster/submit.sh", "--dry-run"], {"NNODES": "two"}, "NNODES='two'"),
        (
            ["scripts/cluster/submit.sh", "--run-script", "/etc/hostname", "--dry-run"],
            {},
            "outside WORKING_DIR",
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
    pin_file = tmp_path / "REQUIRED_VERL.txt"
    pin_file.write_text("# a comment naming 1.2.3 is ignored\nverl==0.9.1\n")
    assert check_env.read_pin(pin_file) == "0.9.1"
    assert check_env.main(["--required-file", str(pin_file)]) == 0  # this venv has verl 0.9.1
    pin_file.write_text("verl==0.0.1\n")
    assert check_env.main(["--required-file", str(pin_file)]) == 1
    assert check_env.read_pin(ROOT / "recipe" / "copo" / "REQUIRED_VERL.txt") == "0.9.1"


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


def test_head_submit_stop_round_trip(tmp_path: Path) -> None:
    temp_dir = f"/tmp/rc{os.getpid()}"  # short: Ray's socket paths must stay < 108 bytes
    state_dir = tmp_path / "state"
    dash = free_port()
    # Token auth as Ray >= 2.5x sets it up, but with a private token (not ~/.ray/auth_token).
    token = tmp_path / "auth_token"
    token.write_text(os.urandom(32).hex())
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

        # A real job through submit.sh: its own working dir, runtime env and run script.
        work = tmp_path / "work"
        (work / "jobs").mkdir(parents=True)
        (work / "jobs" / "hello.sh").write_text(
            '#!/usr/bin/env bash\necho "job-args:$*"\necho "cwd-has:$(ls jobs)"\n'
            'echo "job-env:${COPO_TEST_VAR:-}:${COPO_K:-}"\n'
        )
        runtime_env = tmp_path / "rt.yaml"
        runtime_env.write_text("env_vars:\n  COPO_TEST_VAR: '1'\n")
        submit_env = {
            "RAY_ADDRESS": f"http://127.0.0.1:{dash}",
            "WORKING_DIR": str(work),
            "RUNTIME_ENV": str(runtime_env),
            "RUN_SCRIPT": "jobs/hello.sh",
            "VALIDATE": "0",
            "NNODES": "1",
            "GPUS_PER_NODE": "0",
            "COPO_K": "1",
        }
        # RAY_AUTH_MODE unset on the client: submit.sh must find the token and enable it.
        job = run(
            ["bash", str(CLUSTER / "submit.sh"), "--", "x=1"],
            env={**submit_env, "RAY_AUTH_TOKEN_PATH": str(token)},
            timeout=300,
        )
        assert job.returncode == 0, job.stdout + job.stderr
        assert "job-args:trainer.nnodes=1 trainer.n_gpus_per_node=0 x=1" in job.stdout
        assert "job-env:1:1" in job.stdout  # runtime_env env_vars and forwarded variables reach the job
        assert "cwd-has:hello.sh" in job.stdout
    finally:
        stop = run(["bash", str(CLUSTER / "stop.sh")], env=env, timeout=180)
        time.sleep(1)
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
    time.sleep(2)
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
