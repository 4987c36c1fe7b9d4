"""The kernel library's thread pool (kernels/threadpool.c): every item of a
parallel_for runs exactly once, in contiguous chunks, whatever the thread
count, range size and grain (ranges per thread, chunks stolen across them)."""
import ctypes

import numpy as np
import pytest

TASK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_long, ctypes.c_long)


@pytest.mark.parametrize("threads", [1, 2, 3, 5])
def test_parallel_for_covers_each_item_once(threads, rng):
    from tcc.accelerators.cpu import build
    lib = build.load_kernels()
    lib.tcc_cpu_parallel_for.argtypes = [ctypes.c_long, ctypes.c_long, TASK, ctypes.c_void_p]
    lib.tcc_cpu_parallel_for.restype = None
    lib.tcc_cpu_set_num_threads(threads)
    try:
        for _ in range(200):
            n, grain = int(rng.integers(1, 400)), int(rng.integers(1, 9))
            seen = np.zeros(n, np.int64)
            chunks = []

            def task(ctx, b, e):
                seen[b:e] += 1
                chunks.append(e - b)
            lib.tcc_cpu_parallel_for(n, grain, TASK(task), None)
            assert (seen == 1).all(), (n, grain)
            # at least `grain` items per chunk but where a range ends
            assert sum(c < grain for c in chunks) <= threads, (n, grain, chunks)
    finally:
        lib.tcc_cpu_set_num_threads(0)
