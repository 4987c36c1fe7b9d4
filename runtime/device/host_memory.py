"""Host memory: 64-byte aligned numpy-backed allocations with advisory NUMA placement."""
import mmap
import os

import numpy as np

NODE_ROOT = "/sys/devices/system/node"


def aligned_empty(nbytes, alignment):
    """An uninitialised uint8 array of `nbytes` whose address is a multiple of `alignment`.
    Over-allocating and slicing keeps numpy in charge of the memory; untouched pages of
    big allocations are never faulted in."""
    raw = np.empty(nbytes + alignment, dtype=np.uint8)
    start = -raw.ctypes.data % alignment
    # The constructor keeps the offset even for 0 bytes, where a slice would not.
    return np.ndarray((nbytes,), np.uint8, buffer=raw, offset=start)


def node_cpus(node):
    """The CPUs of NUMA node `node` this process may run on, or an empty set."""
    try:
        with open(f"{NODE_ROOT}/node{node}/cpulist") as f:
            text = f.read().strip()
        allowed = os.sched_getaffinity(0)
    except (OSError, AttributeError):
        return set()
    cpus = set()
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus & allowed


def node_count():
    try:
        return sum(1 for name in os.listdir(NODE_ROOT)
                   if name.startswith("node") and name[4:].isdigit())
    except OSError:
        return None


def allocate(nbytes, alignment, numa_node=None):
    """(array, honored): honored is None when no node was asked for, else whether the
    pages were placed on it. Placement is by first touch: fresh pages are faulted in
    from a thread pinned to the node's CPUs, which Linux's default policy puts on
    that node. Where the node or affinity control is missing the request is recorded
    as not honored; it never fails the allocation."""
    if numa_node is None:
        return aligned_empty(nbytes, alignment), None
    cpus = node_cpus(numa_node)
    if not cpus or not hasattr(os, "sched_setaffinity"):
        return aligned_empty(nbytes, alignment), False
    # mmap gives never-touched, page-aligned pages, so first touch decides placement.
    array = np.frombuffer(mmap.mmap(-1, max(nbytes, 1)), dtype=np.uint8)[:nbytes]
    previous = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, cpus)
        array.fill(0)
    except OSError:
        return array, False
    finally:
        os.sched_setaffinity(0, previous)
    return array, True
