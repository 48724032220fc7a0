"""weight_wire: which tensors travel as numpy buffers, and that every dtype round-trips exactly."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
import torch

from recipe.cpu_backend.weight_wire import pack, unpack


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64])
def test_round_trip_through_pickle_5_is_exact(dtype: torch.dtype) -> None:
    tensor = (torch.randn(5, 7) * 100).to(dtype)
    sent = pickle.loads(pickle.dumps(pack(tensor), protocol=5))  # what Ray does to call arguments
    got = unpack(sent)
    assert got.dtype == dtype
    assert torch.equal(got, tensor)


def test_numpy_where_numpy_has_the_dtype_and_a_view_not_a_copy() -> None:
    weight = torch.nn.Parameter(torch.randn(4, 3))
    packed = pack(weight)
    assert isinstance(packed, np.ndarray)
    assert np.shares_memory(packed, weight.detach().numpy())
    assert isinstance(pack(torch.zeros(2, dtype=torch.bfloat16)), torch.Tensor)  # numpy has no bfloat16


def test_unpack_of_a_read_only_buffer_is_silent_and_usable_as_a_copy_source() -> None:
    array = np.arange(6, dtype=np.float32)
    array.setflags(write=False)  # as arrays come out of Ray's object store
    target = torch.zeros(6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        target.copy_(unpack(array))
    assert target.tolist() == [0, 1, 2, 3, 4, 5]
