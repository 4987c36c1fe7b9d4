"""gpu: the in-tree NVIDIA GPU accelerator (cupy).

Placement takes the common op set on static-shape f32 tensors; graph-to-loop
reuses the host lowering to loop nests and maps each nest onto a CUDA grid
(`gpu` dialect: gpu.launch / gpu.library); loop-to-native writes CUDA C per
kernel plus a launch plan, compiled with NVRTC (through cupy) when the
artifact is loaded and cached in ~/.cache/tcc/gpu. MatMul/Gemm/Conv go to
cuBLAS (Conv through im2col); Softmax, LayerNormalization, trailing-axis
reductions and 2-D transposes use hand-written templates.

cupy is optional and imported lazily: listing accelerators and compiling
with --maccel=gpu never need it, nor a driver or a GPU (build on CI, run on
the GPU machine). Loading a model says what is missing: cupy (with the
extra that matches the CUDA driver), or the driver's own error.

`TCC_GPU_CONFORMANCE=1` forces placement: every op the gpu supports goes to
the gpu, however small (the cost hints that keep tiny ops on the host are
off), so the node tests and `tcc-accel check gpu` exercise the GPU."""
from __future__ import annotations

import importlib.util
import os

from tcc.accelerators import (API_VERSION, AcceleratorInfo, CliOption, CompositePattern,
                              RuntimeModule, Support, hookimpl)
from tcc.dialects.ir.errors import TccError

VERSION = "0.1.0"
INSTALL_HINT = ("install the cupy that matches the CUDA driver: `pip install tcc[gpu-cuda13]` (cupy-cuda13x, "
                "CUDA 13 drivers) or `pip install tcc[gpu-cuda12]` (cupy-cuda12x, CUDA 12 drivers)")


def conformance_mode():
    return os.environ.get("TCC_GPU_CONFORMANCE", "") not in ("", "0")


class GpuUnavailable(TccError):
    pass


def require_cupy():
    """Imports cupy or raises one line saying how to install it."""
    if importlib.util.find_spec("cupy") is None:
        raise GpuUnavailable(f"accelerator 'gpu' needs cupy, which is not installed; {INSTALL_HINT}")
    try:
        import cupy
    except Exception as e:  # noqa: BLE001 - a broken cupy install is reported, not crashed on
        raise GpuUnavailable(f"accelerator 'gpu': cupy failed to import ({type(e).__name__}: {e}); "
                             f"{INSTALL_HINT}") from None
    return cupy


class GpuPlugin:
    def __init__(self):
        self.options = {}

    @hookimpl
    def tcc_accelerator_info(self):
        return AcceleratorInfo("gpu", VERSION, API_VERSION,
                               "NVIDIA GPUs via cupy: generated CUDA C (NVRTC), cuBLAS, CUDA graphs")

    @hookimpl
    def tcc_register_dialects(self, context):
        from .dialect import dialect
        context.load(dialect())

    @hookimpl
    def tcc_register_lowerings(self, context):
        # gpu.lib placeholders (library calls: cuBLAS GEMMs...) left for the
        # host's graph-to-loop pass, which turns them into loop.call.
        from .lib_lowering import lower_lib
        from .lower import LIB
        context.lowerings[LIB] = lower_lib

    @hookimpl
    def tcc_cli_options(self):
        return [CliOption("cubin-arch", str, "", "also build the kernels ahead of time with nvcc for this "
                                                   "arch (e.g. sm_90); NVRTC stays the fallback"),
                CliOption("min-elements", int, 4096, "ops on fewer elements stay on the host "
                                                     "unless their neighbours are on the gpu")]

    @hookimpl
    def tcc_configure_passes(self, options):
        self.options = dict(options)

    # -- placement -------------------------------------------------------------------
    @hookimpl
    def tcc_supports_op(self, op, module):
        from .support import supports
        return supports(op, module)

    @hookimpl
    def tcc_composite_patterns(self):
        return [CompositePattern("conv_add_relu", ("onnx.Conv", "onnx.Add", "onnx.Relu")),
                CompositePattern("conv_relu", ("onnx.Conv", "onnx.Relu")),
                CompositePattern("matmul_add", ("onnx.MatMul", "onnx.Add")),
                CompositePattern("gemm_relu", ("onnx.Gemm", "onnx.Relu"))]

    @hookimpl
    def tcc_cost_hint(self, op, module):
        if conformance_mode():
            return None  # no opinion: placement keeps every region the gpu supports
        from .support import cost_hint
        return cost_hint(op, self.options.get("min-elements", 4096))

    # -- lowering ----------------------------------------------------------------------
    @hookimpl
    def tcc_graph_to_loop(self, func, module, context):
        from . import lower
        lower.to_loop(func, module, context)
        lower.to_gpu(func)
        left = []
        for op in func.regions[0].blocks[0].ops:
            if op.name.startswith("onnx.") or op.name == "graph.fused":
                left.append(op.name)
        return left

    @hookimpl
    def tcc_loop_to_native(self, funcs, module, context, target):
        from . import codegen, package
        plans = [codegen.FunctionPlan(f).build() for f in funcs]
        source = codegen.module_source(plans)
        # --gpu-cubin-arch, else the arch of the gpu target (`--target 'gpu -arch=sm_90'`)
        arch = self.options.get("cubin-arch") or (target.get("arch") if target is not None else None)
        payload = package.pack(plans, source, cubin_arch=arch)
        names = tuple(p.name for p in plans)
        return RuntimeModule("gpu", payload, names, format=package.FORMAT,
                             metadata={"kernels": sum(len(p.kernels) for p in plans),
                                       "gemms": sum(1 for p in plans for s in p.steps if s["op"] == "gemm"),
                                       "cubin_arch": arch})

    # -- runtime -------------------------------------------------------------------------
    @hookimpl
    def tcc_device_manager_factory(self):
        # Registered at compile time too: it needs no cupy until a device is used.
        from .device import GpuDeviceManagerFactory
        return GpuDeviceManagerFactory()

    # The built-in "gpu" target kind (tcc.runtime.device.target_kind: arch, max_threads,
    # warp_size, shared memory, SM count, filled from the device) is the one this
    # accelerator uses; returning a schema here would replace it and drop its
    # from-device preprocessor, so this hook is deliberately not implemented.

    @hookimpl
    def tcc_load_runtime_module(self, module, device):
        require_cupy()
        from .runtime import GpuModule
        return GpuModule(module.payload, device)


plugin = GpuPlugin()
