"""The cluster is closed by default: a real Ray head started by start_head.sh refuses anyone without its token.

* start_head.sh under a HOME that holds no token makes one (mode 0600, its path said, its value never
  printed) and runs the head with RAY_AUTH_MODE=token, the dashboard on the node's address only;
* from a HOME without the token, `ray job submit` is refused, and so is a raw HTTP POST to the jobs API
  (401 without a token, 403 with a wrong one); the job never runs;
* submit.sh with the token submits and the job runs;
* the other scripts refuse to run without the token, with a wrong RAY_AUTH_MODE, or with a token file
  that others may read.
Each head has its own temp dir, ports and state dir, and is stopped with stop.sh (never `ray stop`).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.faults.records import record
from tests.paths import REPO

CLUSTER = REPO / "scripts" / "cluster"
# Variables of the caller's shell that would change what these scripts see.
_SCRUB = (
    "RAY_ADDRESS",
    "RAY_AUTH_MODE",
    "RAY_AUTH_TOKEN",
    "RAY_AUTH_TOKEN_PATH",
    "ENV_FILE",
    "DRY_RUN",
    "NNODES",
    "GPUS_PER_NODE",
    "CONFIG",
    "MODEL_PATH",
    "DATA_DIR",
    "CKPT_DIR",
    "DASHBOARD_HOST",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def base_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env.update({"HOME": str(home), "OMP_NUM_THREADS": "1", "PYTHON": sys.executable})
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    env.update(extra)
    return env


def run(cmd: list[str], env: dict[str, str], timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def listening_addresses(port: int) -> set[str]:
    """Local IPv4 addresses with a socket listening on ``port`` (from /proc/net/tcp; state 0A = LISTEN)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state = fields[1], fields[3]
        hex_ip, hex_port = local.split(":")
        if state == "0A" and int(hex_port, 16) == port:
            found.add(socket.inet_ntoa(bytes.fromhex(hex_ip)[::-1]))
    return found


