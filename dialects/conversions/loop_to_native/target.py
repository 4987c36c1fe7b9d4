"""The host target: LLVM initialised once, a TargetMachine for this CPU,
the O3 pipeline, and object emission."""
from __future__ import annotations

import functools
import re
import threading

import llvmlite.binding as llvm

from tcc.dialects.ir.errors import TccError


class NativeCodegenError(TccError):
    pass


# llvmlite parses into LLVM's one global context and shares the target
# machines below; its calls release the GIL, so a background specialization
# (runtime/specialize.py) and the caller's thread could be inside LLVM at
# once. The fresh-clone runs lost a test worker to an abort in MCJIT's
# finalize_object on the specialization thread: every LLVM use takes this lock,
# and so does every disposal (`dispose`): a module or an MCJIT engine freed
# by the garbage collector on one thread edits that same global context.
LLVM_LOCK = threading.RLock()


def _locked(fn):
    @functools.wraps(fn)
    def call(*args, **kwargs):
        with LLVM_LOCK:
            return fn(*args, **kwargs)
    return call


@functools.lru_cache(maxsize=None)
def _init():
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return True


@functools.lru_cache(maxsize=None)
def _host_features():
    """{feature: on} for every feature LLVM reads from CPUID."""
    _init()
    return dict(llvm.get_host_cpu_features())


def cpuid_features() -> dict:
    """{LLVM feature name: on} as this process's CPUID reports them."""
    return dict(_host_features())


@functools.lru_cache(maxsize=None)
def host_cpu():
    """(triple, cpu name, enabled features as a sorted list of names)."""
    enabled = sorted(k for k, v in _host_features().items() if v)
    return llvm.get_process_triple(), llvm.get_host_cpu_name(), enabled


def _feature_string():
    """Every feature CPUID reports, on or off: the cpu name alone implies
    features the CPU may not grant. A hypervisor that masks AVX-512 leaves
    the model (LLVM's `znver5`, `sapphirerapids`), and with only the enabled
    features listed LLVM took the rest from the name and wrote zmm code for
    a process that CPUID told had none (AMD EPYC family 26 model 2 with
    AVX-512 hidden, bench/hide_avx512.c)."""
    return ",".join(("+" if v else "-") + k for k, v in sorted(_host_features().items()))


def host_features() -> set:
    return set(host_cpu()[2])


# The large code model: generated code reaches its constants and the
# functions it calls through 64-bit addresses, not 32-bit PC-relative
# offsets. MCJIT's default memory manager maps an object's code and its
# constants separately; in a long-lived process with many loaded sessions
# (the test suite, ~1.5 GB mapped) the two landed more than 2 GB apart, past
# a 32-bit offset's reach, and RuntimeDyldELF's `isInt<32>(RealOffset)`
# assertion aborted the process (gdb on a test worker's core, 2026-12-02).
CODE_MODEL = "large"


@functools.lru_cache(maxsize=None)
def target_machine(opt_level: int = 3):
    triple, cpu, _ = host_cpu()
    target = llvm.Target.from_triple(triple)
    # PIC so the same object links into a shared library (`--emit=lib`).
    return target.create_target_machine(cpu=cpu, features=_feature_string(),
                                        opt=min(max(opt_level, 0), 3), reloc="pic", codemodel=CODE_MODEL)


@_locked
def optimize(llvm_ir: str, opt_level: int = 3):
    """Parses and verifies LLVM IR text, runs the standard pipeline at
    `opt_level` (O3 vectorizes loops and SLPs straight-line code) tuned for
    this CPU; returns the llvmlite ModuleRef."""
    _init()
    if "avx512f" in host_features():
        # LLVM defaults to 256-bit vectors on AVX-512 parts (to avoid clock
        # throttling on old Xeons); our loops are long, unit-stride and
        # memory-resident, where 512-bit vectors halve the instruction count.
        # (before a `{` on the define's line: llvmlite puts it on the next one, hand-written IR on the same)
        llvm_ir = re.sub(r"^(define [^\n]*\))([^\n{]*?)(\s*\{)?[ \t]*$", r'\1\2 "prefer-vector-width"="512"\3',
                         llvm_ir, flags=re.M)
    try:
        mod = llvm.parse_assembly(llvm_ir)
        mod.verify()
    except RuntimeError as e:
        raise NativeCodegenError(f"generated LLVM IR is invalid: {' '.join(str(e).split())[:300]}") from None
    tm = target_machine(opt_level)
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)
    if opt_level > 0:
        pto = llvm.create_pipeline_tuning_options(speed_level=min(opt_level, 3))
        pto.loop_vectorization = True
        pto.slp_vectorization = True
        pto.loop_unrolling = True
        pb = llvm.create_pass_builder(tm, pto)
        pm = pb.getModulePassManager()
        pm.run(mod, pb)
    return mod


