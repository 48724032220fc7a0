"""Map arbitrary ids (prompt uids, answer strings) to contiguous integer classes, and reduce per group.

This is the only place in ``copo_core`` that does per-item Python work: one dict pass over
ids that are not already numbers. Everything downstream is tensor code.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
import torch

__all__ = ["factorize_hashables", "group_inverse", "group_reduce"]


def factorize_hashables(
    values: Sequence[Hashable] | np.ndarray, *, name: str = "values"
) -> tuple[list[int], int]:
    """Number distinct hashable values in order of first appearance.

    Args:
        values: length-N sequence of hashable items (str, int, tuple, ...).
        name: argument name used in error messages.

    Returns:
        ``(codes, n_classes)``: ``codes[i]`` in ``[0, n_classes)``, equal codes for equal values.
    """
    table: dict[Hashable, int] = {}
    try:
        # setdefault returns the existing code or inserts the next free one: one dict op per item.
        codes = [table.setdefault(v, len(table)) for v in values]
    except TypeError as err:  # unhashable element (list, dict, ndarray ...)
        raise ValueError(f"`{name}` must contain hashable items (str, int, tuple ...): {err}") from err
    return codes, len(table)


def _integer_like_tensor(index: Any) -> torch.Tensor | None:
    """Return ``index`` as a 1-D tensor when it is a numeric tensor/array, else None."""
    if isinstance(index, torch.Tensor):
        return index.reshape(-1)
    if isinstance(index, np.ndarray) and index.dtype.kind in "biuf":
        return torch.from_numpy(np.ascontiguousarray(index).reshape(-1))
    return None


def group_inverse(
    index: Sequence[Hashable] | np.ndarray | torch.Tensor,
    *,
    device: torch.device | str | None = None,
    name: str = "index",
) -> tuple[torch.Tensor, int]:
    """Map prompt ids to contiguous group ids ``0..P-1``.

    Numeric tensors and numpy arrays take a ``torch.unique`` fast path (groups in sorted id
    order); anything else (verl's ``uid`` object array of str, lists, tuples) takes one dict
    pass (groups in order of first appearance). Ids are compared by equality only.

    Args:
        index: length-N prompt ids.
        device: device of the returned tensor (default: the tensor's own device, else CPU).
        name: argument name used in error messages.

    Returns:
        ``(inverse, P)``: ``inverse`` is a (N,) int64 tensor with values in ``[0, P)``.
    """
    numeric = _integer_like_tensor(index)
    if numeric is not None:
        if numeric.dtype.is_floating_point and not bool(torch.isfinite(numeric).all()):
            raise ValueError(f"`{name}` holds NaN/inf ids; use finite numbers or strings as prompt ids")
        unique, inverse = torch.unique(numeric, return_inverse=True)
        inverse = inverse.to(dtype=torch.long)
        if device is not None:
            inverse = inverse.to(device)
        return inverse, int(unique.numel())
    if isinstance(index, (str, bytes)):
        raise ValueError(f"`{name}` must be a sequence of ids, got a single {type(index).__name__}")
    values = index.tolist() if isinstance(index, np.ndarray) else index
    codes, n_groups = factorize_hashables(values, name=name)
    inverse = torch.tensor(codes, dtype=torch.long, device=device)
    return inverse, n_groups


def group_reduce(
    values: torch.Tensor, group_index: torch.Tensor, num_groups: int, reduce: str
) -> torch.Tensor:
    """(N,) -> (P,) per-group ``"sum"``, ``"amax"`` or ``"amin"`` of ``values``, in their dtype.

    Sums use ``index_add_`` (the op order verl's GRPO statistics match bit for bit); a group with no
    member gets 0 for ``sum`` and -inf / +inf for ``amax`` / ``amin``.
    """
    out = torch.zeros(num_groups, dtype=values.dtype, device=values.device)
    if reduce == "sum":
        return out.index_add_(0, group_index, values)
    init = {"amax": -math.inf, "amin": math.inf}[reduce]
    return out.fill_(init).scatter_reduce_(0, group_index, values, reduce)


def check_step_batch(
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    scores: torch.Tensor,
    index: Sequence[Hashable] | np.ndarray | torch.Tensor,
) -> None:
    """Raise ValueError unless ``advantages`` and ``response_mask`` are both (N, L) and ``scores`` (N,)
    and ``index`` (length N) describe the same N responses (the step metrics' inputs)."""
    n = scores.shape[0]
    if advantages.shape != response_mask.shape or advantages.dim() != 2 or advantages.shape[0] != n:
        raise ValueError(
            "`advantages` and `response_mask` must both be (N, L) with N = len(scores) = "
            f"{n}, got {tuple(advantages.shape)} and {tuple(response_mask.shape)}"
        )
    if len(index) != n:
        raise ValueError(f"`index` has length {len(index)} but `scores` has {n} responses")
