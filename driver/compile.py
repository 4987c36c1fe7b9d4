"""Host code generation for the compile pipeline (`pipeline.py`): the host's
lowering stages (`CompilePipeline.host_lowering`), then loop-to-native,
stopping at the requested emission:
loop-ir, native-ir (optimized LLVM IR), obj, lib (a shared library with the
thread pool linked in, its weights and a JSON index beside it) or tcc (the
artifact)."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter

from tcc.dialects.ir.types import MemRefType

from .io import CLIError, write_bytes, write_ir, write_text
from .progress import phase

def _names(func, key, n, prefix):
    attrs = func.attributes.get(key)
    out = []
    for i in range(n):
        name = None
        if attrs is not None and i < len(attrs.value):
            d = attrs.value[i]
            d = d.value if hasattr(d, "value") else d
            if isinstance(d, dict) and "onnx.name" in d:
                name = d["onnx.name"].value
        out.append(name or f"{prefix}{i}")
    return out


def _is_lowered(func):
    return func.get_attr("tcc.num_outputs") is not None


def _onnx_stats(func):
    return dict(sorted(Counter(op.name for op in func.walk() if op.name.startswith("onnx.")).items()))


def lower(module, pipeline):
    """onnx-dialect (or already lowered) module -> lowered, memory-planned
    module; returns ((input names, output names, inputs' index bounds),
    onnx op statistics)."""
    func = module.lookup_function("main_graph")
    if func is None:
        raise CLIError("the module has no @main_graph function")
    stats = _onnx_stats(func)
    if _is_lowered(func):
        nout = func.get_attr("tcc.num_outputs")
        nin = len(func.regions[0].blocks[0].args) - nout
        names = (_names(func, "arg_attrs", nin, "input_"),
                 _names(func, "arg_attrs", nin + nout, "output_")[nin:])
    else:
        ft = func.get_attr("function_type")
        names = (_names(func, "arg_attrs", len(ft.inputs), "input_"),
                 _names(func, "res_attrs", len(ft.results), "output_"))
    from tcc.dialects.transforms.index_bounds import arg_index_bound
    bounds = [arg_index_bound(func, k) or () for k in range(len(names[0]))]
    pipeline.run(module, pipeline.host_lowering(_is_lowered(func)))
    return (names[0], names[1], bounds), stats


def _specs(types, names, bounds=None):
    from tcc.runtime.artifact import TensorSpec
    return [TensorSpec(n, tuple(t.shape), str(t.element), (), b)
            for n, t, b in zip(names, types, bounds or [()] * len(names))]


def _compile_info(options, low, onnx_stats, seconds):
    import llvmlite
    import onnx

    import tcc
    from tcc.dialects.conversions.loop_to_native import host_cpu
    triple, cpu, feats = host_cpu()
    io_bytes = sum(_nbytes(t) for t in low.inputs + low.outputs)
    weights_bytes = sum(w.array.nbytes for w in low.weights)
    from .pipeline import recorded_options
    opts = recorded_options(options)
    return {
        "tcc": tcc.__version__, "onnx": onnx.__version__, "llvmlite": llvmlite.__version__,
        "options": opts,
        "target": {"triple": triple, "cpu": cpu, "features": feats},
        "op_stats": {"onnx": onnx_stats, "native": low.stats},
        "workspace_bytes": low.workspace_bytes,
        "weights_bytes": weights_bytes,
        "peak_bytes": low.workspace_bytes + weights_bytes + io_bytes,
        "compile_seconds": {k: round(v, 4) for k, v in seconds.items()},
    }


def _nbytes(t: MemRefType):
    from tcc.dialects.conversions.loop_to_native.types import byte_size
    return byte_size(t)


@dataclasses.dataclass
class HostCode:
    """One host function compiled to object code."""
    obj: bytes
    low: object          # loop_to_native.Lowered (signature, weights, workspace)
    names: tuple         # (input names, output names, inputs' index bounds: TensorSpec.index_bound)
    onnx_stats: dict
    seconds: dict


def compile_host(module, pipeline, stop_at=None):
    """@main_graph of `module` -> HostCode; with `stop_at` in (loop-ir,
    native-ir) returns the module / optimized LLVM module instead."""
    seconds = {}
    t0 = time.perf_counter()
    options = pipeline.options
    with phase("lowering", module):
        names, onnx_stats = lower(module, pipeline)
    seconds["graph_to_loop"] = time.perf_counter() - t0
    if stop_at == "loop-ir":
        return module
    from tcc.dialects.conversions.loop_to_native import emit_object, lower_module, optimize
    with phase("LLVM", module):
        t0 = time.perf_counter()
        low = lower_module(module)
        seconds["loop_to_llvm"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        opt = 3 if options.opt_level >= 2 else options.opt_level
        mod = optimize(low.llvm_ir, opt)
        seconds["llvm_opt"] = time.perf_counter() - t0
        if stop_at == "native-ir":
            return mod
        t0 = time.perf_counter()
        obj = emit_object(mod, opt)
        from tcc.dialects.conversions.loop_to_native.target import check_symbols
        check_symbols(obj)  # an unresolved symbol is a compile error, never a call to address 0
        seconds["llvm_codegen"] = time.perf_counter() - t0
    return HostCode(obj, low, names, onnx_stats, seconds)


def emit(module, pipeline):
    """Runs the backends on an onnx-dialect module and writes what
    `pipeline.options.emit` asks for; returns the output path (None for
    stdout). Use `CompilePipeline.emit`."""
    from .compile_plan import compile_plan, has_partitions
    options = pipeline.options
    if has_partitions(module):
        return compile_plan(module, pipeline)
    if options.emit == "tcc":
        from .specializing import needs_specialization, write_specializing_artifact
        if needs_specialization(module):
            # Dynamic dims or shape-deciding inputs: placed (with --maccel) and
            # compiled per input shape at run time.
            with phase("write"):
                return write_specializing_artifact(options.output or "model.tcc", module, options)
    if options.emit == "loop-ir":
        write_ir(compile_host(module, pipeline, "loop-ir"), options.output)
        return options.output
    if options.emit == "native-ir":
        write_text(str(compile_host(module, pipeline, "native-ir")), options.output)
        return options.output
    hc = compile_host(module, pipeline)
    obj, low, names = hc.obj, hc.low, hc.names
    if options.emit == "obj":
        write_bytes(obj, _need_output(options))
        return options.output
    ins, outs = _specs(low.inputs, names[0], names[2]), _specs(low.outputs, names[1])
    info = _compile_info(options, low, hc.onnx_stats, hc.seconds)
    weights = [(w.name, w.array) for w in low.weights]
    if options.emit == "lib":
        return _write_lib(obj, _need_output(options), ins, outs, weights, info)
    if options.emit == "tcc":
        from tcc.runtime.artifact import write_artifact
        out = options.output or "model.tcc"
        with phase("write"):
            write_artifact(out, inputs=ins, outputs=outs, host_object=obj, weights=weights, compile_info=info)
        if options.verbose:
            sys.stderr.write(f"tcc: wrote {out} (workspace {low.workspace_bytes} B, "
                             f"{len(weights)} weights, {info['weights_bytes']} B)\n")
        return out
    raise CLIError(f"--emit={options.emit} is not produced by the host backend")


def _need_output(options):
    if not options.output or options.output == "-":
        raise CLIError(f"--emit={options.emit} writes a binary file: give one with -o")
    return options.output


def _write_lib(obj, out, ins, outs, weights, info):
    """`out` (a .so holding tcc_main_graph and the thread pool), plus
    `out.weights.bin` and `out.json` (signature, weights index, workspace)."""
    from tcc.runtime.artifact import pack_weights
    from tcc.runtime.native import HERE, SOURCES, find_cc
    cc = find_cc()
    if cc is None:
        raise CLIError("--emit=lib needs a C compiler to link the shared library (none found; set CC)")
    with tempfile.TemporaryDirectory(prefix="tcc-lib-") as d:
        o = os.path.join(d, "host.o")
        with open(o, "wb") as f:
            f.write(obj)
        tmp = os.path.join(d, "lib.so")
        cmd = [cc, "-shared", "-fPIC", "-O2", "-pthread", "-o", tmp, o,
               *[os.path.join(HERE, s) for s in SOURCES], "-lm"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise CLIError(f"linking {out} failed: {(r.stderr.strip().splitlines() or ['?'])[0]}")
        with open(tmp, "rb") as f:
            write_bytes(f.read(), out)
    blob, index = pack_weights(weights)
    write_bytes(blob, out + ".weights.bin")
    side = {"entry": "tcc_main_graph", "signature": {"inputs": [t.to_json() for t in ins],
                                                      "outputs": [t.to_json() for t in outs]},
            "weights": index, "compile": info}
    write_bytes(json.dumps(side, indent=1).encode(), out + ".json")
    return out
