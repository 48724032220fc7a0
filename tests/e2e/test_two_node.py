"""Multi-node for real, on one machine: two Ray nodes started by the cluster scripts, a COPO job
submitted through scripts/cluster/submit.sh, training with FSDP2 over gloo across both nodes.

The dress rehearsal README's "Run on a GPU cluster" offers before booking GPUs:

    .venv/bin/python -m pytest -m e2e -s tests/e2e/test_two_node.py

* start_head.sh and start_worker.sh start two Ray nodes (own temp dirs, ports, state dir and auth
  token: nothing here touches another Ray on the machine), each with one logical GPU;
* submit.sh validates and submits the tiny-model COPO job (config copo_cpu) with
  ``trainer.nnodes=2 trainer.n_gpus_per_node=1``; the CPU backend is switched on in every worker
  through the job's runtime env;
* the job must finish 2 steps and write a checkpoint, and Ray's state API must show actor workers
  on both nodes;
* stop.sh must leave no process of either node behind.
The node ids, step times and stop.sh's output are printed (run with -s to see them).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.cpu_run import cpu_env, read_jsonl, tiny_recipe_overrides
from tests.paths import REPO

pytestmark = pytest.mark.e2e

CLUSTER = REPO / "scripts" / "cluster"
ACTOR_WORKER_CLASSES = ("WorkerDict", "ActorRolloutRefWorker")


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


def processes_naming(*needles: str) -> list[str]:
    """Live processes whose command line names one of ``needles`` (our temp dirs)."""
    found = []
    for proc_dir in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(n in cmdline for n in needles) and alive(int(proc_dir.name)):
            found.append(f"{proc_dir.name}: {cmdline[:160]}")
    return found


def recorded_pids(state_dir: Path) -> list[int]:
    pids: list[int] = []
    for state in state_dir.glob("*.state"):
        text = state.read_text()
        pids += [int(p) for p in text.split('PIDS="')[1].split('"')[0].split()]
    return pids


def run_script(script: str, env: dict[str, str], *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        ["bash", str(CLUSTER / script), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    print(f"--- {script} (exit {proc.returncode})\n{proc.stderr[-3000:]}")
    return proc


def test_two_ray_nodes_train_copo_and_stop_clean(tmp_path: Path) -> None:
    head_dir, worker_dir = f"/tmp/r2h{os.getpid()}", f"/tmp/r2w{os.getpid()}"  # short: socket paths
    state_dir = tmp_path / "ray_state"
    token = tmp_path / "auth_token"
    token.write_text(os.urandom(32).hex())
    token.chmod(0o600)  # start_head.sh refuses a token others may read
    ray_port, dash = free_port(), free_port()
    env = cpu_env()
    env.update(
        {
            "PATH": f"{Path(sys.executable).parent}:{env['PATH']}",
            "PYTHON": sys.executable,
            "COPO_RAY_STATE_DIR": str(state_dir),
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN_PATH": str(token),
            "NODE_IP": "127.0.0.1",  # both nodes are this machine: loopback is right here
            "GPUS_PER_NODE": "1",  # one logical GPU per node: the CPU worker slot
            "REQUIRE_CUDA": "0",  # ... which CUDA cannot see
            "STOP_TIMEOUT_S": "30",
        }
    )
    for key in ("RAY_ADDRESS", "ENV_FILE", "DRY_RUN", "NNODES", "MODEL_PATH", "DATA_DIR", "CKPT_DIR"):
        env.pop(key, None)
    small_store = ["--", "--object-store-memory=400000000"]
    head_env = {
        **env,
        "RAY_TEMP_DIR": head_dir,
        "RAY_PORT": str(ray_port),
        "DASHBOARD_PORT": str(dash),
        "RAY_CLIENT_PORT": str(free_port()),
        "DASHBOARD_AGENT_PORT": str(free_port()),
        "NUM_CPUS": "16",  # logical: verl's placement bundles, TransferQueue and agent-loop actors
    }
    worker_env = {
        **env,
        "RAY_TEMP_DIR": worker_dir,
        "HEAD_ADDRESS": f"127.0.0.1:{ray_port}",
        "DASHBOARD_AGENT_PORT": str(free_port()),
        "NUM_CPUS": "8",
    }

    base, ckpt = tiny_recipe_overrides(tmp_path, steps=2)
    assert base[:2] == ["--config-name", "copo_cpu"]
    overrides = [
        *base[2:],
        "trainer.nnodes=2",
        "trainer.n_gpus_per_node=1",
        "trainer.save_freq=2",
        # the cluster exists already: the job's ray.init must not ask for resources
        "ray_kwargs.ray_init.num_cpus=null",
        "ray_kwargs.ray_init.num_gpus=null",
    ]
    submit_env = {
        **env,
        "RAY_ADDRESS": f"http://127.0.0.1:{dash}",
        "CONFIG": "copo_cpu",
        "SUBMISSION_ID": f"copo-two-node-{os.getpid()}",
    }
    stop: subprocess.CompletedProcess | None = None
    pids: list[int] = []
    try:
        t0 = time.monotonic()
        assert run_script("start_head.sh", head_env, *small_store).returncode == 0
        assert run_script("start_worker.sh", worker_env, *small_store).returncode == 0
        pids = recorded_pids(state_dir)
        cluster_up_s = time.monotonic() - t0

        t0 = time.monotonic()
        job = run_script("submit.sh", submit_env, "--", *overrides, timeout=900)
        job_s = time.monotonic() - t0
        (tmp_path / "job.log").write_text(job.stdout + job.stderr)
        assert job.returncode == 0, (job.stdout + job.stderr)[-8000:]
        assert "[validate_job] OK config=copo_cpu" in job.stderr, job.stderr[-3000:]

        records = read_jsonl(ckpt / "metrics.jsonl")
        assert [r["step"] for r in records] == [1, 2]
        assert (ckpt / "global_step_2" / "actor").is_dir(), sorted(p.name for p in ckpt.iterdir())
        shards = sorted(p.name for p in (ckpt / "global_step_2" / "actor").glob("model_world_size_2_rank_*.pt"))
        assert shards == ["model_world_size_2_rank_0.pt", "model_world_size_2_rank_1.pt"], shards

        nodes, workers = actor_workers_by_node(dash, env)
        assert len(nodes) == 2, nodes
        assert {w["node_id"] for w in workers} == set(nodes), workers
        # (Both nodes' workers trained with FSDP on CPU: impossible unless the CPU backend was active
        # in each, so the two shards above are that evidence.)

        print("\n=== two-node evidence ===")
        for node_id, ip in nodes.items():
            on_node = sorted(w["class_name"] for w in workers if w["node_id"] == node_id)
            print(f"node {node_id} ({ip}): actor workers {on_node}")
        for r in records:
            print(f"step {r['step']}: time_per_step {r.get('perf/time_per_step', float('nan')):.1f} s")
        print(f"cluster up in {cluster_up_s:.0f} s; submit.sh (validation + job) {job_s:.0f} s")
    finally:
        stop = run_script("stop.sh", env, timeout=180)
        print(f"--- stop.sh stdout+stderr ---\n{stop.stdout}{stop.stderr}")
        deadline = time.monotonic() + 30  # stopped processes may take a moment to exit: poll, bounded
        while (leftovers := processes_naming(head_dir, worker_dir)) and time.monotonic() < deadline:
            time.sleep(0.5)
        for line in leftovers:  # never leave a Ray behind, whatever failed above
            os.kill(int(line.split(":")[0]), 9)
        for pid in pids:
            if alive(pid):
                os.kill(pid, 9)
        shutil.rmtree(head_dir, ignore_errors=True)
        shutil.rmtree(worker_dir, ignore_errors=True)
    assert stop is not None and stop.returncode == 0, stop.stderr if stop else "stop.sh did not run"
    assert not leftovers, f"stop.sh left processes behind: {leftovers}"
    assert not [p for p in pids if alive(p)], "recorded Ray processes survived stop.sh"
    assert not list(state_dir.glob("*.state")), "stop.sh must remove the state files"


def actor_workers_by_node(dashboard_port: int, env: dict[str, str]) -> tuple[dict[str, str], list[dict]]:
    """(node id -> ip of every alive node, the actor workers with their node id) from Ray's state API."""
    code = f"""
import json
from ray.util.state import list_actors, list_nodes
address = "http://127.0.0.1:{dashboard_port}"
nodes = {{n.node_id: n.node_ip for n in list_nodes(address=address) if n.state == "ALIVE"}}
actors = [
    {{"class_name": a.class_name, "node_id": a.node_id, "state": a.state}}
    for a in list_actors(address=address, limit=10000, raise_on_missing_output=False)
]
print(json.dumps({{"nodes": nodes, "actors": actors}}))
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    state = json.loads(proc.stdout.strip().splitlines()[-1])
    workers = [a for a in state["actors"] if any(c in a["class_name"] for c in ACTOR_WORKER_CLASSES)]
    print(f"actors: {sorted((a['class_name'], a['node_id'][:8]) for a in state['actors'])}")
    return state["nodes"], workers
