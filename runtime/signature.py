"""What every session kind shares: the signature (like onnx-mlir's
OMExecutionSession), matching the caller's inputs to it and checking them,
inputs living on devices (DLPack), and aligned output buffers."""
from __future__ import annotations

import ctypes
import sys

import numpy as np

from tcc.dialects.ir.errors import TccError

ALIGN = 64


class InputError(TccError):
    pass


_addressof, _char_at = ctypes.addressof, ctypes.c_char.from_buffer


def data_ptr(a):
    """The address of a numpy array's data: ctypes.c_char.from_buffer is
    ~4x cheaper than a.ctypes.data (0.7 against 3 us; a small model's call
    takes several), but refuses read-only and empty arrays."""
    try:
        return _addressof(_char_at(a))
    except (TypeError, ValueError):
        return a.ctypes.data


def check_index_range(spec, v):
    """Refuses an input whose values index a tensor out of its range (an
    embedding's token ids past the vocabulary), as onnxruntime does: the
    generated code would clamp them and answer wrongly. A min and a max:
    about 2 us on a batch of token ids."""
    n, user = spec.index_bound
    if v.size == 0 or (v.min() >= -n and v.max() < n):
        return
    bad = tuple(int(i) for i in np.argwhere((v < -n) | (v >= n))[0])
    raise InputError(f"input '{spec.name}' element {list(bad)} is {v[bad]}, out of range [-{n}, {n - 1}] "
                     f"for {user}")


def byte_size(n):
    """n bytes for a message: '512 bytes', '4.00 TiB'."""
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} TiB"


class AllocationError(MemoryError):
    """Memory a run or a load could not get, naming what asked for it and
    how much (numpy's own message names an anonymous uint8 array)."""

    def __init__(self, what, name, dtype, shape, nbytes, where=""):
        super().__init__(f"cannot allocate {byte_size(nbytes)} for {what} '{name}' "
                         f"({np.dtype(dtype)}{list(shape)}){where}")


def aligned_empty(shape, dtype, align=ALIGN):
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(n + align, dtype=np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off:off + n].view(dtype).reshape(shape)


def signature(specs):
    """[{name, shape, dtype}]; a dynamic dim (-1 in a spec) is None. A
    sequence or optional adds `container` (["seq"], ["opt", "seq"]...:
    runtime/containers.py); its shape is its elements' (None: any rank)."""
    out = []
    for t in specs:
        d = {"name": t.name, "shape": None if t.shape is None else [None if d < 0 else d for d in t.shape],
             "dtype": str(t.dtype)}
        if t.container:
            d["container"] = list(t.container)
        out.append(d)
    return out


def _format_spec(t):
    if t.container:
        from .containers import describe
        return f"{t.name}: {describe(t.container, t.shape, t.dtype)}"
    return f"{t.name}: {t.dtype}{list(t.shape)}"


def format_specs(specs):
    return ", ".join(_format_spec(t) for t in specs)


def device_tensor(value):
    """`value` as a tcc Tensor when it lives in non-host memory (anything
    speaking DLPack), else None."""
    from .device.tensor import Tensor
    if isinstance(value, Tensor):
        return value if value.device.host_view(value.buffer) is None else None
    if isinstance(value, np.ndarray) or not hasattr(value, "__dlpack_device__"):
        return None
    code, _ = value.__dlpack_device__()
    if int(code) in (1, 3):  # kDLCPU, kDLCUDAHost: numpy reads it in place
        return None
    return Tensor.from_dlpack(value)


def host_array(value):
    """`value` itself, or a host copy of it when it lives on a device."""
    t = device_tensor(value)
    return value if t is None else np.ascontiguousarray(t.numpy())


def target_device(output_device):
    """The Device outputs go to, or None for plain numpy on the host."""
    if output_device is None:
        return None
    from .device import get_device
    dev = get_device(output_device)
    return None if dev.type == "cpu" else dev


def string_input(v, spec, specs):
    """A string input as the object array of str the runtime computes on:
    numpy 'U' arrays (what np.array(["a"]) makes and .npy files hold) are
    converted, bytes are decoded as UTF-8; anything else is refused."""
    if v.dtype.kind == "U":
        return v.astype(object)
    if v.dtype.kind == "S":
        v = v.astype(object)
    if v.dtype != object:
        raise InputError(f"input '{spec.name}' has dtype {v.dtype}, expected strings (a numpy str or object "
                         f"array; signature: {format_specs(specs)})")
    flat, copied = v.reshape(-1), False
    for k, s in enumerate(flat):
        if type(s) is str:
            continue
        where = [int(i) for i in np.unravel_index(k, v.shape)]
        if isinstance(s, bytes):
            try:
                s = s.decode("utf-8")
            except UnicodeDecodeError as e:
                raise InputError(f"input '{spec.name}' element {where} is not valid UTF-8 "
                                 f"(byte {e.start})") from None
            if not copied:  # the caller's array stays as it is
                v, copied = v.copy(), True
                flat = v.reshape(-1)
            flat[k] = s
            continue
        raise InputError(f"input '{spec.name}' element {where} is {type(s).__name__}, expected str")
    return v


def _refs(entry):
    """Reference counts of a cached output array and of its memory's owner."""
    return sys.getrefcount(entry[0]), sys.getrefcount(entry[1])


def _container_value(spec, value):
    """A sequence (a list) or optional (None or the value) input, checked."""
    from .containers import check
    try:
        return check(spec.name, spec.container, spec.shape, spec.dtype, value, host_array)
    except ValueError as e:
        raise InputError(str(e)) from None


