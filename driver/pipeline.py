"""The compile pipeline: one object, built from the compile options, that the
`tcc` CLI, `tcc.compile` and run-time specialization of dynamic models all
use. It owns the context (the in-tree dialects and passes plus the selected
accelerators'), the stages the accelerators add at the named points
(`tcc.accelerators.PIPELINE_POINTS`), and runs them in order:

    import -> after-import -> graph passes -> before-placement -> placement
    -> after-placement -> graph-to-loop -> after-graph-to-loop -> loop passes
    -> after-loop-passes -> plan-memory -> loop-to-native -> artifact

Accelerator partitions pass the same two lowering points: their
`tcc_graph_to_loop` takes the place of the host's graph-to-loop, and the
stages at `after-graph-to-loop` / `after-loop-passes` run on their partition
functions before `tcc_loop_to_native`."""
from __future__ import annotations

import dataclasses
import sys

from tcc.accelerators import PipelineStages
from tcc.accelerators.manager import load_accelerators
from tcc.dialects.init_all import new_context
from tcc.dialects.ir import PassManager, parse_pipeline
from tcc.dialects.onnx.importer import import_model
from tcc.dialects.transforms.placement import PIPELINE as PLACEMENT_PIPELINE

from . import accelerators as accel
from .io import CLIError
from .options import CompileOptions
from .progress import phase
from .specializing import needs_specialization


def graph_pipeline(opt_level: int, integer_qdq: str = "") -> str:
    """Target-independent graph passes (stage 2 of DESIGN.md). `integer_qdq`
    (CompilePipeline.integer_qdq: qdq-to-integer and its options, or "")
    runs first, before canonicalize turns the activations' QDQ pairs into
    float ops."""
    # The first inference also rechecks the types the model declares
    # (value_info, outputs): where onnx's inference disagrees, it wins, and
    # an op of static operands it rejects (a Slice axis past the rank, Tile
    # repeats of another length) is an error, as in onnxruntime.
    if opt_level <= 0:
        return "shape-inference{recheck=true,strict=true},index-bounds"
    # Twice round shape inference and folding: folding a Pad's pads (say)
    # makes its shape static only after inference, and only then can a
    # Shape of it fold (expanded functions chain several such steps).
    return ("shape-inference{recheck=true,strict=true}," + (integer_qdq + "," if integer_qdq else "") +
            "canonicalize,fold-constants,shape-inference,canonicalize,fold-constants,"
            "canonicalize,fold-batchnorm,cse,dce,shape-inference,index-bounds")


def loop_pipeline(opt_level: int) -> str:
    """Loop passes on the host's lowered functions (stage 5): fuse-rows
    joins back-to-back row-wise loops, stream-outputs and prefetch-rows tune
    their memory traffic."""
    return "fuse-rows,stream-outputs,prefetch-rows" if opt_level >= 1 else ""


