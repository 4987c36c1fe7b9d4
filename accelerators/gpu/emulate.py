"""Runs a gpu runtime module on the CPU: the generated CUDA C is compiled as
host C++ against `cuda_emu.h` (g++), GEMM steps run in numpy, and the launch
plan is executed by the same code (`plan.run_steps`) the cupy runtime uses.
For tests: it checks the kernels' numerics where no GPU exists."""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile

import numpy as np

from . import package, plan as planlib

HERE = os.path.dirname(os.path.abspath(__file__))


def compiler():
    return shutil.which("g++") or shutil.which("c++")


def _wrappers(manifest):
    out = []
    for f in manifest["functions"].values():
        coop = set(f["cooperative"])
        for k in f["kernels"]:
            types = f["param_types"][k]
            args = ", ".join(f"({t})a[{i}]" for i, t in enumerate(types))
            out.append(f'extern "C" void emu_{k}(void** a, unsigned gx, unsigned gy, unsigned gz, '
                       f'unsigned bx, unsigned by, unsigned bz) {{\n'
                       f'  tcc_emu_run(dim3{{gx, gy, gz}}, dim3{{bx, by, bz}}, {int(k in coop)}, '
                       f'[&] {{ {k}({args}); }});\n}}\n')
    return "\n".join(out)


def build(source, manifest, workdir=None):
    cxx = compiler()
    if cxx is None:
        raise RuntimeError("no C++ compiler for the CUDA emulation")
    text = f'#include "{os.path.join(HERE, "cuda_emu.h")}"\n' + source + "\n" + _wrappers(manifest)
    key = hashlib.sha256(text.encode()).hexdigest()[:16]
    d = workdir or os.path.join(tempfile.gettempdir(), f"tcc-gpu-emu-{os.getuid()}")
    os.makedirs(d, exist_ok=True)
    so = os.path.join(d, f"emu_{key}.so")
    if not os.path.exists(so):
        src = os.path.join(d, f"emu_{key}.cpp")
        with open(src, "w") as f:
            f.write(text)
        tmp = so + f".{os.getpid()}.tmp"
        r = subprocess.run([cxx, "-std=c++20", "-O1", "-fPIC", "-shared", "-pthread", "-w", "-o", tmp, src],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"emulation build failed:\n{r.stderr[-4000:]}")
        os.replace(tmp, so)
    return ctypes.CDLL(so)


class _Backend:
    def __init__(self, lib):
        self.lib = lib

    def launch(self, kernel, grid, block, bufs):
        ptrs = (ctypes.c_void_p * max(1, len(bufs)))(*[b.ctypes.data for b in bufs])
        getattr(self.lib, f"emu_{kernel}")(ptrs, *[ctypes.c_uint(x) for x in grid + block])

    def gemm(self, s, a, b, c):
        planlib.numpy_gemm(s, a.view(np.float32), b.view(np.float32), c.view(np.float32))

    def copy(self, dst, src, nbytes):
        dst[:nbytes] = src[:nbytes]


def _aligned(nbytes, align=256):
    raw = np.zeros(nbytes + align, np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off:off + nbytes]


class EmulatedModule:
    """`run(name, inputs) -> outputs` on numpy arrays."""

    def __init__(self, payload):
        self.manifest, self.source, weights, _ = package.unpack(payload)
        self.lib = build(self.source, self.manifest)
        self.weights = {}
        for n, w in weights.items():
            buf = _aligned(w.nbytes)
            buf[:] = np.ascontiguousarray(w).reshape(-1).view(np.uint8)
            self.weights[n] = buf

    def run(self, name, inputs, output_specs):
        p = self.manifest["functions"][name]
        args = []
        for x in inputs:
            x = np.ascontiguousarray(x)
            b = _aligned(x.nbytes)
            b[:] = x.reshape(-1).view(np.uint8)
            args.append(b)
        outs = []
        for shape, dtype in output_specs:
            b = _aligned(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize)
            args.append(b)
            outs.append((b, shape, dtype))
        scratch = {i: _aligned(b["nbytes"]) for i, b in enumerate(p["buffers"]) if b["kind"] == "scratch"}
        bufs = planlib.resolve(p, args, self.weights, scratch)
        planlib.run_steps(p, bufs, _Backend(self.lib))
        return [b.view(np.dtype(dt)).reshape(shape).copy() for b, shape, dt in outs]
