"""sim: the reference accelerator for tcc plugin authors. It really computes
(numpy) on its own device memory. Each hook below is one part of the contract
in tcc.accelerators.hookspecs."""
from tcc.accelerators import (API_VERSION, AcceleratorInfo, CliOption, CompositePattern, RuntimeModule, Support,
                              hookimpl)

from . import dialect as sim_dialect
from . import runtime
from .device import SimFactory

SUPPORTED = {"onnx.MatMul", "onnx.Conv"} | sim_dialect.ELEMENTWISE


class SimPlugin:
    def __init__(self):
        self.options = {}

    @hookimpl
    def tcc_accelerator_info(self):
        return AcceleratorInfo("sim", "0.1.0", API_VERSION, "numpy-backed reference accelerator")

    @hookimpl
    def tcc_register_dialects(self, context):
        context.load(sim_dialect.dialect())

    @hookimpl
    def tcc_register_passes(self, context, opt_level):
        context.register_pass(sim_dialect.FuseElementwisePass)

    @hookimpl
    def tcc_cli_options(self):
        return [CliOption("max-rank", int, 4, "largest tensor rank sim accepts")]

    @hookimpl
    def tcc_configure_passes(self, options):
        self.options = dict(options)

    @hookimpl
    def tcc_add_passes(self, pipeline, emission_target):
        pipeline.add("after-graph-to-loop", "sim-fuse-elementwise")


    @hookimpl
    def tcc_supports_op(self, op, module):
        if op.name not in SUPPORTED:
            return Support.no("op unsupported")
        for v in list(op.operands) + list(op.results):
            el = getattr(v.type, "element", None)
            if str(v.type) == "none":
                continue
            if el is None or str(el) != "f32":
                return Support.no(f"dtype {el if el is not None else v.type} unsupported (f32 only)")
            if v.type.rank is None or v.type.rank > self.options.get("max-rank", 4):
                return Support.no(f"shape {v.type} unsupported (rank <= {self.options.get('max-rank', 4)})")
        if op.name == "onnx.Conv" and (op.operands[1].type.rank != 4 or op.get_attr("auto_pad", "NOTSET") != "NOTSET"):
            return Support.no("attribute: only 2-D Conv with explicit pads")
        return Support.yes()

    @hookimpl
    def tcc_composite_patterns(self):
        return [CompositePattern("conv_add_relu", ("onnx.Conv", "onnx.Add", "onnx.Relu")),
                CompositePattern("matmul_add", ("onnx.MatMul", "onnx.Add"))]

    @hookimpl
    def tcc_convert_tensor_type(self, tensor_type):
        from tcc.dialects.ir import MemRefType
        return MemRefType(tensor_type.shape, tensor_type.element), 128  # sim rows are 128-byte lines

    @hookimpl
    def tcc_graph_to_loop(self, func, module, context):
        return sim_dialect.lower_function(func)

    @hookimpl
    def tcc_loop_to_native(self, funcs, module, context, target):
        names = [f.get_attr("sym_name") for f in funcs]
        return RuntimeModule("sim", runtime.pack(module, names), tuple(names), format="sim-ir-zip")

    @hookimpl
    def tcc_device_manager_factory(self):
        return SimFactory()

    @hookimpl
    def tcc_target_kind(self):
        return {"name": "sim", "device_type": "sim", "attrs": {"lanes": (int, 4)}}

    @hookimpl
    def tcc_load_runtime_module(self, module, device):
        return runtime.load(module.payload)


plugin = SimPlugin()
