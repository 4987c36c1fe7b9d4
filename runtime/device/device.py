"""The abstract device (TVM's DeviceAPI merged with OneFlow's ep::Device).

Public methods validate arguments and keep the bookkeeping (buffer kinds, double
frees, bounds, host staging); a backend implements the underscored hooks only.
"""
import abc
import threading

import numpy as np

from .attrs import DeviceAttr
from .buffer import DeviceBuffer
from .checks import byte_range as _range, host_bytes, options_copy as _options, size as _size
from .errors import DeviceError
from .stream import Event, Stream


class Device(abc.ABC):
    """One device of one type, e.g. "cpu:0" or "gpu:1".

    Copies are queued on a stream (the thread's active stream unless given). A copy
    from host memory snapshots the source when it is called, so the caller may reuse
    its buffer at once; a copy into host memory writes it when the stream reaches the
    copy, so that buffer must stay alive and untouched until the stream is synced.

    A backend implements `_get_attr`, `_alloc`, `_free`, `_create_stream`,
    `_create_event` and the three `_copy_*` hooks; it may override `_alloc_pinned`,
    `_alloc_workspace` (default: data memory), their frees, `host_view`,
    `_on_activate`, `_destroy_event`, `_array_view` and `_import_dlpack`.
    """

    #: Minimum alignment of data allocations whose `ptr` is meaningful.
    alignment = 64

    def __init__(self, manager, index):
        self._manager = manager
        self._index = index
        self._lock = threading.Lock()
        self._default_stream = None
        self._local = threading.local()

    # -- identity -------------------------------------------------------------
    @property
    def manager(self):
        return self._manager

    @property
    def registry(self):
        return self._manager.registry

    @property
    def type(self):
        return self._manager.device_type

    device_type = type

    @property
    def index(self):
        return self._index

    device_index = index

    @property
    def dlpack_device(self):
        """(DLPack device type code, index), as `__dlpack_device__` reports it."""
        return (self.registry.device_type_code(self.type), self._index)

    def __str__(self):
        return f"{self.type}:{self._index}"

    def __repr__(self):
        return f"<{type(self).__name__} {self}>"

    # -- attributes -----------------------------------------------------------
    def get_attr(self, kind):
        """The value of attribute `kind`, or None where it does not apply or cannot be read."""
        kind = DeviceAttr.of(kind)
        try:
            return self._get_attr(kind)
        except (OSError, ValueError):  # unreadable or unparsable where it lives
            return None

    def attributes(self):
        """Every attribute this device answers, as {DeviceAttr: value}."""
        found = {kind: self.get_attr(kind) for kind in DeviceAttr}
        return {kind: value for kind, value in found.items() if value is not None}

    @property
    def name(self):
        return self.get_attr(DeviceAttr.DEVICE_NAME)

    @abc.abstractmethod
    def _get_attr(self, kind):
        ...

    # -- active device ---------------------------------------------------------
    def set_as_active(self):
        """Make this the calling thread's active device of its type."""
        self._manager.set_active_index(self._index)

    @property
    def is_active(self):
        return self._manager.active_index == self._index

    def _on_activate(self):
        """Backend hook run when this device becomes active (cudaSetDevice)."""

    # -- memory -----------------------------------------------------------------
    def alloc(self, nbytes, options=None):
        """Allocate `nbytes` of data memory on this device."""
        nbytes, options = _size(self, nbytes), _options(options)
        return self._tag(self._alloc(nbytes, options), nbytes, "data", options)

    def free(self, buffer):
        self._free(buffer, self._take(buffer, "data"))

    def alloc_pinned(self, nbytes, options=None):
        """Allocate host memory suited to transfers with this device (cudaMallocHost)."""
        nbytes, options = _size(self, nbytes), _options(options)
        if not options.has_pinned_device:
            options.set_pinned_device(self.type, self._index)
        return self._tag(self._alloc_pinned(nbytes, options), nbytes, "pinned", options)

    def free_pinned(self, buffer):
        self._free_pinned(buffer, self._take(buffer, "pinned"))

    def alloc_workspace(self, nbytes, options=None):
        """Allocate scratch memory for operator intermediates; it need not be
        transferable to the host. Defaults to a data allocation."""
        nbytes, options = _size(self, nbytes), _options(options)
        return self._tag(self._alloc_workspace(nbytes, options), nbytes, "workspace", options)

    def free_workspace(self, buffer):
        self._free_workspace(buffer, self._take(buffer, "workspace"))

    def host_view(self, buffer):
        """A 1-D uint8 numpy view of `buffer` when the host can address it, else None."""
        return None

    @abc.abstractmethod
    def _alloc(self, nbytes, options):
        """Return a DeviceBuffer of `nbytes` owned by this device."""

    @abc.abstractmethod
    def _free(self, buffer, handle):
        """Release `handle`, the backend object of the now freed `buffer`."""

    def _alloc_pinned(self, nbytes, options):
        raise DeviceError(f"{self}: pinned host memory is not supported")

    def _free_pinned(self, buffer, handle):
        self._free(buffer, handle)

    def _alloc_workspace(self, nbytes, options):
        return self._alloc(nbytes, options)

    def _free_workspace(self, buffer, handle):
        self._free(buffer, handle)

    def _tag(self, buffer, nbytes, kind, options):
        if not isinstance(buffer, DeviceBuffer) or buffer.nbytes != nbytes or buffer.device is not self:
            raise DeviceError(f"{self}: backend returned {buffer!r} for a {kind} allocation")
        buffer.kind = kind
        buffer.options = options
        if options.numa_node is not None and buffer.numa_honored is None:
            buffer.numa_honored = False  # advisory: a backend that ignored it did not honor it
        return buffer

    def _take(self, buffer, kind):
        if not isinstance(buffer, DeviceBuffer):
            raise DeviceError(f"{self}: cannot free {type(buffer).__name__}, expected a DeviceBuffer")
        if buffer.device is not self:
            raise DeviceError(f"{self}: cannot free a buffer that belongs to {buffer.device}")
        if buffer.kind != kind:
            verb = {"data": "free", "pinned": "free_pinned", "workspace": "free_workspace"}
            how = f"free it with {verb[buffer.kind]}()" if buffer.kind in verb else "it is borrowed"
            raise DeviceError(f"{self}: {buffer.kind} buffer passed to {verb[kind]}(); {how}")
        return buffer.mark_freed()

    # -- streams ----------------------------------------------------------------
    def create_stream(self):
        """A new stream; destroy it with destroy_stream (or use it in a `with`)."""
        return self._checked_stream(self._create_stream())

    def destroy_stream(self, stream):
        self._own_stream(stream)
        if stream is self._default_stream:
            raise DeviceError(f"{self}: the default stream cannot be destroyed")
        stream.check_alive()
        if getattr(self._local, "stream", None) is stream:
            self._local.stream = None
        try:
            stream._destroy()
        finally:
            stream._destroyed = True

    @property
    def default_stream(self):
        with self._lock:
            if self._default_stream is None:
                self._default_stream = self._checked_stream(self._create_stream())
            return self._default_stream

    @property
    def active_stream(self):
        """The calling thread's stream for work on this device (TVM's SetStream)."""
        return getattr(self._local, "stream", None) or self.default_stream

    def set_stream(self, stream):
        """Make `stream` the calling thread's active stream; None selects the default."""
        if stream is not None:
            self._own_stream(stream)
            stream.check_alive()
        self._local.stream = stream

    def sync_stream_from_to(self, src, dst):
        """Work queued on `dst` after this call waits for all work queued on `src` so far."""
        event = self.create_event()
        src.record_event(event)
        dst.wait_event(event)
        self.destroy_event(event)

    @abc.abstractmethod
    def _create_stream(self):
        ...

    def _own_stream(self, stream):
        if not isinstance(stream, Stream) or stream.device.type != self.type:
            raise DeviceError(f"{self}: {stream!r} is not a stream of a {self.type} device")

    def _checked_stream(self, stream):
        if not isinstance(stream, Stream):
            raise DeviceError(f"{self}: backend returned {stream!r}, not a Stream")
        return stream

    # -- events -----------------------------------------------------------------
    def create_event(self):
        return self.create_events(1)[0]

    def destroy_event(self, event):
        self.destroy_events([event])

    def create_events(self, count):
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise DeviceError(f"{self}: event count must be a non-negative int, got {count!r}")
        return [self._create_event() for _ in range(count)]

    def destroy_events(self, events):
        events = list(events)
        for event in events:
            if not isinstance(event, Event) or event.device.type != self.type:
                raise DeviceError(f"{self}: {event!r} is not an event of a {self.type} device")
            event.check_alive()
        for event in events:
            event._destroyed = True
            self._destroy_event(event)

    @abc.abstractmethod
    def _create_event(self):
        ...

    def _destroy_event(self, event):
        """Backend hook to release an event; nothing to do when it is garbage collected."""

    # -- copies -----------------------------------------------------------------
    def copy(self, src, dst, nbytes=None, src_offset=0, dst_offset=0, stream=None):
        """Copy bytes in the direction the arguments imply (TVM's CopyDataFromTo):
        a DeviceBuffer is device memory, anything else a host buffer."""
        src_dev, dst_dev = isinstance(src, DeviceBuffer), isinstance(dst, DeviceBuffer)
        if src_dev and dst_dev:
            op = self.copy_device_to_device
        elif dst_dev:
            op = self.copy_host_to_device
        elif src_dev:
            op = self.copy_device_to_host
        else:
            raise DeviceError(f"{self}: copy needs at least one DeviceBuffer")
        return op(src, dst, nbytes, src_offset, dst_offset, stream)

    def copy_host_to_device(self, src, dst, nbytes=None, src_offset=0, dst_offset=0, stream=None):
        host = host_bytes(src, writable=False, where=self)
        nbytes = _range(self, nbytes, host.size, src_offset, self._device_side(dst).nbytes,
                        dst_offset)
        staged = host[src_offset:src_offset + nbytes].copy()
        if nbytes:
            self._copy_host_to_device(staged, dst, dst_offset, self._stream(stream))

    def copy_device_to_host(self, src, dst, nbytes=None, src_offset=0, dst_offset=0, stream=None):
        host = host_bytes(dst, writable=True, where=self)
        nbytes = _range(self, nbytes, self._device_side(src).nbytes, src_offset, host.size,
                        dst_offset)
        if nbytes:
            self._copy_device_to_host(src, src_offset, host[dst_offset:dst_offset + nbytes],
                                      self._stream(stream))

    def copy_device_to_device(self, src, dst, nbytes=None, src_offset=0, dst_offset=0,
                              stream=None):
        for buf in (src, dst):
            if not isinstance(buf, DeviceBuffer) or buf.device.type != self.type:
                raise DeviceError(f"{self}: device-to-device copy needs {self.type} buffers, "
                                  f"got {buf!r}; go through the host between device types")
            buf.check_alive()
        if src.device is not self and dst.device is not self:
            raise DeviceError(f"{self}: neither {src.device} nor {dst.device} is this device")
        nbytes = _range(self, nbytes, src.nbytes, src_offset, dst.nbytes, dst_offset)
        if nbytes:
            self._copy_device_to_device(src, src_offset, dst, dst_offset, nbytes,
                                        self._stream(stream))

    @abc.abstractmethod
    def _copy_host_to_device(self, staged, dst, dst_offset, stream):
        """Queue writing `staged` (a private uint8 array) into `dst` at `dst_offset`."""

    @abc.abstractmethod
    def _copy_device_to_host(self, src, src_offset, host, stream):
        """Queue reading `host.size` bytes of `src` at `src_offset` into the uint8 view `host`."""

    @abc.abstractmethod
    def _copy_device_to_device(self, src, src_offset, dst, dst_offset, nbytes, stream):
        ...

    def _device_side(self, buf):
        if not isinstance(buf, DeviceBuffer) or buf.device is not self:
            raise DeviceError(f"{self}: expected a DeviceBuffer of this device, got {buf!r}")
        buf.check_alive()
        return buf

    def _stream(self, stream):
        if stream is None:
            return self.active_stream
        self._own_stream(stream)
        stream.check_alive()
        return stream

    # -- tensors (hooks used by Tensor) -----------------------------------------
    def _array_view(self, buffer, shape, dtype, strides, byte_offset):
        """A native array (numpy, cupy, ...) over `buffer`; byte strides. Host-addressable
        memory gets a numpy view; other backends override."""
        flat = self.host_view(buffer)
        if flat is None:
            raise DeviceError(f"{self}: no array view of device memory is available")
        return np.ndarray(shape, dtype, buffer=flat, offset=byte_offset, strides=strides)

    def _import_dlpack(self, obj):
        """Borrow `obj`'s memory without a copy: (buffer, native array)."""
        raise DeviceError(f"{self}: importing DLPack tensors is not supported")

