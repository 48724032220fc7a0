"""recipe.cpu_backend's import surface and job environment: importing the package (or its settings, its
checks, the evaluation's checkpoint reader) does no work; only ``plugin`` installs the backend."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from recipe.cpu_backend import job_env, settings
from tests.paths import REPO

_PROBE = """
import os, sys
os.environ["VERL_PLATFORM"] = "cpu"  # as in every process of a CPU job
for name in sys.argv[1:]:
    __import__(name)
from recipe.cpu_backend import activation
print("installed" if activation._installed else "not installed",
      "torch" if "torch" in sys.modules else "no-torch",
      "engine" if "recipe.cpu_backend.engine" in sys.modules else "no-engine")
"""


def _probe(*modules: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "VERL_USE_EXTERNAL_MODULES"}
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, *modules],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.split()


def test_the_package_and_its_settings_import_without_torch_or_installing() -> None:
    """A config check or a launcher reads the settings without loading torch."""
    modules = ("recipe.cpu_backend", "recipe.cpu_backend.settings", "recipe.cpu_backend.job_env")
    assert _probe(*modules, "recipe.cpu_backend.checks") == ["not", "installed", "no-torch", "no-engine"]


def test_readers_of_the_attention_name_do_not_install_the_backend() -> None:
    """hf_server (a Ray actor's module) and the evaluation's checkpoint reader import pieces of the
    package; in a process with VERL_PLATFORM=cpu that used to install the whole backend."""
    out = _probe(
        "recipe.evaluation.checkpoints", "recipe.cpu_backend.hf_server", "recipe.cpu_backend.attention"
    )
    assert out[:2] == ["not", "installed"] and out[-1] == "no-engine"


def test_the_plugin_installs_where_the_cpu_platform_is_selected() -> None:
    assert _probe("recipe.cpu_backend.plugin")[:1] == ["installed"]


def test_copo_cpu_yaml_sets_every_cpu_backend_key_and_no_other() -> None:
    config = OmegaConf.load(REPO / "recipe" / "copo" / "config" / "copo_cpu.yaml")
    assert {f"cpu_backend.{key}" for key in config.cpu_backend} == set(settings.SETTINGS)


@pytest.mark.parametrize(
    ("name", "short"),
    [("float32", "fp32"), ("FP32", "fp32"), ("bfloat16", "bf16"), ("float16", "fp16"), ("int8", "int8")],
)
def test_dtype_name(name: str, short: str) -> None:
    assert settings.dtype_name(name) == short


def test_cpu_job_env_is_offline_single_threaded_and_selects_the_backend() -> None:
    base = {
        "PATH": "/bin",
        "PYTHONPATH": "/x",
        "VERL_USE_EXTERNAL_MODULES": "my_plugin",
        "HF_HUB_OFFLINE": "0",
    }
    env = job_env.cpu_job_env({**base, "CUDA_VISIBLE_DEVICES": ""}, threads=1)
    assert env["PATH"] == "/bin" and env["HF_HUB_OFFLINE"] == "0"  # the caller's values win
    assert env["TRANSFORMERS_OFFLINE"] == "1" and env["WANDB_MODE"] == "disabled"
    assert env["PYTHONPATH"] == os.pathsep.join([job_env.PROJECT_ROOT, "/x"])
    assert env["VERL_PLATFORM"] == "cpu"
    assert env["VERL_USE_EXTERNAL_MODULES"] == "my_plugin," + job_env.PLUGIN_MODULE
    assert env["COPO_CPU_THREADS"] == env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "1"
    assert "CUDA_VISIBLE_DEVICES" not in env  # "" makes Ray refuse its logical GPU
    assert job_env.cpu_job_env(env, threads=1) == env  # idempotent: nothing added twice
    plain = job_env.cpu_job_env({}, platform=False)
    assert "VERL_PLATFORM" not in plain and "OMP_NUM_THREADS" not in plain
    assert plain["PYTHONPATH"] == job_env.PROJECT_ROOT
    with pytest.raises(ValueError, match="threads must be >= 1"):
        job_env.cpu_job_env({}, threads=0)


def test_the_plugin_module_exists_where_the_environment_names_it() -> None:
    import importlib.util

    assert importlib.util.find_spec(job_env.PLUGIN_MODULE) is not None
