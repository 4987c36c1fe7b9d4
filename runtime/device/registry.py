"""The device registry (OneFlow's DeviceManagerRegistry; TVM's device_api.* globals).

Device types are open-ended strings; each maps to an int code, its DLPack device
type where it has one, so DLPack tensors find their device.
"""
import re
import sys
import threading

from .device import Device
from .errors import DeviceError
from .manager import DeviceManagerFactory

_TYPE_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")
_SPEC = re.compile(r"\s*([A-Za-z][A-Za-z0-9_]*)\s*(?::\s*(\d+))?\s*\Z")
#: Codes for types without a DLPack device type; far above DLPack's own.
PRIVATE_CODE_BASE = 1 << 16


def parse_device_spec(spec):
    """"gpu:1" -> ("gpu", 1); "gpu" -> ("gpu", None); ("gpu", 1) is returned as is."""
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], str):
        return spec
    if isinstance(spec, str):
        match = _SPEC.match(spec)
        if match:
            index = match.group(2)
            return match.group(1).lower(), None if index is None else int(index)
    raise DeviceError(f"cannot parse device {spec!r}; expected 'type', 'type:index' "
                      f"or (type, index)")


class DeviceManagerRegistry:
    """Maps device types to factories and lazily created managers. The host factory
    ("cpu") is registered on first use unless another "cpu" factory came first."""

    def __init__(self, builtins=True):
        self._lock = threading.RLock()
        self._factories = {}
        self._managers = {}
        self._aliases = {}
        self._codes = {}
        self._names_by_code = {}
        self._builtins_pending = builtins

    def register(self, factory, replace=False):
        """Register `factory` for its device type; an existing type needs replace=True."""
        if not isinstance(factory, DeviceManagerFactory):
            raise DeviceError(f"expected a DeviceManagerFactory, got {type(factory).__name__}")
        name = factory.device_type
        if not isinstance(name, str) or not _TYPE_NAME.match(name):
            raise DeviceError(f"{type(factory).__name__}: device type must be a lowercase "
                              f"identifier, got {name!r}")
        with self._lock:
            self._load_builtins(skip=name)
            if name in self._factories:
                if not replace:
                    raise DeviceError(f"device type {name!r} is already registered "
                                      f"(by {type(self._factories[name]).__name__}); "
                                      f"pass replace=True to replace it")
                self._drop(name)
            self._check_names(name, factory)
            self._factories[name] = factory
            for alias in factory.aliases:
                self._aliases[alias] = name
            codes = tuple(factory.dlpack_codes) or (self._private_code(),)
            self._codes[name] = codes[0]
            for code in codes:
                self._names_by_code[code] = name

    def unregister(self, device_type):
        with self._lock:
            name = self._canonical(device_type)
            self._drop(name)

    @property
    def device_types(self):
        with self._lock:
            self._load_builtins()
            return tuple(self._factories)

    def __contains__(self, name):
        try:
            self._canonical(name)
        except DeviceError:
            return False
        return True

    def factory(self, device_type):
        with self._lock:
            return self._factories[self._canonical(device_type)]

    def get_device_manager(self, device_type):
        """The manager of `device_type` (a name or alias), created on first use."""
        with self._lock:
            name = self._canonical(device_type)
            manager = self._managers.get(name)
            if manager is None:
                manager = self._factories[name].new_manager(self)
                self._managers[name] = manager
            return manager

    def get_device(self, spec, index=None):
        """The device named by `spec`: "gpu:1", ("gpu", 1), "gpu" (the active one,
        unless `index` is given) or a Device (returned as is)."""
        if isinstance(spec, Device):
            return spec
        name, parsed = parse_device_spec(spec)
        if parsed is not None and index is not None and parsed != index:
            raise DeviceError(f"device {spec!r} conflicts with index={index}")
        return self.get_device_manager(name).get_device(parsed if index is None else index)

    def device_type_name(self, type_or_code):
        """The canonical type name for an int code, a name or an alias."""
        with self._lock:
            self._load_builtins()
            if isinstance(type_or_code, int) and not isinstance(type_or_code, bool):
                try:
                    return self._names_by_code[type_or_code]
                except KeyError:
                    raise DeviceError(f"no device type is registered for code "
                                      f"{type_or_code}") from None
            return self._canonical(type_or_code)

    def device_type_code(self, name):
        """The int code of a device type (its DLPack device type where it has one)."""
        with self._lock:
            return self._codes[self._canonical(name)]

    def dump_version_info(self, file=None):
        """Print every registered type's version info; return it as {type: {component: version}}."""
        file = sys.stdout if file is None else file
        with self._lock:
            self._load_builtins()
            factories = list(self._factories.values())
        for factory in factories:
            factory.dump_version_info(file)
        return {f.device_type: f.version_info() for f in factories}

    def _canonical(self, name):
        with self._lock:
            self._load_builtins()
            if not isinstance(name, str):
                raise DeviceError(f"device type must be a string, got {name!r}")
            key = name.lower()
            key = self._aliases.get(key, key)
            if key not in self._factories:
                known = ", ".join(sorted(self._factories)) or "none"
                raise DeviceError(f"unknown device type {name!r} (registered: {known})")
            return key

    def _check_names(self, name, factory):
        taken = set(self._factories) | set(self._aliases)
        if name in self._aliases:
            raise DeviceError(f"device type {name!r} is already an alias of "
                              f"{self._aliases[name]!r}")
        for alias in factory.aliases:
            if alias in taken or alias == name:
                raise DeviceError(f"device type {name!r}: alias {alias!r} is already taken")
        for code in factory.dlpack_codes:
            if code in self._names_by_code:
                raise DeviceError(f"device type {name!r}: DLPack code {code} already belongs "
                                  f"to {self._names_by_code[code]!r}")

    def _drop(self, name):
        self._factories.pop(name, None)
        self._managers.pop(name, None)
        self._codes.pop(name, None)
        for table in (self._aliases, self._names_by_code):
            for key in [k for k, v in table.items() if v == name]:
                del table[key]

    def _private_code(self):
        used = set(self._names_by_code)
        code = PRIVATE_CODE_BASE
        while code in used:
            code += 1
        return code

    def _load_builtins(self, skip=None):
        if not self._builtins_pending:
            return
        self._builtins_pending = False
        from .host import HostDeviceManagerFactory  # late: host.py imports this package
        if skip != HostDeviceManagerFactory.device_type:
            self.register(HostDeviceManagerFactory())


default_registry = DeviceManagerRegistry()


def get_device(spec, index=None):
    """A device of the default registry, e.g. get_device("cpu:0") (like tvm.runtime.device)."""
    return default_registry.get_device(spec, index)


def register_device_factory(factory, replace=False):
    """Register a DeviceManagerFactory in the default registry."""
    default_registry.register(factory, replace)
