"""The host target: LLVM initialised once, a TargetMachine for this CPU,
the O3 pipeline, and object emission."""
from __future__ import annotations

import functools
import re

import llvmlite.binding as llvm

from tcc.dialects.ir.errors import TccError


class NativeCodegenError(TccError):
    pass


@functools.lru_cache(maxsize=None)
def _init():
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return True


@functools.lru_cache(maxsize=None)
def host_cpu():
    """(triple, cpu name, enabled features as a sorted list of names)."""
    _init()
    feats = llvm.get_host_cpu_features()
    enabled = sorted(k for k, v in feats.items() if v)
    return llvm.get_process_triple(), llvm.get_host_cpu_name(), enabled


def host_features() -> set:
    return set(host_cpu()[2])


@functools.lru_cache(maxsize=None)
def target_machine(opt_level: int = 3):
    triple, cpu, feats = host_cpu()
    target = llvm.Target.from_triple(triple)
    # PIC so the same object links into a shared library (`--emit=lib`).
    return target.create_target_machine(cpu=cpu, features=",".join("+" + f for f in feats),
                                        opt=min(max(opt_level, 0), 3), reloc="pic", codemodel="default")


def optimize(llvm_ir: str, opt_level: int = 3):
    """Parses and verifies LLVM IR text, runs the standard pipeline at
    `opt_level` (O3 vectorizes loops and SLPs straight-line code) tuned for
    this CPU; returns the llvmlite ModuleRef."""
    _init()
    if "avx512f" in host_features():
        # LLVM defaults to 256-bit vectors on AVX-512 parts (to avoid clock
        # throttling on old Xeons); our loops are long, unit-stride and
        # memory-resident, where 512-bit vectors halve the instruction count.
        llvm_ir = re.sub(r"^(define [^\n]*\))([^\n]*)$", r'\1\2 "prefer-vector-width"="512"', llvm_ir, flags=re.M)
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


def emit_object(mod, opt_level: int = 3) -> bytes:
    return target_machine(opt_level).emit_object(mod)
