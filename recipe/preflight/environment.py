"""What this machine has: GPU, torch/CUDA, and whether each package the trainer needs imports.

Imports are tried in a child process: a package that fails to import (a flash-attn built for
another torch, a vLLM without its CUDA libraries) cannot take the preflight down with it, and the
preflight's own process never initialises CUDA.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass

from recipe.files import REPO_ROOT

# (import name, distribution name, needed by, what to install when missing)
PACKAGES = (
    (
        "torch",
        "torch",
        "every stage",
        "pip install torch (the CUDA build for this machine, e.g. torch==2.11.0)",
    ),
    ("verl", "verl", "every stage", 'pip install -e ".[gpu]" (verl 0.9.1 and its base requirements)'),
    ("ray", "ray", "every stage (verl imports it)", 'pip install -e ".[gpu]"'),
    ("hydra", "hydra-core", "every stage (the run config)", 'pip install -e ".[gpu]"'),
    ("tensordict", "tensordict", "every stage (verl's batches)", 'pip install -e ".[gpu]"'),
    ("transformers", "transformers", "every stage", 'pip install -e ".[gpu]"'),
    (
        "vllm",
        "vllm",
        "the paper runs' rollout (optional here: the trainer stage uses the hf rollout without it)",
        'pip install -e ".[gpu]" (verl[vllm]: vllm 0.24.0 for torch 2.11)',
    ),
    (
        "flash_attn",
        "flash-attn",
        "packed sequences (optional: sdpa on padded micro-batches without it)",
        "pip install flash-attn (no PyPI wheel for torch 2.11 / CUDA 13: a source build)",
    ),
)

_PROBE = r"""
import importlib, importlib.metadata, json, sys
out = {}
for module, dist in json.loads(sys.argv[1]):
    try:
        if getattr(importlib.import_module(module), "__file__", None) is None:
            raise ImportError(f"{module} is only a folder on sys.path (a namespace package), not the package")
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            version = "?"
        out[module] = {"ok": True, "version": version}
    except BaseException as exc:  # ImportError, OSError from a shared library, ...
        out[module] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
device = {"cuda": None, "gpu": None, "gpu_memory_gib": None}
if out["torch"]["ok"]:
    import torch

    if torch.cuda.is_available():
        device = {
            "cuda": torch.version.cuda,
            "gpu": torch.cuda.get_device_name(0),
            "gpu_memory_gib": torch.cuda.get_device_properties(0).total_memory / 2**30,
        }
    else:
        device["cuda"] = torch.version.cuda
print("PROBE" + json.dumps({"packages": out, "device": device}))
"""


@dataclass
class Package:
    module: str
    ok: bool
    version: str
    needed_by: str
    install: str
    error: str = ""
    verl_wants: str = ""  # verl's declared requirement, when the installed version is outside it


def outside_verl_requirement(dist: str, version: str) -> str:
    """verl's base requirement on ``dist`` (e.g. ``transformers!=5.6.0,<5.11,>=5.5.3``) when
    ``version`` does not satisfy it, else "" (also when verl or the requirement is absent)."""
    import importlib.metadata

    try:
        requires = importlib.metadata.requires("verl") or []
        from packaging.requirements import Requirement
    except (importlib.metadata.PackageNotFoundError, ImportError):
        return ""  # no verl (its row says so), or no packaging to read its requirements with
    for line in requires:
        req = Requirement(line)
        if req.name == dist and req.marker is None and req.specifier and version not in req.specifier:
            return f"{dist}{req.specifier}"
    return ""


@dataclass
class Environment:
    python: str
    torch: str
    cuda: str | None
    gpu: str | None
    gpu_memory_gib: float | None
    packages: dict[str, Package]

    @property
    def device(self) -> str:
        return "cuda" if self.gpu else "cpu"

    def has(self, module: str) -> bool:
        return self.packages[module].ok

    def missing_for_actor(self) -> list[Package]:
        """Packages without which no stage past this one can run."""
        return [p for p in self.packages.values() if p.needed_by.startswith("every stage") and not p.ok]


def probe(timeout_s: float = 300.0) -> Environment:
    """Try every import of :data:`PACKAGES` and read torch's view of the GPU, in a child process."""
    names = [(module, dist) for module, dist, _, _ in PACKAGES]
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(names)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=REPO_ROOT,  # not the caller's folder: a ./ray folder is no Ray
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("PROBE")), None)
    if line is None:
        raise RuntimeError(f"the environment probe failed:\n{proc.stderr[-2000:]}")
    probed = json.loads(line.removeprefix("PROBE"))
    found, device = probed["packages"], probed["device"]
    packages = {
        module: Package(
            module,
            found[module]["ok"],
            found[module].get("version", ""),
            needed_by,
            install,
            found[module].get("error", ""),
            outside_verl_requirement(dist, found[module]["version"]) if found[module]["ok"] else "",
        )
        for module, dist, needed_by, install in PACKAGES
    }
    python = ".".join(map(str, sys.version_info[:3]))
    torch = packages["torch"].version if packages["torch"].ok else "does not import"
    return Environment(python, torch, device["cuda"], device["gpu"], device["gpu_memory_gib"], packages)