class SignatureMixin:
    """What every session kind shares: the signature (like onnx-mlir's
    OMExecutionSession) and matching the caller's inputs to it. Subclasses
    set `_inputs` and `_outputs` (TensorSpec lists)."""

    @property
    def input_signature(self):
        """[{name, shape, dtype}] of the inputs, in order."""
        return signature(self._inputs)

    @property
    def output_signature(self):
        return signature(self._outputs)

    @property
    def input_names(self):
        return [t.name for t in self._inputs]

    @property
    def output_names(self):
        return [t.name for t in self._outputs]

    def _output_buffer(self, i, spec):
        """A fresh output array, or last call's one when nothing outside
        this session references it or its memory any more: large outputs
        then cost no page faults per call (as a runtime's arena would)."""
        cache = self.__dict__.setdefault("_out_cache", {})
        hit = cache.get(i)
        if hit is not None and _refs(hit) == hit[2]:
            return hit[0], hit[3]
        try:
            arr = aligned_empty(spec.shape, spec.dtype)
        except MemoryError:  # an output the inputs made too large (an Expand to [2^20, 2^20])
            n = int(np.prod(spec.shape, dtype=np.int64)) * np.dtype(spec.dtype).itemsize
            raise AllocationError("output", spec.name, spec.dtype, spec.shape, n) from None
        entry = [arr, arr.base if arr.base is not None else arr, None, arr.ctypes.data]
        del arr
        entry[2] = _refs(entry)  # the counts when only the cache holds them
        cache[i] = entry
        return entry[0], entry[3]

    def _arrange(self, inputs):
        specs = self._inputs
        if isinstance(inputs, dict):
            names = self.__dict__.get("_in_names")
            if names is None:
                names = self._in_names = tuple(t.name for t in specs)
            if len(inputs) == len(names):  # then every name present means no unknown one
                try:
                    return [inputs[n] for n in names]
                except KeyError:
                    pass
            unknown = [k for k in inputs if k not in {t.name for t in specs}]
            if unknown:
                raise InputError(f"unknown input '{unknown[0]}'; the model takes {format_specs(specs)}")
            missing = [t.name for t in specs if t.name not in inputs]
            if missing:
                raise InputError(f"missing input '{missing[0]}'; the model takes {format_specs(specs)}")
            return [inputs[t.name] for t in specs]
        inputs = list(inputs)
        if len(inputs) != len(specs):
            raise InputError(f"got {len(inputs)} inputs, the model takes {len(specs)}: {format_specs(specs)}")
        return inputs

    def _check_meta(self, spec, dtype, shape):
        if dtype != spec.dtype:
            raise InputError(f"input '{spec.name}' has dtype {dtype}, expected {spec.dtype} "
                             f"(signature: {format_specs(self._inputs)})")
        if tuple(shape) != tuple(spec.shape):
            raise InputError(f"input '{spec.name}' has shape {list(shape)}, expected {list(spec.shape)} "
                             f"(signature: {format_specs(self._inputs)})")

    def _check_dynamic(self, inputs):
        """The inputs as host arrays, checked against a signature whose
        dynamic dims (-1) take any size."""
        specs = self._inputs
        inputs = [_container_value(t, v) if t.container else np.asarray(host_array(v))
                  for v, t in zip(self._arrange(inputs), specs)]
        for i, (v, t) in enumerate(zip(inputs, specs)):
            if t.container:
                continue
            if t.dtype == object:
                v = inputs[i] = string_input(v, t, specs)
            if v.dtype != t.dtype:
                raise InputError(f"input '{t.name}' has dtype {v.dtype}, expected {t.dtype} "
                                 f"(signature: {format_specs(specs)})")
            if len(v.shape) != len(t.shape) or any(d >= 0 and d != s for d, s in zip(t.shape, v.shape)):
                want = ["?" if d < 0 else d for d in t.shape]
                raise InputError(f"input '{t.name}' has shape {list(v.shape)}, expected {want} "
                                 f"(signature: {format_specs(specs)})")
            if t.index_bound:
                check_index_range(t, v)
        return inputs

    def _prepare_any(self, value, spec):
        """A numpy array for host values, or a checked tcc Tensor for values
        living on another device (DLPack: cupy, torch CUDA tensors, Tensor)."""
        t = device_tensor(value)
        if t is None:
            return self._prepare(value, spec)
        self._check_meta(spec, t.dtype, t.shape)
        return t

    def _deliver(self, arrays, output_device):
        """Host output arrays as the caller asked: numpy (the default), or
        tcc Tensors on `output_device` (DLPack-capable: cupy.from_dlpack,
        torch.from_dlpack, .numpy())."""
        dev = target_device(output_device)
        if dev is None:
            return arrays
        from .device.tensor import Tensor
        return [Tensor.from_dlpack(a, device=dev) for a in arrays]

    def _prepare(self, value, spec):
        if type(value) is np.ndarray and value.dtype == spec.dtype and value.shape == spec.shape \
                and value.flags.c_contiguous and value.flags.aligned:
            if spec.index_bound:
                check_index_range(spec, value)
            return value  # the common case, first: it is on every call's path
        value = host_array(value)  # device memory: a host session computes on a host copy
        if not isinstance(value, np.ndarray):
            value = np.asarray(value, dtype=spec.dtype)
        self._check_meta(spec, value.dtype, value.shape)
        if spec.index_bound:
            check_index_range(spec, value)
        # Generated code assumes only element alignment (what numpy
        # guarantees), so a contiguous array is used in place: copying a
        # large input cost more than the whole fused kernel.
        if value.flags.c_contiguous and value.flags.aligned:
            return value
        return np.ascontiguousarray(value)