class CompilePipeline:
    """One compile: `options` (a CompileOptions) decide every stage. `accels`
    are the loaded accelerator plugins (loaded from `options.maccel` when not
    given); their option values (`options.accel_options`, defaults filled in
    here) reach them through `tcc_configure_passes` before any pass runs."""

    def __init__(self, options: CompileOptions, accels=None, ctx=None):
        if accels is None:
            accels = load_accelerators(options.maccel) if options.maccel else []
        self.options = options
        self.accels = list(accels)
        self.ctx = accel.setup_context(ctx if ctx is not None else new_context(), self.accels, options.opt_level)
        options.accel_options = accel.configure(self.accels, options.accel_options)
        self.stages = PipelineStages(options.emit)
        for a in self.accels:
            if a.has("tcc_add_passes"):
                a.call("tcc_add_passes", pipeline=self.stages, emission_target=options.emit)

    @property
    def integer_qdq(self) -> str:
        """qdq-to-integer as graph_pipeline runs it, or "": QDQ products on
        the host runtime's int8 kernels when every target shares the host's
        memory (a GPU keeps them float, on its own GEMMs) and the CPU runs
        them faster than f32 (integer_qdq_kinds: every matmul and
        convolution with VNNI; with AVX2 alone, matmuls and the
        convolutions of small images; convolutions of a short sum an
        output, qdq.MIN_CONV_DEPTH, on neither)."""
        from tcc.dialects.conversions.graph_to_loop.quantization.quantized_linear import integer_qdq_kinds
        kinds = integer_qdq_kinds()
        if not kinds or not all(a.on_host_memory for a in self.accels):
            return ""
        from tcc.dialects.transforms.qdq import AVX2_CONV_POSITIONS, MIN_CONV_DEPTH
        if "conv" in kinds:
            # the cpu accelerator's AVX-512 build fuses an int8 1x1 with the
            # depthwise convolution after it (cpu.conv_q8_dw): then 1x1s of
            # any depth go to integers. mobilenetv2_qdq, 1 thread, AMD EPYC
            # family 25 model 17: 5.04 -> 4.1 ms (its 16-32 channel expansions)
            target = self.target("cpu") if any(a.name == "cpu" for a in self.accels) else None
            pw = " pw-min-depth=0" if "pw-dw" in kinds and target is not None and target.get("isa") in (None, "avx512") \
                else ""
            return f"qdq-to-integer{{conv-min-depth={MIN_CONV_DEPTH}{pw}}}"
        # AVX2 alone: 1x1s of any image too (gemm_int.c's NCHW path on the
        # pair-safe bytes). mobilenetv2_qdq as an AVX2 CPU, 1 thread (AMD EPYC
        # family 25 model 17, AVX-512 hidden), in one process: 6.51 ms with
        # 784 positions at most, 6.32 with any (its 56 x 56 projections); with
        # pw-min-depth=0 as well 7.14 (the avx2 build runs cpu.conv_q8_dw
        # apart, where the float expansions fuse with their depthwise one)
        return (f"qdq-to-integer{{conv-max-positions={AVX2_CONV_POSITIONS} pw-max-positions=0 "
                f"conv-min-depth={MIN_CONV_DEPTH}}}" if "small-conv" in kinds else "qdq-to-integer{convs=false}")

    def target(self, name):
        """The `Target` accelerator `name`'s code generator reads: its
        `--target` (`options.targets`) with the kind's defaults filled in, the
        defaults alone without one; None for an accelerator with no target kind."""
        from tcc.runtime.device import Target, target_kinds
        if name in self.options.targets:
            return Target.parse(self.options.targets[name])
        return Target(name) if name in target_kinds() else None

    # -- running passes ------------------------------------------------------------
    def run(self, module, pipeline: str):
        """Runs the comma-separated `pipeline` on `module` (verifying after each pass)."""
        if not pipeline:
            return module
        pm = PassManager(self.ctx, parse_pipeline(pipeline, self.ctx), verify_each=True,
                         print_after_all=sys.stderr if self.options.print_ir_after_all else None)
        pm.run(module)
        return module

    def at(self, point: str) -> str:
        """The accelerators' stages at a named point, as a pipeline string."""
        return ",".join(self.stages.at(point))

    # -- stages 1-3: import, graph passes, placement ---------------------------------
    def import_and_optimize(self, model, where=None):
        """ONNX model (path or ModelProto) -> module after graph passes and, when
        accelerators are selected, placement (BYOC partitioning). Placement needs
        static shapes: a model with dynamic dims or shape-deciding inputs is left
        unplaced, and its specializing artifact places each input shape at run
        time (`specialize`)."""
        # Ops without a host lowering that ONNX defines as functions are expanded.
        with phase("import"):
            from tcc.runtime.staged import HOST_STEP_OPS  # sequence ops: host steps, kept whole
            module = import_model(model, where, lowered=lambda op_type: "onnx." + op_type in self.ctx.lowerings or
                                  op_type in HOST_STEP_OPS)
        with phase("graph passes", module):
            self.run(module, self.at("after-import"))
            self.run(module, graph_pipeline(self.options.opt_level, self.integer_qdq))
        if self.accels and not needs_specialization(module):
            self.place(module)
        return module

    def place(self, module):
        """Stage 3: the accelerators' before-placement passes, placement, theirs after."""
        with phase("placement", module):
            self.run(module, self.at("before-placement"))
            self.run(module, PLACEMENT_PIPELINE + ",dce")
            self.run(module, self.at("after-placement"))
        if self.options.strict:
            from .placement_report import host_fallbacks
            left = host_fallbacks(module)
            if left:
                node, op, _, why = left[0]
                more = f" (and {len(left) - 1} more)" if len(left) > 1 else ""
                raise CLIError(f"--strict: node '{node}' ({op}) would fall back to the host: {why}{more}")

    # -- stages 4-5: lowering ------------------------------------------------------------
    def host_lowering(self, lowered: bool) -> str:
        """The host's stages 4-5 for one function: `fuse` (-O1 and above) and
        graph-to-loop unless it is `lowered` already, the loop passes, and
        plan-memory last, with the accelerators' stages at their points."""
        opt = self.options.opt_level
        parts = []
        if not lowered:
            parts += ["fuse"] if opt >= 1 else []
            parts += ["convert-onnx-to-loop", self.at("after-graph-to-loop"), loop_pipeline(opt),
                      self.at("after-loop-passes")]
        parts.append("plan-memory")
        return ",".join(p for p in parts if p)

    def lower_partition(self, acc, sub):
        """An accelerator's partitions (the functions of `sub`) through its
        graph-to-loop hook and the stages at the two lowering points."""
        for f in sub.functions():
            left = acc.call("tcc_graph_to_loop", func=f, module=sub, context=self.ctx) \
                if acc.has("tcc_graph_to_loop") else None
            if left:
                raise CLIError(f"accelerator '{acc.name}' could not lower {', '.join(sorted(set(left)))} "
                               f"in {f.get_attr('sym_name')}")
        self.run(sub, self.at("after-graph-to-loop"))
        self.run(sub, self.at("after-loop-passes"))

    # -- stages 6-7: native code and the artifact ------------------------------------------
    def emit(self, module):
        """Writes what `options.emit` asks for from an optimized module; returns
        the output path (None for stdout)."""
        from .compile import emit
        return emit(module, self)

    def compile(self, model):
        """import_and_optimize + emit (what `tcc model.onnx` does for --emit=tcc)."""
        return self.emit(self.import_and_optimize(model))


