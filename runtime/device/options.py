"""Allocation options (OneFlow's AllocationOptions)."""
from .errors import DeviceError


class AllocationOptions:
    """How to allocate memory.

    `pinned_device`: host memory meant for transfers with one non-host device;
    it can be set once, and setting it again without clearing is an error.
    `numa_node`: an advisory NUMA node for host memory; it may be overwritten,
    and a backend may ignore it (the allocation records whether it was honored).
    """

    __slots__ = ("_pinned", "_numa")

    def __init__(self, pinned_device=None, numa_node=None):
        self._pinned = None
        self._numa = None
        if pinned_device is not None:
            self.set_pinned_device(*_split(pinned_device))
        self.numa_node = numa_node

    @property
    def has_pinned_device(self):
        return self._pinned is not None

    @property
    def pinned_device(self):
        """(device_type, index), or None when unset."""
        return self._pinned

    @property
    def pinned_device_type(self):
        return self._require_pinned()[0]

    @property
    def pinned_device_index(self):
        return self._require_pinned()[1]

    def set_pinned_device(self, device_type, index=0):
        if self._pinned is not None:
            raise DeviceError(f"AllocationOptions: pinned device is already "
                              f"{self._pinned[0]}:{self._pinned[1]}; clear it before setting "
                              f"{device_type}:{index}")
        if not isinstance(device_type, str) or not device_type:
            raise DeviceError(f"AllocationOptions: device type must be a name, got {device_type!r}")
        self._pinned = (device_type, _index(index))

    def clear_pinned_device(self):
        self._pinned = None

    @property
    def has_numa_node_affinity(self):
        return self._numa is not None

    @property
    def numa_node(self):
        """The requested NUMA node, or None."""
        return self._numa

    @numa_node.setter
    def numa_node(self, node):
        self._numa = None if node is None else _index(node)

    def clear_numa_node_affinity(self):
        self._numa = None

    def copy(self):
        other = AllocationOptions()
        other._pinned, other._numa = self._pinned, self._numa
        return other

    def _require_pinned(self):
        if self._pinned is None:
            raise DeviceError("AllocationOptions: no pinned device is set")
        return self._pinned

    def __eq__(self, other):
        return (isinstance(other, AllocationOptions)
                and (self._pinned, self._numa) == (other._pinned, other._numa))

    def __hash__(self):
        return hash((self._pinned, self._numa))

    def __repr__(self):
        return f"AllocationOptions(pinned_device={self._pinned!r}, numa_node={self._numa!r})"


def _split(spec):
    # Accepts ("gpu", 1), "gpu:1" or a Device, so callers need not unpack.
    if isinstance(spec, tuple):
        return spec
    if isinstance(spec, str):
        name, _, idx = spec.partition(":")
        return name, int(idx) if idx else 0
    return spec.type, spec.index


def _index(value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise DeviceError(f"AllocationOptions: expected a non-negative int, got {value!r}")
    return value