def post_job(url: str, entrypoint: str, token: str | None) -> tuple[int, str]:
    """POST a job to Ray's jobs API the way any HTTP client can; (status, body)."""
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(
        f"{url}/api/jobs/",
        data=json.dumps({"entrypoint": entrypoint}).encode(),
        headers=headers,
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")


@pytest.mark.faults
@pytest.mark.ci
def test_head_refuses_jobs_without_its_token_and_accepts_submit_sh(tmp_path: Path) -> None:
    home, outsider = tmp_path / "home", tmp_path / "outsider"
    home.mkdir()
    outsider.mkdir()
    temp_dir = f"/tmp/ra{os.getpid()}"  # short: Ray's socket paths must stay < 108 bytes
    state_dir = tmp_path / "state"
    dash = free_port()
    url = f"http://127.0.0.1:{dash}"
    head_env = base_env(
        home,
        COPO_RAY_STATE_DIR=str(state_dir),
        RAY_TEMP_DIR=temp_dir,
        NODE_IP="127.0.0.1",
        RAY_PORT=str(free_port()),
        DASHBOARD_PORT=str(dash),
        RAY_CLIENT_PORT=str(free_port()),
        DASHBOARD_AGENT_PORT=str(free_port()),
        GPUS_PER_NODE="0",
        NUM_CPUS="2",
        STOP_TIMEOUT_S="30",
    )
    marker = tmp_path / "pwned"  # an outsider's job would create it
    token_file = home / ".ray" / "auth_token"
    pids: list[int] = []
    evidence: dict[str, object] = {}
    try:
        head = run(["bash", str(CLUSTER / "start_head.sh")], head_env)
        assert head.returncode == 0, head.stdout + head.stderr
        state = next(state_dir.glob("*.head.state")).read_text()
        pids = [int(p) for p in state.split('PIDS="')[1].split('"')[0].split()]

        # the token: made, private, its path said, its value never printed
        assert token_file.is_file(), head.stderr
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        token = token_file.read_text().strip()
        assert len(token) >= 32
        assert f"created a new Ray auth token at {token_file}" in head.stderr
        assert token not in head.stdout + head.stderr
        # every process of the head runs in token mode
        environ = Path(f"/proc/{pids[0]}/environ").read_bytes().split(b"\0")
        assert b"RAY_AUTH_MODE=token" in environ
        # the dashboard listens on the node's address, not on every interface
        assert listening_addresses(dash) == {"127.0.0.1"}, listening_addresses(dash)

        # an outsider: no token in its HOME, Ray's CLI as anyone would run it
        outsider_env = base_env(outsider)
        bad = run(
            [
                str(Path(sys.executable).parent / "ray"),
                "job",
                "submit",
                f"--address={url}",
                "--no-wait",
                "--",
                "touch",
                str(marker),
            ],
            outsider_env,
        )
        said = [ln for ln in (bad.stdout + bad.stderr).splitlines() if "401" in ln or "Authentication" in ln]
        evidence["ray job submit without token"] = (bad.returncode, said[:3])
        cli_error = said[-1].strip() if said else ""
        assert bad.returncode != 0
        assert "401" in bad.stdout + bad.stderr or "Unauthorized" in bad.stdout + bad.stderr, bad.stderr[
            -2000:
        ]
        # ... and with a token, but the wrong one
        wrong = tmp_path / "wrong_token"
        wrong.write_text("0" * 64)
        wrong.chmod(0o600)
        bad2 = run(
            [
                str(Path(sys.executable).parent / "ray"),
                "job",
                "submit",
                f"--address={url}",
                "--no-wait",
                "--",
                "touch",
                str(marker),
            ],
            {**outsider_env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(wrong)},
        )
        assert bad2.returncode != 0
        assert "403" in bad2.stdout + bad2.stderr or "Forbidden" in bad2.stdout + bad2.stderr, bad2.stderr[
            -2000:
        ]
        # a raw HTTP POST to the jobs API
        status, body = post_job(url, f"touch {marker}", token=None)
        evidence["POST /api/jobs/ without token"] = (status, body)
        assert status == 401, (status, body)
        status, body = post_job(url, f"touch {marker}", token="0" * 64)
        assert status == 403, (status, body)

        # submit.sh with the token (found in HOME, as on the head's node; RAY_ADDRESS from the record)
        work = tmp_path / "work"
        (work / "jobs").mkdir(parents=True)
        hello = work / "jobs" / "hello.sh"
        hello.write_text('#!/usr/bin/env bash\necho "job-ran:$*"\n')
        hello.chmod(0o755)
        submit_env = base_env(
            home,
            COPO_RAY_STATE_DIR=str(state_dir),
            WORKING_DIR=str(work),
            JOB_PYTHON="./jobs/hello.sh",
            CONFIG="copo_cpu",
            VALIDATE="0",
        )
        job = run(["bash", str(CLUSTER / "submit.sh"), "--", "x=1"], submit_env)
        assert job.returncode == 0, job.stdout + job.stderr
        assert "job-ran:-m recipe.copo.main_copo --config-name copo_cpu x=1" in job.stdout
        assert f"to {url} as" in job.stderr  # the recorded dashboard address
        assert token not in job.stdout + job.stderr
        time.sleep(1)
        assert not marker.exists(), "an unauthenticated job ran"
    finally:
        stop = run(["bash", str(CLUSTER / "stop.sh")], head_env, timeout=180)
        shutil.rmtree(temp_dir, ignore_errors=True)
        for pid in pids:  # never leave a Ray behind, whatever failed above
            if alive(pid):
                os.kill(pid, 9)
    print("\n=== refused submissions ===")
    for what, outcome in evidence.items():
        print(f"{what}: {outcome}")
    assert stop.returncode == 0, stop.stderr
    assert not [p for p in pids if alive(p)], "processes of the head survived stop.sh"
    record(
        "6-unauthenticated-submit",
        "a job submitted without the cluster's token",
        "`ray job submit` and a raw POST /api/jobs/ from a HOME without the token, to a start_head.sh head",
        stop_s=None,
        steps_lost=None,
        processes_left=0,
        resumed_same_next_step=None,
        note=(
            f"refused: HTTP {evidence['POST /api/jobs/ without token'][0]} (a wrong token: 403); "
            f"the CLI said: {cli_error}; the job never ran; submit.sh with the token ran its job"
        ),
    )


def _token(path: Path, mode: int = 0o600) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(os.urandom(32).hex())
    path.chmod(mode)
    return path


@pytest.mark.parametrize(
    ("script", "extra", "needle"),
    [
        # a worker or a client never makes a token of its own: it needs the head's
        (["start_worker.sh"], {"HEAD_ADDRESS": "127.0.0.1:1"}, "no Ray auth token at {home}/.ray/auth_token"),
        (
            ["submit.sh", "--no-wait"],
            {"VALIDATE": "0", "RAY_ADDRESS": "http://127.0.0.1:1"},
            "no Ray auth token at {home}/.ray/auth_token",
        ),
        # token authentication cannot be switched off
        (["start_head.sh"], {"RAY_AUTH_MODE": "disabled"}, "RAY_AUTH_MODE=disabled"),
        (
            ["start_worker.sh"],
            {"HEAD_ADDRESS": "127.0.0.1:1", "RAY_AUTH_MODE": "disabled"},
            "RAY_AUTH_MODE=disabled",
        ),
    ],
)
def test_scripts_refuse_without_the_token(
    tmp_path: Path, script: list[str], extra: dict[str, str], needle: str
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = base_env(
        home,
        SKIP_ENV_CHECK="1",
        NODE_IP="127.0.0.1",
        GPUS_PER_NODE="0",
        COPO_RAY_STATE_DIR=str(tmp_path / "state"),
        RAY_TEMP_DIR=f"/tmp/rn{os.getpid()}",
        **extra,
    )
    proc = run(["bash", str(CLUSTER / script[0]), *script[1:]], env, timeout=120)
    assert proc.returncode != 0
    assert needle.format(home=home) in proc.stderr, proc.stderr
    assert not (home / ".ray" / "auth_token").exists(), "only the head makes a token"
    assert not list((tmp_path / "state").glob("*.state")), "nothing may start"


def test_a_token_others_can_read_is_refused(tmp_path: Path) -> None:
    token = _token(tmp_path / "tok", mode=0o644)
    env = base_env(
        tmp_path,
        SKIP_ENV_CHECK="1",
        NODE_IP="127.0.0.1",
        GPUS_PER_NODE="0",
        RAY_AUTH_TOKEN_PATH=str(token),
        COPO_RAY_STATE_DIR=str(tmp_path / "state"),
        RAY_TEMP_DIR=f"/tmp/rp{os.getpid()}",
    )
    proc = run(["bash", str(CLUSTER / "start_head.sh")], env, timeout=120)
    assert proc.returncode != 0
    assert "has mode 644" in proc.stderr and f"chmod 600 {token}" in proc.stderr, proc.stderr
    assert not list((tmp_path / "state").glob("*.state"))


def test_make_token_prints_the_path_never_the_token(tmp_path: Path) -> None:
    target = tmp_path / "shared" / "ray_token"
    env = base_env(tmp_path, RAY_AUTH_TOKEN_PATH=str(target))
    first = run(["bash", str(CLUSTER / "make_token.sh")], env)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == str(target)
    token = target.read_text()
    assert len(token) == 64 and int(token, 16) >= 0
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert token not in first.stdout + first.stderr
    again = run(["bash", str(CLUSTER / "make_token.sh")], env)
    assert again.returncode == 0 and target.read_text() == token, "an existing token is never replaced"
    assert not [p for p in target.parent.iterdir() if p != target], "no temporary file left"
