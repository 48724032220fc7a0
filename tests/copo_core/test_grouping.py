"""group_inverse: same id <-> same group, for every accepted id container."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from copo_core import group_inverse

ids = st.one_of(st.integers(-5, 5), st.sampled_from(["a", "b", "", "uid-1"]), st.tuples(st.integers(0, 2)))


def _check_partition(index: list, inverse: torch.Tensor, n_groups: int) -> None:
    assert inverse.dtype == torch.long and inverse.shape == (len(index),)
    assert n_groups == len(set(index))
    assert sorted(set(inverse.tolist())) == list(range(n_groups))
    for i in range(len(index)):
        for j in range(len(index)):
            assert (index[i] == index[j]) == (inverse[i] == inverse[j]).item()


@settings(max_examples=150, deadline=None)
@given(index=st.lists(ids, min_size=1, max_size=30))
def test_hashable_ids(index: list) -> None:
    _check_partition(index, *group_inverse(index))
    _check_partition(index, *group_inverse(np.array(index + [None], dtype=object)[:-1]))


@settings(max_examples=100, deadline=None)
@given(index=st.lists(st.integers(-(2**40), 2**40), min_size=1, max_size=30))
def test_integer_fast_paths(index: list) -> None:
    _check_partition(index, *group_inverse(torch.tensor(index)))
    _check_partition(index, *group_inverse(np.array(index, dtype=np.int64)))


def test_float_and_string_arrays() -> None:
    _check_partition([0.5, 1.0, 0.5], *group_inverse(torch.tensor([0.5, 1.0, 0.5])))
    words = ["x", "y", "x", "z"]
    _check_partition(words, *group_inverse(np.array(words)))


def test_device_argument() -> None:
    inverse, _ = group_inverse(["a", "b"], device="cpu")
    assert inverse.device.type == "cpu"


@pytest.mark.parametrize(
    "bad", [[[1], [2]], "abc", torch.tensor([0.0, float("nan")])], ids=["unhashable", "string", "nan"]
)
def test_bad_index_raises(bad: object) -> None:
    with pytest.raises(ValueError, match="index"):
        group_inverse(bad)
