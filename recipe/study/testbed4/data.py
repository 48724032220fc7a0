"""A regime's data: testbed v3's held-out problems, re-weighted by level to the regime's mixture.

Testbed v4 trains testbed v3's policy unchanged (``TESTBED_V3``, cached); only the data differ per
regime. Its problems are v3's (neither fine-tuning saw them): a regime's validation problems are a
subset of v3's 256 validation problems per level, its training rows are drawn from v3's 128 training
problems per level. Per level, the count is the regime's weight times the set's size (largest
remainders, so the counts sum to the size). Validation problems are distinct (a level may not ask for
more than v3 holds); training rows cycle through the level's shuffled problems when the level asks for
more than 128 (so a heavy level's problems repeat in the file, each as often as the others, within
one). A training step draws from the file as verl's sampler does (a fresh permutation per epoch).

The folder (``<cache>/testbed4/<key>/``) has the layout of a built testbed (``recipe.study.testbed.
build.Testbed``): ``model`` (a link to v3's model folder), ``data/{train,val}.parquet`` and
``manifest.json`` (the weights and counts), so the shared study code runs on it unchanged. The key
covers v3's key, the levels, the weights, the sizes and the seed.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from recipe.cache import cache_root
from recipe.files import atomic_dir
from recipe.study.testbed.build import MANIFEST, Testbed
from recipe.study.testbed.mixed import MixedTask, level_of

# Bump when this module changes what it writes for the same inputs (a new key, a new folder).
DATA_VERSION = 1


def level_counts(total: int, weights: Sequence[float]) -> list[int]:
    """``total`` split by ``weights`` with largest remainders (testbed v2's rule, ``MixedTask.counts``)."""
    return MixedTask(
        "regime", tuple(("max", i, i) for i in range(1, len(weights) + 1)), tuple(weights)
    ).counts(total)


@dataclass(frozen=True)
class RegimeData:
    """What a regime's data folder is made of (the cache key covers all of it)."""

    base_key: str  # testbed v3's key
    source: str  # the rows' data_source (``<plan name>/max``)
    levels: tuple[str, ...]  # level names, in the order of ``weights``
    weights: tuple[float, ...]
    val_problems: int
    train_rows: int
    seed: int = 0

    def key(self) -> str:
        payload = {**asdict(self), "weights": [round(w, 9) for w in self.weights], "version": DATA_VERSION}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]

    def val_counts(self) -> list[int]:
        return level_counts(self.val_problems, self.weights)

    def train_counts(self) -> list[int]:
        return level_counts(self.train_rows, self.weights)


def by_level(rows: Sequence[dict[str, Any]], levels: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """The rows of each level (in file order); a row of another level is an error."""
    out: dict[str, list[dict[str, Any]]] = {level: [] for level in levels}
    for row in rows:
        level = level_of(str(row["extra_info"]["original_id"]))
        if level not in out:
            raise ValueError(
                f"row {row['extra_info']['original_id']}: level {level} is not one of {list(levels)}"
            )
        out[level].append(row)
    return out


def pick(
    rows: Sequence[dict[str, Any]], count: int, rng: random.Random, repeat: bool
) -> list[dict[str, Any]]:
    """``count`` of ``rows``: a shuffled prefix, or (``repeat``) shuffled passes over all of them.

    Raises:
        ValueError: more than ``len(rows)`` asked for without ``repeat``.
    """
    if count > len(rows) and not repeat:
        raise ValueError(f"{count} distinct problems asked of a level with {len(rows)}")
    out: list[dict[str, Any]] = []
    while len(out) < count:
        order = list(rows)
        rng.shuffle(order)
        out += order[: count - len(out)]
    return out


def regime_rows(
    spec: RegimeData, rows: Sequence[dict[str, Any]], counts: Sequence[int], split: str, repeat: bool
) -> list[dict[str, Any]]:
    """The regime's rows of one split, shuffled, re-indexed and relabelled with ``spec.source``."""
    rng = random.Random(f"testbed4-{split}-{spec.seed}")
    grouped = by_level(rows, spec.levels)
    out: list[dict[str, Any]] = []
    for level, count in zip(spec.levels, counts, strict=True):
        out += pick(grouped[level], count, rng, repeat)
    rng.shuffle(out)
    relabelled = []
    for i, row in enumerate(out):
        extra = {**row["extra_info"], "split": split, "index": i}
        relabelled.append({**row, "data_source": spec.source, "extra_info": extra})
    return relabelled


def ensure_regime(spec: RegimeData, base: Testbed, root: Path | None = None) -> Testbed:
    """The regime's data folder (written once, atomically), with ``model`` linking v3's model."""
    import pandas as pd

    if base.key != spec.base_key:
        raise ValueError(f"regime data for testbed {spec.base_key}, given testbed {base.key}")
    final = (root or cache_root() / "testbed4") / spec.key()
    if (final / MANIFEST).is_file():
        return Testbed(final, spec.key())
    val = pd.read_parquet(base.data / "val.parquet").to_dict("records")
    train = pd.read_parquet(base.data / "train.parquet").to_dict("records")
    with atomic_dir(final) as tmp:
        (tmp / "data").mkdir(parents=True)
        sets = (
            ("val", "test", val, spec.val_counts(), False),
            ("train", "train", train, spec.train_counts(), True),
        )
        for name, split, rows, counts, repeat in sets:
            out = regime_rows(spec, rows, counts, split, repeat)
            pd.DataFrame(out).to_parquet(tmp / "data" / f"{name}.parquet")
        (tmp / "model").symlink_to(base.model.resolve(), target_is_directory=True)
        manifest = {**asdict(spec), "val_counts": spec.val_counts(), "train_counts": spec.train_counts()}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return Testbed(final, spec.key())
