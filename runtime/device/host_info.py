"""Attribute queries for the host CPU, from sysconf, /proc and /sys where present."""
import os
import platform

from .attrs import DeviceAttr
from .host_memory import node_count

CPU_ROOT = "/sys/devices/system/cpu/cpu0"


def query(kind):
    """The host's value for DeviceAttr `kind`, or None where it does not apply."""
    reader = _READERS.get(kind)
    return None if reader is None else reader()


def _cpuinfo(field):
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == field:
                    return value.strip()
    except OSError:
        pass
    return None


def _name():
    return _cpuinfo("model name") or platform.processor() or platform.machine() or "cpu"


def _threads():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count()


def _total_memory():
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _available_memory():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def _read_int(path):
    with open(path) as f:
        return int(f.read().strip())


def _max_clock():
    return _read_int(f"{CPU_ROOT}/cpufreq/cpuinfo_max_freq")


def _l2_cache():
    root = f"{CPU_ROOT}/cache"
    for entry in sorted(os.listdir(root)):
        if entry.startswith("index") and _read_int(f"{root}/{entry}/level") == 2:
            with open(f"{root}/{entry}/size") as f:
                size = f.read().strip()
            scale = {"K": 1 << 10, "M": 1 << 20}.get(size[-1:], 1)
            return int(size.rstrip("KM")) * scale
    return None


def _vector_width():
    flags = set((_cpuinfo("flags") or _cpuinfo("Features") or "").split())
    for flag, width in (("avx512f", 64), ("avx", 32), ("sse2", 16), ("asimd", 16)):
        if flag in flags:
            return width
    return None


_READERS = {
    DeviceAttr.EXIST: lambda: True,
    DeviceAttr.DEVICE_NAME: _name,
    DeviceAttr.NUM_THREADS: _threads,
    DeviceAttr.TOTAL_MEMORY: _total_memory,
    DeviceAttr.AVAILABLE_MEMORY: _available_memory,
    DeviceAttr.MAX_CLOCK_RATE: _max_clock,
    DeviceAttr.L2_CACHE_SIZE: _l2_cache,
    DeviceAttr.VECTOR_WIDTH: _vector_width,
    DeviceAttr.NUMA_NODE_COUNT: node_count,
}
