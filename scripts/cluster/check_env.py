"""Check that this node's Python stack matches the verl pin before Ray or a job starts on it.

Multi-node runs fail in confusing ways (pickling errors, missing config keys) when one node has a
different verl than the others. Every node runs this first: it prints the installed versions and
exits non-zero when verl differs from recipe/copo/REQUIRED_VERL.txt.

Usage:
    python scripts/cluster/check_env.py            # versions + pin check
    python scripts/cluster/check_env.py --gpu      # also require at least one visible CUDA GPU
    python scripts/cluster/check_env.py --required-file PATH
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO_ROOT = Path(__file__).resolve().parents[2]
REPORTED = ("verl", "torch", "vllm", "transformers", "ray", "copo-verl")


def _load_verl_pin() -> ModuleType:
    """recipe/verl_pin.py, the one reader of the pin, loaded by path (works before the project is installed)."""
    spec = importlib.util.spec_from_file_location("copo_verl_pin", REPO_ROOT / "recipe" / "verl_pin.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


verl_pin = _load_verl_pin()


def installed_versions(names: tuple[str, ...] = REPORTED) -> dict[str, str | None]:
    """Installed distribution versions, None for those not installed."""
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--required-file",
        type=Path,
        default=verl_pin.REQUIRED_VERL_FILE,
        help="file holding the verl pin (default %(default)s)",
    )
    parser.add_argument("--gpu", action="store_true", help="also require a visible CUDA GPU")
    args = parser.parse_args(argv)

    try:
        pin = verl_pin.required_verl(args.required_file)
    except (OSError, ValueError) as err:
        print(f"[check_env] ERROR: --required-file: {err}", file=sys.stderr)
        return 2
    versions = installed_versions()
    print("[check_env] " + " ".join(f"{k}={v}" for k, v in versions.items()))
    if versions["verl"] != pin:
        print(
            f"[check_env] ERROR: verl {versions['verl']} is installed but {args.required_file} pins {pin}. "
            f'Fix: pip install -e ".[gpu]" (GPU) or bash scripts/setup_env.sh (CPU) on this node.',
            file=sys.stderr,
        )
        return 1
    if args.gpu:
        import torch  # imported late: the pin check above must work even where torch is broken

        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        print(f"[check_env] cuda={torch.version.cuda} visible_gpus={count}")
        if count == 0:
            print(
                "[check_env] ERROR: --gpu given but no CUDA GPU is visible. "
                "Check nvidia-smi, CUDA_VISIBLE_DEVICES and `docker run --gpus all`.",
                file=sys.stderr,
            )
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