@_locked
def dispose(ref):
    """Frees an llvmlite object (module, engine) now, under LLVM_LOCK,
    rather than whenever and on whichever thread the collector drops it."""
    ref.close()


@_locked
def emit_object(mod, opt_level: int = 3) -> bytes:
    """Object code for an optimized module; consumes (frees) `mod`."""
    try:
        return target_machine(opt_level).emit_object(mod)
    finally:
        mod.close()


def undefined_symbols(obj: bytes) -> list:
    """The global symbols an ELF64 relocatable object uses but does not
    define (weak ones excluded: they may stay 0). Read from the symbol table
    directly: llvmlite lists an object's sections, not its symbols."""
    import struct
    try:
        if obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1:
            raise ValueError("not a little-endian ELF64 object")
        shoff, = struct.unpack_from("<Q", obj, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
        secs = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + i * shentsize) for i in range(shnum)]
        out = set()
        for _name, typ, _fl, _addr, off, size, link, _info, _al, ent in secs:
            if typ != 2:  # SHT_SYMTAB
                continue
            stroff, strsize = secs[link][4], secs[link][5]
            for k in range(size // (ent or 24)):
                st_name, st_info, _other, shndx = struct.unpack_from("<IBBH", obj, off + k * (ent or 24))
                if shndx == 0 and st_name and (st_info >> 4) == 1:  # undefined, STB_GLOBAL
                    if st_name >= strsize:
                        raise ValueError("symbol name outside the string table")
                    end = obj.index(b"\0", stroff + st_name)
                    out.add(obj[stroff + st_name:end].decode("ascii", "replace"))
        return sorted(out)
    except (struct.error, IndexError, ValueError, OverflowError) as e:
        raise NativeCodegenError(f"object code is malformed ({e})") from None


@functools.lru_cache(maxsize=None)
@_locked
def load_helper_libraries():
    """Makes every library generated code may call visible to the JIT, by
    name, whatever else the process loaded: tcc's runtime (thread pool), libm
    (math) and libgcc_s (LLVM lowers some conversions, e.g. `fptrunc double to
    half`, to libgcc helpers such as __truncdfhf2 that no other library
    defines; without this they resolved only when something else, such as
    onnxruntime, had loaded libgcc_s)."""
    import ctypes.util

    from tcc.runtime import native
    _init()
    native.load()
    for lib in ("m", "gcc_s"):
        path = ctypes.util.find_library(lib)
        if path:
            try:
                llvm.load_library_permanently(path)
            except RuntimeError:
                pass  # then check_symbols names what stays unresolved
    return True


# Defined by whoever links the object (RuntimeDyld's GOT in MCJIT, ld for a
# shared library), never by a library: the large code model's PIC addresses
# its constants relative to it.
LINKER_DEFINED = {"_GLOBAL_OFFSET_TABLE_"}


@_locked
def check_symbols(obj: bytes, where="the generated code"):
    """Refuses object code that calls a symbol nothing in this process
    defines: MCJIT would bind it to address 0 and the first call would kill
    the process (SIGSEGV) instead of failing here with its name."""
    load_helper_libraries()
    missing = [s for s in undefined_symbols(obj) if s not in LINKER_DEFINED and not llvm.address_of_symbol(s)]
    if missing:
        raise NativeCodegenError(f"{where} calls {', '.join(repr(s) for s in missing)}, which no library "
                                 "loaded by tcc defines (unresolved symbol)")
