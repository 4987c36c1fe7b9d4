"""Argument checks shared by every device: sizes, options, byte ranges, host buffers."""
import numpy as np

from .buffer import DeviceBuffer
from .errors import DeviceError
from .options import AllocationOptions


def host_bytes(obj, writable, where):
    """`obj` (a buffer-protocol object or host-addressable DeviceBuffer) as a flat uint8 view."""
    if isinstance(obj, DeviceBuffer):
        obj.check_alive()
        view = obj.device.host_view(obj)
        if view is None:
            raise DeviceError(f"{where}: {obj!r} is not addressable by the host")
        return view
    if isinstance(obj, np.ndarray):
        if not obj.flags.c_contiguous:
            raise DeviceError(f"{where}: host array must be C-contiguous")
        if writable and not obj.flags.writeable:
            raise DeviceError(f"{where}: host destination array is read-only")
        return obj.reshape(-1).view(np.uint8)
    try:
        view = memoryview(obj)
    except TypeError:
        raise DeviceError(f"{where}: {type(obj).__name__} is not a host buffer") from None
    if not view.c_contiguous:
        raise DeviceError(f"{where}: host buffer must be C-contiguous")
    if writable and view.readonly:
        raise DeviceError(f"{where}: host destination buffer is read-only")
    return np.frombuffer(view.cast("B"), dtype=np.uint8)


def size(device, nbytes):
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or nbytes < 0:
        raise DeviceError(f"{device}: byte count must be a non-negative int, got {nbytes!r}")
    return int(nbytes)


def options_copy(options):
    if options is None:
        return AllocationOptions()
    if not isinstance(options, AllocationOptions):
        raise DeviceError(f"expected AllocationOptions, got {type(options).__name__}")
    return options.copy()


def byte_range(device, nbytes, src_size, src_offset, dst_size, dst_offset):
    for name, value in (("src_offset", src_offset), ("dst_offset", dst_offset)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise DeviceError(f"{device}: copy {name} must be a non-negative int, got {value!r}")
    if nbytes is None:
        nbytes = src_size - src_offset
    nbytes = size(device, nbytes)
    if src_offset + nbytes > src_size or dst_offset + nbytes > dst_size:
        raise DeviceError(f"{device}: copy of {nbytes} bytes out of range: source "
                          f"[{src_offset}, {src_offset + nbytes}) of {src_size}, destination "
                          f"[{dst_offset}, {dst_offset + nbytes}) of {dst_size}")
    return nbytes
