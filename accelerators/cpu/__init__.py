"""cpu: the in-tree accelerator that runs partitions on the host through
hand-written C kernels (accelerators/cpu/kernels/, built by `make
cpu-kernels`, or on first use) — TVM BYOC's C-source path (seeds/002): each
partition it claims becomes C source calling the kernel library, compiled
with the system C compiler into the artifact's payload.

Hooks: placement and its cost hint (`support.py`), graph-to-loop into the `cpu` dialect with
fused epilogues (`lower.py`), loop-to-native as C (`codegen.py`,
`elementwise.py`, compiled by `build.py`), runtime (`runtime.py`). The cpu
accelerator has no device of its own: its buffers are host buffers."""
import sys

from tcc.accelerators import API_VERSION, AcceleratorInfo, CliOption, RuntimeModule, Support, hookimpl

from . import support

VERSION = "0.1.0"


class CpuPlugin:
    def __init__(self):
        self.options = {}

    @hookimpl
    def tcc_accelerator_info(self):
        return AcceleratorInfo("cpu", VERSION, API_VERSION,
                               "host CPU through C kernels (OpenBLAS GEMM, AVX2/AVX-512 builds)")

    @hookimpl
    def tcc_register_dialects(self, context):
        from .lower import dialect
        if "cpu" not in getattr(context, "dialects", {}):
            context.load(dialect())

    @hookimpl
    def tcc_cli_options(self):
        return [CliOption("dump-c", str, None, "write the generated C source of every cpu partition to this "
                                               "file ('-' for stderr)")]

    @hookimpl
    def tcc_configure_passes(self, options):
        self.options = dict(options)

    @hookimpl
    def tcc_supports_op(self, op, module):
        return support.check(op, module)

    @hookimpl
    def tcc_cost_hint(self, op, module):
        return support.cost_hint(op)

    @hookimpl
    def tcc_composite_patterns(self):
        return support.patterns()

    @hookimpl
    def tcc_target_kind(self):
        # `isa`: the kernel library build the partitions' C is written and
        # compiled for (build.ISA_FLAGS; default: this CPU's best)
        return {"name": "cpu", "device_type": "cpu", "attrs": {"isa": (str, None)}}

    @hookimpl
    def tcc_graph_to_loop(self, func, module, context):
        from .lower import lower_function
        return lower_function(func, module, context)

    @hookimpl
    def tcc_loop_to_native(self, funcs, module, context, target):
        from . import build, codegen, runtime
        funcs = list(funcs)
        isa = build.target_isa(target)
        src, weights, ws = codegen.generate(funcs, isa)
        dump = self.options.get("dump-c")
        if dump:
            if dump == "-":
                sys.stderr.write(src)
            else:
                with open(dump, "w") as f:
                    f.write(src)
        so = build.compile_partitions(src, isa)
        names = tuple(f.get_attr("sym_name") for f in funcs)
        payload = runtime.pack(src, so, weights, ws, isa)
        return RuntimeModule("cpu", payload, names, format=runtime.FORMAT,
                             metadata={"isa": isa, "c_source": "partitions.c", "workspace_bytes": ws,
                                       "weights_bytes": int(sum(w.nbytes for w in weights))})

    @hookimpl
    def tcc_load_runtime_module(self, module, device):
        from . import runtime
        return runtime.load(module.payload)


def c_source(runtime_module) -> str:
    """The generated C source of a cpu RuntimeModule (what `--emit=c` shows)."""
    from .runtime import c_source as _c
    return _c(runtime_module.payload)


plugin = CpuPlugin()
