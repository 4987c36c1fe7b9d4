"""Tensors: strided views of device memory that pass through DLPack."""
import numpy as np

from .buffer import DeviceBuffer
from .errors import DeviceError
from .registry import default_registry


class Tensor:
    """`shape` and `dtype` over `buffer`, starting `byte_offset` bytes in, with
    `strides` counted in elements as DLPack and torch count them.

    `__dlpack__`/`__dlpack_device__` hand the memory to numpy, cupy or torch without a
    copy; `Tensor.from_dlpack` borrows theirs. Views never synchronize: sync the streams
    writing a tensor before reading it through a view.
    """

    __slots__ = ("buffer", "shape", "dtype", "strides", "byte_offset")

    def __init__(self, buffer, shape, dtype, strides=None, byte_offset=0):
        if not isinstance(buffer, DeviceBuffer):
            raise DeviceError(f"Tensor needs a DeviceBuffer, got {type(buffer).__name__}")
        self.buffer = buffer
        self.shape = tuple(_ints(shape, "shape", minimum=0))
        self.dtype = np.dtype(dtype)
        self.strides = (_contiguous_strides(self.shape) if strides is None
                        else tuple(_ints(strides, "strides")))
        self.byte_offset = _ints([byte_offset], "byte_offset", minimum=0)[0]
        if len(self.strides) != len(self.shape):
            raise DeviceError(f"Tensor: {len(self.strides)} strides for {len(self.shape)} dims")
        lo, hi = self._extent()
        if self.size and (lo < 0 or hi > buffer.nbytes):
            raise DeviceError(f"Tensor {self.shape} {self.dtype} reaches bytes [{lo}, {hi}) "
                              f"outside its {buffer.nbytes}-byte buffer on {buffer.device}")

    # -- description ------------------------------------------------------------
    @property
    def device(self):
        return self.buffer.device

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def itemsize(self):
        return self.dtype.itemsize

    @property
    def nbytes(self):
        return self.size * self.itemsize

    @property
    def is_contiguous(self):
        dims = [(n, s) for n, s in zip(self.shape, self.strides) if n != 1]
        return self.size == 0 or all(s == e for (n, s), e in
                                     zip(dims, _contiguous_strides(tuple(n for n, _ in dims))))

    def __repr__(self):
        return f"Tensor(shape={self.shape}, dtype={self.dtype}, device={self.device})"

    # -- construction -----------------------------------------------------------
    @classmethod
    def empty(cls, shape, dtype, device="cpu", registry=None):
        """A new contiguous tensor on `device` (a Device or a name like "cpu:0")."""
        device = (registry or default_registry).get_device(device)
        shape = tuple(_ints(shape, "shape", minimum=0))
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        return cls(device.alloc(nbytes), shape, dtype)

    @classmethod
    def from_dlpack(cls, obj, device=None, registry=None):
        """Borrow `obj`'s memory (anything with `__dlpack__`) without copying; with
        `device` given and different from where `obj` lives, copy it there instead."""
        registry = registry or default_registry
        if isinstance(obj, Tensor):
            tensor = obj
        else:
            if not hasattr(obj, "__dlpack__") or not hasattr(obj, "__dlpack_device__"):
                raise DeviceError(f"{type(obj).__name__} does not support DLPack")
            code, index = obj.__dlpack_device__()
            home = registry.get_device((registry.device_type_name(int(code)), int(index)))
            buffer, shape, dtype, byte_strides, offset = home._import_dlpack(obj)
            strides = [s // dtype.itemsize for s in byte_strides]
            if any(s % dtype.itemsize for s in byte_strides):
                raise DeviceError(f"{type(obj).__name__}: strides {byte_strides} are not "
                                  f"whole elements of {dtype}")
            tensor = cls(buffer, shape, dtype, strides, offset)
        if device is None or registry.get_device(device) is tensor.device:
            return tensor
        return tensor.to(device, registry)

    # -- DLPack -----------------------------------------------------------------
    def native(self):
        """The backend's own array over this memory (numpy on the host), no copy."""
        strides = tuple(s * self.itemsize for s in self.strides)
        return self.device._array_view(self.buffer, self.shape, self.dtype, strides,
                                       self.byte_offset)

    def __dlpack__(self, **kwargs):
        return self.native().__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.native().__dlpack_device__()

    # -- moving data --------------------------------------------------------------
    def numpy(self):
        """A numpy array: a view for host-addressable memory, else a synchronous copy."""
        if self.device.host_view(self.buffer) is not None:
            return self.native()
        return self._to_host()

    def __array__(self, dtype=None, copy=None):
        if self.device.host_view(self.buffer) is None:
            raise DeviceError(f"{self.device}: implicit conversion to numpy would copy "
                              f"device memory; call .numpy()")
        array = self.native().copy() if copy else self.native()
        return array if dtype is None else array.astype(dtype, copy=False)

    def to(self, device, registry=None):
        """A contiguous copy on `device`, complete when this returns."""
        target = (registry or default_registry).get_device(device)
        out = Tensor.empty(self.shape, self.dtype, target)
        if self.device.type == target.type and self.is_contiguous and \
                self.device.host_view(self.buffer) is None:
            stream = target.active_stream
            target.copy_device_to_device(self.buffer, out.buffer, self.nbytes,
                                         self._first_byte(), 0, stream)
        else:
            stream = target.active_stream
            target.copy_host_to_device(np.ascontiguousarray(self.numpy()), out.buffer,
                                       stream=stream)
        stream.sync()
        return out

    def _to_host(self):
        if not self.is_contiguous:
            raise DeviceError(f"{self.device}: copying a non-contiguous device tensor to the "
                              f"host is not supported")
        out = np.empty(self.shape, self.dtype)
        stream = self.device.active_stream
        stream.sync()  # work already queued that writes this tensor lands first
        self.device.copy_device_to_host(self.buffer, out, self.nbytes, self._first_byte(),
                                        0, stream)
        stream.sync()
        return out

    def _first_byte(self):
        return self._extent()[0] if self.size else 0

    def _extent(self):
        lo = hi = self.byte_offset
        for n, s in zip(self.shape, self.strides):
            step = (n - 1) * s * self.itemsize
            lo, hi = lo + min(0, step), hi + max(0, step)
        return lo, hi + self.itemsize


def _contiguous_strides(shape):
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _ints(values, what, minimum=None):
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise DeviceError(f"Tensor {what} must be ints, got {v!r}")
        if minimum is not None and v < minimum:
            raise DeviceError(f"Tensor {what} must be >= {minimum}, got {v}")
        out.append(int(v))
    return out
