"""README's "Your own model and data on CPU" command runs as written, with only the paths replaced.

The command is read out of README.md (so the README and this test cannot drift apart), its three
placeholder paths are swapped for the tiny model and tiny parquet files, and it is run from a
scratch folder (its relative outputs, checkpoints and tensorboard logs, land there). Everything
else comes from copo_cpu.yaml: group size, batch sizes, lengths, the CPU shortcuts.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.cpu_run import cpu_env, write_prompt_parquet
from tests.paths import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500)]

SECTION = "Your own model and data on CPU"
PLACEHOLDERS = {
    "actor_rollout_ref.model.path": "/path/to/hf_model",
    "data.train_files": "/path/train.parquet",
    "data.val_files": "/path/val.parquet",
}


def readme_command(readme: Path = REPO / "README.md") -> list[str]:
    """The first ```bash block after the line that names SECTION, as argv (line continuations joined)."""
    text = readme.read_text()
    start = text.find(SECTION)
    assert start >= 0, f"README.md has no {SECTION!r} part"
    block = re.search(r"```bash\n(.*?)```", text[start:], flags=re.S)
    assert block, f"README.md: no ```bash block after {SECTION!r}"
    return shlex.split(block.group(1).replace("\\\n", " "))


def test_readme_command_is_the_documented_one() -> None:
    argv = readme_command()
    assert argv[:5] == ["python", "-m", "recipe.copo.main_copo", "--config-name", "copo_cpu"]
    given = dict(arg.split("=", 1) for arg in argv[5:])
    for key, placeholder in PLACEHOLDERS.items():
        assert given.get(key) == placeholder, f"README's command should set {key}={placeholder}"


def test_readme_command_runs_as_written_on_the_tiny_model(tmp_path: Path) -> None:
    from recipe.models.tiny import build_tiny_qwen2

    paths = {
        "actor_rollout_ref.model.path": str(build_tiny_qwen2(tmp_path / "tiny")),
        "data.train_files": str(write_prompt_parquet(tmp_path / "train.parquet", 64, seed=0)),
        "data.val_files": str(write_prompt_parquet(tmp_path / "val.parquet", 8, seed=1)),
    }
    argv = readme_command()
    for i, arg in enumerate(argv):
        key = arg.split("=", 1)[0]
        if key in paths:
            argv[i] = f"{key}={paths[key]}"
    assert argv[0] == "python"
    argv[0] = sys.executable
    given = dict(arg.split("=", 1) for arg in argv[5:])
    steps, save_freq = int(given["trainer.total_training_steps"]), int(given["trainer.save_freq"])

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    env = cpu_env()
    env["TENSORBOARD_DIR"] = str(run_dir / "tensorboard_log")
    log_path = tmp_path / "train.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            argv, cwd=run_dir, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            rc = proc.wait(timeout=1400)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            rc = -9
    log = log_path.read_text(errors="replace")
    assert rc == 0, log[-6000:]
    # the run trained every step and saved where copo_cpu.yaml's default directory points
    ckpts = sorted(run_dir.glob("checkpoints/*/*/global_step_*"), key=lambda p: int(p.name.rsplit("_", 1)[1]))
    expected = [f"global_step_{s}" for s in range(save_freq, steps + 1, save_freq)]
    assert [p.name for p in ckpts] == expected, log[-3000:]
    assert re.search(rf"step:{steps} - ", log), f"no console line for step {steps}"
    # copo_cpu.yaml's shortcuts were in force: the rollout's log-probs were reused (no actor
    # recomputation, whose token entropy verl logs as actor/entropy) and no reference model was built
    assert "actor/pg_loss:" in log and "actor/entropy:" not in log
    assert "timing_s/ref:" not in log
