import numpy as np
import pytest

from tcc.runtime.device import DeviceBuffer, DeviceError, Tensor, get_device



def test_numpy_passes_in_without_a_copy(rng):
    array = rng.standard_normal((4, 6))
    tensor = Tensor.from_dlpack(array)
    assert tensor.device is get_device("cpu:0")
    assert (tensor.shape, tensor.dtype, tensor.strides) == ((4, 6), np.float64, (6, 1))
    assert tensor.buffer.kind == "external" and tensor.buffer.ptr == array.ctypes.data
    view = tensor.numpy()
    assert np.shares_memory(view, array)
    array[2, 3] = 42.0
    assert view[2, 3] == 42.0


def test_tensor_passes_out_to_numpy_without_a_copy(rng):
    tensor = Tensor.empty((3, 5), np.int32)
    data = rng.integers(-1000, 1000, (3, 5), dtype=np.int32)
    tensor.numpy()[...] = data
    out = np.from_dlpack(tensor)
    assert tensor.__dlpack_device__() == (1, 0)
    assert np.shares_memory(out, tensor.numpy()) and out.ctypes.data == tensor.buffer.ptr
    np.testing.assert_array_equal(out, data)
    np.testing.assert_array_equal(np.asarray(tensor), data)


@pytest.mark.parametrize("index", [np.s_[::-1, ::2], np.s_[1:, 3], np.s_[:, ::-3], np.s_[2:2]])
def test_strided_views_round_trip(rng, index):
    base = rng.standard_normal((5, 7)).astype(np.float32)
    view = base[index]
    tensor = Tensor.from_dlpack(view)
    assert tensor.shape == view.shape
    assert tensor.strides == tuple(s // 4 for s in view.strides)
    back = np.from_dlpack(tensor)
    np.testing.assert_array_equal(back, view)
    if view.size:
        assert np.shares_memory(back, base)


def test_borrowed_memory_outlives_its_first_owner(rng):
    data = rng.standard_normal(1000)
    tensor = Tensor.from_dlpack(data.copy())  # only the tensor holds the array now
    exported = np.from_dlpack(tensor)
    del tensor
    np.testing.assert_array_equal(exported, data)


def test_contiguity():
    tensor = Tensor.empty((4, 1, 3), np.float16)
    assert tensor.is_contiguous and tensor.nbytes == 24 and tensor.size == 12
    assert not Tensor.from_dlpack(np.zeros((4, 4))[:, ::2]).is_contiguous
    assert Tensor.from_dlpack(np.zeros((4, 4))[1:3]).is_contiguous


def test_to_another_device_copies(rng):
    data = rng.standard_normal((8, 8))
    copied = Tensor.from_dlpack(data[::2], device="cpu:0").to("cpu:0")
    np.testing.assert_array_equal(copied.numpy(), data[::2])
    assert not np.shares_memory(copied.numpy(), data) and copied.is_contiguous


def test_tensor_must_fit_its_buffer():
    buf = get_device("cpu").alloc(64)
    Tensor(buf, (8,), np.float64)
    with pytest.raises(DeviceError, match="outside its 64-byte buffer"):
        Tensor(buf, (9,), np.float64)
    with pytest.raises(DeviceError, match="outside"):
        Tensor(buf, (8,), np.float64, byte_offset=8)
    with pytest.raises(DeviceError, match="outside"):
        Tensor(buf, (2,), np.float64, strides=(-1,))
    with pytest.raises(DeviceError, match="2 strides for 1 dims"):
        Tensor(buf, (2,), np.float64, strides=(1, 1))
    with pytest.raises(DeviceError, match="DeviceBuffer"):
        Tensor(np.zeros(8), (8,), np.float64)


def test_objects_without_dlpack_are_rejected():
    with pytest.raises(DeviceError, match="does not support DLPack"):
        Tensor.from_dlpack([1, 2, 3])


def test_freed_memory_cannot_be_viewed():
    tensor = Tensor.empty((2,), np.uint8)
    tensor.device.free(tensor.buffer)
    with pytest.raises(DeviceError, match="freed"):
        tensor.numpy()
    with pytest.raises(DeviceError, match="borrowed"):
        tensor.device.free(Tensor.from_dlpack(np.zeros(3)).buffer)


def test_pinned_buffers_back_tensors(rng):
    cpu = get_device("cpu")
    tensor = Tensor(cpu.alloc_pinned(48), (4, 3), np.float32)
    data = rng.standard_normal((4, 3)).astype(np.float32)
    np.copyto(tensor.numpy(), data)
    np.testing.assert_array_equal(np.from_dlpack(tensor), data)
    assert isinstance(tensor.buffer, DeviceBuffer) and tensor.buffer.kind == "pinned"
