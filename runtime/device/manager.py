"""Device managers and their factories (OneFlow's DeviceManager/DeviceManagerFactory)."""
import abc
import sys
import threading

from .errors import DeviceError


class DeviceManager(abc.ABC):
    """All devices of one type. `get_device` returns the same object for an index
    every time and is thread-safe; the active index is per thread (default 0)."""

    def __init__(self, registry, device_type):
        self._registry = registry
        self._type = device_type
        self._devices = {}
        self._lock = threading.Lock()
        self._local = threading.local()

    @property
    def registry(self):
        return self._registry

    @property
    def device_type(self):
        return self._type

    def get_device(self, index=None):
        """The device at `index` (the calling thread's active index if None)."""
        index = self.active_index if index is None else index
        self._check_index(index)
        with self._lock:
            device = self._devices.get(index)
            if device is None:
                device = self._devices[index] = self._new_device(index)
            return device

    def device_count(self, primary_device_index=None):
        """How many devices of this type exist. `primary_device_index` names the device
        to make active before querying, where a query needs one (a CUDA context)."""
        return self._device_count(primary_device_index)

    @property
    def active_index(self):
        return getattr(self._local, "index", 0)

    def set_active_index(self, index):
        """Make device `index` the calling thread's active device of this type."""
        device = self.get_device(index)
        device._on_activate()
        self._local.index = index

    def _check_index(self, index):
        if isinstance(index, bool) or not isinstance(index, int):
            raise DeviceError(f"{self._type}: device index must be an int, got {index!r}")
        count = self.device_count()
        if not 0 <= index < count:
            raise DeviceError(f"{self._type}:{index}: device index out of range "
                              f"({count} {self._type} device{'s' if count != 1 else ''})")

    @abc.abstractmethod
    def _new_device(self, index):
        ...

    @abc.abstractmethod
    def _device_count(self, primary_device_index):
        ...

    def __repr__(self):
        return f"<{type(self).__name__} {self._type}>"


class DeviceManagerFactory(abc.ABC):
    """Creates the manager of one device type; what a plugin registers.

    `device_type` is the canonical name ("gpu"), `aliases` other names for it
    ("cuda"), `dlpack_codes` the DLPack device types its memory appears as (the
    first is the one it exports); a type without one gets a private code.
    """

    device_type = None
    aliases = ()
    dlpack_codes = ()

    @property
    def device_type_name(self):
        return self.device_type

    @abc.abstractmethod
    def new_manager(self, registry):
        """A new DeviceManager for this type, owned by `registry`."""

    def version_info(self):
        """Driver and runtime library versions, as {component: version}."""
        return {}

    def dump_version_info(self, file=None):
        file = sys.stdout if file is None else file
        for component, version in self.version_info().items():
            print(f"{self.device_type}: {component} {version}", file=file)
