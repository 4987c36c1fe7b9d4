"""Running a function's launch plan: the steps (kernels, GEMMs, device copies)
over resolved buffers, against a backend. The cupy runtime is one backend;
the CPU emulation the tests use (kernels compiled as host C++) is another,
so the plan logic that runs on a GPU is the one the CPU tests check."""
from __future__ import annotations

import numpy as np


def row_major_gemm_as_column_major(s):
    """cuBLAS (column-major) arguments for a row-major step: C = op(A) op(B)
    row-major is C^T = op(B)^T op(A)^T column-major, i.e. swap A and B."""
    return dict(transa=s["tb"], transb=s["ta"], m=s["n"], n=s["m"], k=s["k"],
                A=("b", s["b_off"], s["ldb"], s["sb"]), B=("a", s["a_off"], s["lda"], s["sa"]),
                C=("c", s["c_off"], s["ldc"], s["sc"]), batch=s["batch"], alpha=s["alpha"], beta=s["beta"])


def resolve(plan, args, weights, scratch):
    """Buffer id -> backend buffer: arguments, weights, scratch; views share their root."""
    out = []
    for b in plan["buffers"]:
        k = b["kind"]
        if k == "arg":
            out.append(args[b["index"]])
        elif k == "weight":
            out.append(weights[b["name"]])
        elif k == "scratch":
            out.append(scratch[len(out)])
        elif k == "view":
            out.append(out[b["of"]])
        else:
            raise ValueError(f"unknown buffer kind {k}")
    return out


# CUDA's limits since compute capability 3.0, used where the device does not say.
MAX_GRID, MAX_BLOCK, MAX_THREADS = (2 ** 31 - 1, 65535, 65535), (1024, 1024, 64), 1024


def check_launch_limits(manifest, max_grid=None, max_block=None, max_threads=None, where="gpu"):
    """Every kernel step's grid and block within the device's limits, else a
    one-line error naming the kernel (a launch beyond them fails with
    cudaErrorInvalidConfiguration, or worse, mid-plan)."""
    max_grid = tuple(max_grid or MAX_GRID)
    max_block = tuple(max_block or MAX_BLOCK)
    max_threads = int(max_threads or MAX_THREADS)
    for fname, f in manifest["functions"].items():
        for s in f["steps"]:
            if s["op"] != "kernel":
                continue
            grid, block = tuple(s["grid"]), tuple(s["block"])
            bad = [f"grid{'xyz'[i]} {g} > {m}" for i, (g, m) in enumerate(zip(grid, max_grid)) if not 1 <= g <= m]
            bad += [f"block{'xyz'[i]} {b} > {m}" for i, (b, m) in enumerate(zip(block, max_block)) if not 1 <= b <= m]
            if int(np.prod(block)) > max_threads:
                bad.append(f"{int(np.prod(block))} threads per block > {max_threads}")
            if bad:
                raise ValueError(f"{where}: kernel {s['kernel']} of {fname} cannot launch: {', '.join(bad)} "
                                 f"(grid {list(grid)}, block {list(block)})")


def run_steps(plan, bufs, backend):
    for s in plan["steps"]:
        op = s["op"]
        if op == "kernel":
            backend.launch(s["kernel"], tuple(s["grid"]), tuple(s["block"]), [bufs[i] for i in s["args"]])
        elif op == "gemm":
            backend.gemm(s, bufs[s["a"]], bufs[s["b"]], bufs[s["c"]])
        elif op == "copy":
            backend.copy(bufs[s["dst"]], bufs[s["src"]], s["nbytes"])
        else:
            raise ValueError(f"unknown plan step {op}")


def numpy_gemm(s, a, b, c):
    """The reference of a row-major gemm step on flat float32 numpy arrays."""
    from numpy.lib.stride_tricks import as_strided
    f = np.float32().itemsize

    def mat(flat, off, rows, cols, ld, trans):
        base = flat[off:]
        if trans:
            return as_strided(base, (cols, rows), (ld * f, f)).T
        return as_strided(base, (rows, cols), (ld * f, f))
    for i in range(s["batch"]):
        A = mat(a, s["a_off"] + i * s["sa"], s["m"], s["k"], s["lda"], s["ta"])
        B = mat(b, s["b_off"] + i * s["sb"], s["k"], s["n"], s["ldb"], s["tb"])
        C = as_strided(c[s["c_off"] + i * s["sc"]:], (s["m"], s["n"]), (s["ldc"] * f, f))
        r = s["alpha"] * (A.astype(np.float64) @ B.astype(np.float64))
        if s["beta"] != 0.0:
            r = r + s["beta"] * C
        C[...] = r.astype(np.float32)
