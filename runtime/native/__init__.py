"""The host runtime library (`libtccrt.so`: the thread pool that runs
outlined parallel loops, the fp32 GEMM/convolution kernels that
`loop.call`s and library-call nests reach, gemm.c, and the streaming copies
of `loop.store_block {nontemporal}`, stream.c; NonMaxSuppression for the
host step between two stages, nms.c; Erf, Gelu and RMS normalization for
the shape-generic executor, generic_ops.c, and its native tape, tape.c).
`make native` builds it beside its source; when it is absent (a plain `pip install -e .`) it is built on first use with the
system C compiler into `~/.cache/tcc/` (keyed by the source's hash, so an
edited source is rebuilt). `load()` makes its symbols visible to JIT-loaded
object code."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

from tcc.dialects.ir.errors import TccError

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCES = ["threadpool.c", "gemm.c", "gemm_int.c", "stream.c", "nms.c", "generic_ops.c", "tape.c"]
# generic_ops.c's and tape.c's math, tape.c's kernel types, threadpool.c's pinning: an edit rebuilds the library too
HEADERS = ["pool.h", "../../accelerators/cpu/kernels/mathfun.h", "../../accelerators/cpu/kernels/tcc_cpu.h",
           "../../accelerators/cpu/kernels/pin.h"]
# a symbol of every source: a library built from fewer sources is stale
REQUIRED_SYMBOLS = [b"tcc_parallel_for", b"tcc_use_pool", b"tcc_gemm_bpacked_f32", b"tcc_matmul_i8", b"tcc_conv_f32",
                    b"tcc_stream_copy", b"tcc_nms_f32", b"tcc_rmsnorm_f32",
                    b"tcc_tape_run"]
LIB_NAME = "libtccrt.so"
CFLAGS = ["-O2", "-fPIC", "-shared", "-pthread", "-fno-math-errno", "-fno-trapping-math"]


class NativeBuildError(TccError):
    pass


def check_num_threads():
    """TCC_NUM_THREADS, read by the thread pool when it starts: unset or
    empty for the number of cores, else a positive integer. Anything else
    is refused here, before a pool starts: the C side cannot say so, and
    its fallback (the cores) would silently ignore 'abc' or '0'."""
    v = os.environ.get("TCC_NUM_THREADS", "").strip()
    if v and not (v.isdigit() and int(v) > 0):
        raise TccError(f"TCC_NUM_THREADS={os.environ['TCC_NUM_THREADS']!r}: not a positive number of threads "
                       f"(unset it for one per core)")


def _digest():
    h = hashlib.sha256()
    for s in SOURCES + HEADERS:
        with open(os.path.join(HERE, s), "rb") as f:
            h.update(f.read())
    h.update(" ".join(CFLAGS).encode())
    return h.hexdigest()[:16]


def find_cc():
    for cc in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            return cc
    return None


def build(dest: str):
    """Compiles the runtime into `dest` (atomically)."""
    cc = find_cc()
    if cc is None:
        raise NativeBuildError("cannot build the tcc runtime library: no C compiler found "
                               "(install gcc or set CC, or run `make native`)")
    os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=os.path.dirname(dest) or ".")
    os.close(fd)
    cmd = [cc, *CFLAGS, "-o", tmp, *[os.path.join(HERE, s) for s in SOURCES]]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            first = (r.stderr.strip().splitlines() or ["?"])[0]
            raise NativeBuildError(f"building the tcc runtime library with {cc} failed: {first}")
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return dest


def cache_dir():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tcc")


def _has_symbols(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return False
    return all(sym in data for sym in REQUIRED_SYMBOLS)


def library_path() -> str:
    """The runtime library, built if needed. The Makefile's copy wins when it
    is at least as new as the sources."""
    local = os.path.join(HERE, LIB_NAME)
    if os.path.exists(local) and all(os.path.getmtime(local) >= os.path.getmtime(os.path.join(HERE, s))
                                     for s in SOURCES + HEADERS) and _has_symbols(local):
        return local
    cached = os.path.join(cache_dir(), f"libtccrt-{_digest()}.so")
    if not os.path.exists(cached):
        build(cached)
    return cached


_loaded = None


def load() -> str:
    """Loads the runtime into the process once (for llvmlite's symbol
    resolution, and ctypes); returns its path."""
    global _loaded
    if _loaded is None:
        check_num_threads()
        import ctypes

        import llvmlite.binding as llvm
        path = library_path()
        # RTLD_NODELETE: LLVM dlclose()s "permanent" libraries in its static
        # destructors at exit, which would unmap the pool's code under its
        # still-running worker threads (a segfault at interpreter exit).
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL | getattr(os, "RTLD_NODELETE", 0x1000))
        llvm.load_library_permanently(path)
        _loaded = path
    return _loaded
