"""The cpu accelerator's runtime module: packing what loop-to-native made
into the artifact's payload, and loading it for execution on the host.

Payload (a zip): `manifest.json` (format, ISA the code was compiled for,
functions with their workspace sizes, the weights index), `partitions.so`
(the compiled partition code), `partitions.c` (its source, for `--emit=c`
and debugging) and `weights.bin` (the constants, each 64-byte aligned)."""
from __future__ import annotations

import ctypes
import io
import json
import os
import shutil
import tempfile
import threading
import zipfile

import numpy as np

from tcc.dialects.ir.errors import TccError

from . import build

FORMAT = "tcc-cpu-v1"
ALIGN = 64


class CpuRuntimeError(TccError):
    pass


def pack(c_source, so_bytes, weights, workspaces, isa):
    from tcc.runtime.artifact import pack_weights
    blob, index = pack_weights([(f"w{i}", a) for i, a in enumerate(weights)])
    manifest = {"format": FORMAT, "isa": isa, "functions": workspaces, "weights": index}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("manifest.json", json.dumps(manifest, indent=1))
        z.writestr("partitions.c", c_source)
        z.writestr("partitions.so", so_bytes)
        z.writestr("weights.bin", blob, compress_type=zipfile.ZIP_STORED)
    return buf.getvalue()


def c_source(payload: bytes) -> str:
    """The generated C source inside a cpu payload."""
    with zipfile.ZipFile(io.BytesIO(payload)) as z:
        return z.read("partitions.c").decode()


def _aligned(nbytes):
    raw = np.empty(nbytes + ALIGN, np.uint8)
    off = (-raw.ctypes.data) % ALIGN
    return raw[off:off + nbytes]


def _dlopen(so: bytes):
    """A partitions shared object, loaded; the file lives in a private
    directory only while dlopen reads it."""
    d = tempfile.mkdtemp(prefix="tcc-cpu-")
    try:
        path = os.path.join(d, "partitions.so")
        with open(path, "wb") as f:
            f.write(so)
        return ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
    finally:
        shutil.rmtree(d, ignore_errors=True)


_ENTRY = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


class CpuModule:
    """A loaded cpu payload: `get_function(name)` -> fn(buffers, stream)."""

    def __init__(self, payload: bytes):
        with zipfile.ZipFile(io.BytesIO(payload)) as z:
            manifest = json.loads(z.read("manifest.json"))
            if manifest.get("format") != FORMAT:
                raise CpuRuntimeError(f"cpu payload format {manifest.get('format')!r} is not {FORMAT!r}")
            so = z.read("partitions.so")
            blob = z.read("weights.bin")
            self._c_source = z.read("partitions.c").decode()  # rebuilt with TCC_PROFILE by _op_profile
        isa = manifest["isa"]
        if not build.ISA_NEEDS.get(isa, set()) <= build.cpu_flags():
            raise CpuRuntimeError(f"this cpu partition code was compiled for {isa}, which this CPU lacks")
        self.manifest = manifest
        self.kernels = build.load_kernels()
        self.lib = _dlopen(so)
        # Weights: uploaded once, into one 64-byte aligned block.
        self._wblock = _aligned(max(len(blob), 1))
        self._wblock[:len(blob)] = np.frombuffer(blob, np.uint8)
        base = self._wblock.ctypes.data
        index = manifest["weights"]
        self._wptrs = (ctypes.c_void_p * max(len(index), 1))(*[base + w["offset"] for w in index])
        self._funcs = {}
        self._lock = threading.Lock()
        self._profiled = None  # (lib, its functions): the TCC_PROFILE build, made on first use

    @property
    def functions(self):
        return list(self.manifest["functions"])

    def get_function(self, name):
        if name not in self.manifest["functions"]:
            raise CpuRuntimeError(f"cpu module has no function '{name}' (has {', '.join(self.functions)})")
        with self._lock:
            if name not in self._funcs:
                self._funcs[name] = self._entry(self.lib, name)
        run = self._runner(*self._funcs[name])
        run.op_profile = lambda: self._op_profile(name)
        return run

    def _entry(self, lib, name):
        entry = _ENTRY(ctypes.cast(getattr(lib, f"tcc_part_{name}"), ctypes.c_void_p).value)
        return entry, _aligned(int(self.manifest["functions"][name])), threading.Lock()

    def _op_profile(self, name):
        """`tcc-run --profile`'s view inside the partition: (run, labels,
        take) where run is the function built from the payload's C with
        TCC_PROFILE (each kernel call timed; compiled on first use, a second
        or so) and take() returns the seconds each call has spent since the
        last take(), in the order of labels."""
        with self._lock:
            if self._profiled is None:
                so = build.compile_partitions(self._c_source, self.manifest["isa"], ("TCC_PROFILE",))
                self._profiled = (_dlopen(so), {})
            lib, funcs = self._profiled
            if name not in funcs:
                funcs[name] = self._entry(lib, name)
        n = ctypes.c_int.in_dll(lib, f"tcc_prof_count_{name}").value
        names = (ctypes.c_char_p * max(n, 1)).in_dll(lib, f"tcc_prof_names_{name}")
        seconds = (ctypes.c_double * max(n, 1)).in_dll(lib, f"tcc_prof_seconds_{name}")
        labels = [names[i].decode() for i in range(n)]

        def take():
            out = [seconds[i] for i in range(n)]
            for i in range(n):
                seconds[i] = 0.0
            return out
        take()
        return self._runner(*funcs[name]), labels, take

    def _runner(self, entry, workspace, lock):
        wptrs = self._wptrs

        def run(buffers, stream=None):
            args = (ctypes.c_void_p * max(len(buffers), 1))(*[b.ptr if hasattr(b, "ptr") else b for b in buffers])

            def work():
                with lock:  # one workspace per function: calls are serialised
                    entry(args, wptrs, workspace.ctypes.data)
            # Synchronous: work queued earlier on the stream (copies into
            # `buffers`) finishes first, and outputs are ready on return.
            if stream is not None:
                stream.sync()
            work()
        # The executor's fast path for plans living in host memory
        # (runtime/executor.py): the entry called directly, with the
        # buffers' addresses in an args array it keeps between runs.
        run.host_entry = (entry, wptrs, workspace.ctypes.data, lock)
        return run


def load(payload: bytes) -> CpuModule:
    return CpuModule(payload)
