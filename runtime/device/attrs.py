"""The attribute kinds a device can be asked about (TVM's DeviceAttrKind)."""
import enum

from .errors import DeviceError


class DeviceAttr(str, enum.Enum):
    """A device attribute kind; `Device.get_attr` answers None where it does not apply."""

    EXIST = "exist"
    DEVICE_NAME = "device_name"
    MAX_THREADS_PER_BLOCK = "max_threads_per_block"
    WARP_SIZE = "warp_size"
    MAX_SHARED_MEMORY_PER_BLOCK = "max_shared_memory_per_block"
    COMPUTE_VERSION = "compute_version"
    MAX_CLOCK_RATE = "max_clock_rate"          # kHz
    MULTI_PROCESSOR_COUNT = "multi_processor_count"
    MAX_THREAD_DIMENSIONS = "max_thread_dimensions"
    MAX_REGISTERS_PER_BLOCK = "max_registers_per_block"
    API_VERSION = "api_version"
    DRIVER_VERSION = "driver_version"
    L2_CACHE_SIZE = "l2_cache_size"            # bytes
    TOTAL_MEMORY = "total_memory"              # bytes
    AVAILABLE_MEMORY = "available_memory"      # bytes
    NUM_THREADS = "num_threads"                # hardware threads usable by this process
    VECTOR_WIDTH = "vector_width"              # widest SIMD register, bytes
    NUMA_NODE_COUNT = "numa_node_count"

    @classmethod
    def of(cls, kind):
        """The kind named by `kind` (a DeviceAttr or its string value)."""
        if isinstance(kind, cls):
            return kind
        try:
            return cls(kind)
        except ValueError:
            known = ", ".join(k.value for k in cls)
            raise DeviceError(f"unknown device attribute kind {kind!r} (known: {known})") from None


# The Python type each kind's value has when it is not None; the conformance kit checks it.
ATTR_TYPES = {
    DeviceAttr.EXIST: bool,
    DeviceAttr.DEVICE_NAME: str,
    DeviceAttr.COMPUTE_VERSION: str,
    DeviceAttr.API_VERSION: str,
    DeviceAttr.DRIVER_VERSION: str,
    DeviceAttr.MAX_THREAD_DIMENSIONS: tuple,
}


def attr_type(kind):
    """The type of a non-None value of `kind` (int unless listed in ATTR_TYPES)."""
    return ATTR_TYPES.get(DeviceAttr.of(kind), int)