# Diagnostics only: they print, they do not change what is compiled, so a
# run-time re-compile does not repeat them.
_DIAGNOSTIC_OPTIONS = ("verbose", "print_ir_after_all", "timing")


def recorded_options(options: CompileOptions) -> dict:
    """Every compile option, as the artifact's manifest records it (the
    output path aside)."""
    return {k: v for k, v in dataclasses.asdict(options).items() if k != "output"}


def compile_specialized(module, recorded: dict, path):
    """The run-time compiler handed to the runtime (`tcc.load`): compiles
    `module`, a dynamic model's IR specialized to concrete input shapes (and
    shape-deciding values), with the options its artifact recorded, into the
    artifact `path`. The same compile as ahead of time, accelerator options
    included: only the shapes are new."""
    fields = {f.name for f in dataclasses.fields(CompileOptions)}
    opts = {k: v for k, v in recorded.items() if k in fields and k not in _DIAGNOSTIC_OPTIONS}
    options = CompileOptions(**{**opts, "emit": "tcc", "output": path})
    pipe = CompilePipeline(options)
    # The arguments' new shapes decide every type: dims inferred or declared
    # for the dynamic graph are forgotten first, then inferred again. At
    # least -O1's folding: the shape-deciding inputs are constants now, and
    # the shapes they decide become static only once they fold. The strict
    # inference last names the node an input shape does not fit.
    pipe.run(module, "shape-inference{reset=true}," + graph_pipeline(max(options.opt_level, 1), pipe.integer_qdq) +
             ",shape-inference{strict=true}")
    from tcc.runtime.staged import ForwardRun, StagedRun, first_data_dependent, passes_containers

    def compile_fn(m, _ctx, o, placed):
        p = CompilePipeline(o)
        if placed and p.accels:
            p.place(m)
        return p.emit(m)
    cut = first_data_dependent(module)
    if cut is not None:  # a data-dependent output shape, or a host step: two phases (runtime/staged.py)
        return StagedRun.build(module, cut, options, path, new_context, compile_fn, compile_specialized)
    if passes_containers(module):  # sequences / optionals passed through, the tensors natively
        return ForwardRun.build(module, options, path, compile_fn, compile_specialized)
    if pipe.accels:  # placed per shape: placement needs static shapes
        pipe.place(module)
    return pipe.emit(module)
