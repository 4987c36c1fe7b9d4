"""A handle to memory that a device allocated."""
import threading

from .errors import DeviceError

KINDS = ("data", "workspace", "pinned", "external")


class DeviceBuffer:
    """Memory owned by `device`: `nbytes` long, of kind data, workspace, pinned
    (host memory for transfers with `device`) or external (borrowed via DLPack).

    `handle` is the backend's object (a numpy uint8 array on the host), opaque to
    everyone else; `ptr` is the integer address where one is meaningful, else None.
    Freeing goes through the device, which marks the buffer freed so a second free
    or any later use raises DeviceError.
    """

    __slots__ = ("device", "nbytes", "kind", "options", "numa_honored", "ready", "_handle", "_ptr",
                 "_freed", "_lock", "__weakref__")

    def __init__(self, device, nbytes, handle, ptr=None, kind="data", options=None):
        if kind not in KINDS:
            raise DeviceError(f"{device}: unknown buffer kind {kind!r}")
        self.device = device
        self.nbytes = nbytes
        self.kind = kind
        self.options = options
        # None: no NUMA node was requested; True/False: whether the request was honored.
        self.numa_honored = None
        # An Event that work reading this buffer must wait for (a borrowed buffer's
        # producer, per the DLPack stream protocol), or None.
        self.ready = None
        self._handle = handle
        self._ptr = ptr
        self._freed = False
        self._lock = threading.Lock()

    @property
    def freed(self):
        return self._freed

    @property
    def handle(self):
        self.check_alive()
        return self._handle

    @property
    def ptr(self):
        self.check_alive()
        return self._ptr

    def check_alive(self):
        if self._freed:
            raise DeviceError(f"{self.device}: {self.kind} buffer of {self.nbytes} bytes "
                              f"was already freed")

    def mark_freed(self):
        """Atomically mark this buffer freed; a second call raises (double free)."""
        with self._lock:
            self.check_alive()
            self._freed = True
            handle, self._handle = self._handle, None
        return handle

    def __repr__(self):
        state = "freed" if self._freed else f"ptr=0x{self._ptr or 0:x}"
        return f"<DeviceBuffer {self.device} {self.kind} {self.nbytes} bytes {state}>"
