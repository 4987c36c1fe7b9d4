"""Loads host object code with llvmlite's MCJIT (`add_object_file`) rather
than linking it into a shared library with the system linker: it needs no
compiler or linker at run time and loads in ~2 ms against ~27 ms for
`cc -shared` + dlopen on a small model (measured on the 2-core CI machine).
Symbols resolve against the process (libm) and the runtime library
(`tcc_parallel_for`), loaded first."""
from __future__ import annotations

import ctypes

from tcc.dialects.ir.errors import TccError

_ENTRY_T = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


class JitCode:
    """Owns an MCJIT engine (the loaded code) and frees it under LLVM_LOCK
    when dropped: freeing it unlocked, on whatever thread drops the last
    session, edits LLVM's global context while a background specialization
    may be compiling in it."""

    def __init__(self, engine):
        from tcc.dialects.conversions.loop_to_native.target import dispose
        self._engine, self._dispose = engine, dispose  # bound now: no import at shutdown

    def __del__(self):
        engine, self._engine = self._engine, None
        if engine is not None:
            self._dispose(engine)


def jit_entry(obj: bytes):
    """Host object code -> (JitCode, its tcc_main_graph entry as a ctypes
    function); keep the first alive as long as the second is called."""
    import llvmlite.binding as llvm

    from tcc.dialects.conversions.loop_to_native.target import LLVM_LOCK, check_symbols
    with LLVM_LOCK:  # one thread in LLVM at a time (see LLVM_LOCK)
        check_symbols(obj, "the artifact's host code")  # loads the runtime and helper libraries
        tm = llvm.Target.from_default_triple().create_target_machine(jit=True)
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
        engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        engine.finalize_object()
        addr = engine.get_function_address("tcc_main_graph")
        code = JitCode(engine)
    if not addr:
        raise TccError("the artifact's object code has no tcc_main_graph entry")
    return code, _ENTRY_T(addr)
