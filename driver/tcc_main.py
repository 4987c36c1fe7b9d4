"""`tcc`: compiles an ONNX model (mirrors onnx-mlir's driver and --maccel).
Options are parsed in two phases: `--maccel` plugins load first and add
their own options."""
from __future__ import annotations

import dataclasses
import os
import sys

import click

from . import accelerators as accel
from .cli_errors import run
from .io import CLIError, check_output, write_ir, write_text
from .options import EMIT_TARGETS, CompileOptions
from .pipeline import CompilePipeline

ALL_EMITS = EMIT_TARGETS + ("placement-dot", "placement-svg", "c")

EXAMPLES = """\b
Examples:
  tcc model.onnx                                  # -> model.tcc (reused from the cache when compiled before)
  tcc --maccel=cpu -O3 model.onnx -o out.tcc --placement-report
  tcc --maccel=cpu --emit=placement-svg model.onnx -o placement.svg
  tcc -v --no-cache --timing model.onnx           # from scratch, with the phase table
  curl -s URL/model.onnx | tcc - -o model.tcc     # the model from standard input
  TCC_CACHE_DIR=/tmp/cache TCC_CACHE_SIZE=500M tcc -v model.onnx
"""


def _list_accelerators(ctx, _param, value):
    if not value or ctx.resilient_parsing:
        return
    accel.list_accelerators()
    ctx.exit(0)


def build(argv):
    # the artifact (the default --emit) gets the fastest code by default: the
    # cpu accelerator when installed (--maccel=host: the host path alone); the
    # IR stages show what was asked for, the host's unless --maccel is given
    accels = accel.load(argv, default=accel.scan_emit(argv) == "tcc")

    @click.command(context_settings={"help_option_names": ["-h", "--help"]}, epilog=EXAMPLES)
    @click.argument("model")
    @click.option("--maccel", multiple=True, help="Target accelerator (repeatable, priority in order given; "
                  "installed ones only). Default for --emit=tcc: cpu when installed; --maccel=host: the host "
                  "path alone.")
    @click.option("-O", "opt_level", type=click.IntRange(0, 3), default=2, show_default=True,
                  help="Optimization level, -O0 to -O3.")
    @click.option("--emit", type=click.Choice(ALL_EMITS), default="tcc", show_default=True,
                  help="Stop after this stage: onnx-ir (printed), loop-ir, native-ir (LLVM IR), obj, lib, "
                       "tcc (the compiled artifact), placement-dot (Graphviz of the partitioned graph), placement-svg (that "
                       "graph drawn by Graphviz's dot: one colour per accelerator, copies labelled with their bytes), "
                       "or c (the C source accelerators such as cpu generate for their partitions).")
    @click.option("-o", "--output", default=None, help="Output path (default: MODEL.tcc; IR goes to stdout).")
    @click.option("--target", "targets", multiple=True, metavar="TARGET",
                  help="An accelerator's target, as `KIND -attr=value ...` or JSON (repeatable, one per "
                       "accelerator; its code generator reads it): 'cpu -isa=avx2' builds the cpu kernels for "
                       "AVX2 (generic, avx2, avx512; default: this CPU's), 'gpu -arch=sm_90' also builds the "
                       "gpu kernels ahead of time for that arch.")
    @click.option("--strict", is_flag=True, help="Fail instead of falling back to the host.")
    @click.option("--placement-report", is_flag=True, help="Print which nodes went where, and why, then a summary: "
                  "partitions per accelerator, copies and bytes per run, host ops by reason (stderr; compiles "
                  "from scratch).")
    @click.option("-v", "--verbose", is_flag=True, help="Say whether the compile cache was hit, and print the "
                  "placement report of a fresh compile (stderr).")
    @click.option("--print-ir-after-all", is_flag=True, help="Print the IR to stderr after every pass.")
    @click.option("--timing", is_flag=True, help="Print one table of the compile's phases on stderr (import, graph "
                  "passes, placement, lowering, LLVM, accelerator code (C compile), write); compiles from scratch.")
    @click.option("--list-accelerators", is_flag=True, expose_value=False, is_eager=True,
                  callback=_list_accelerators, help="List installed accelerators and exit.")
    @click.option("--no-cache", is_flag=True, help="Compile from scratch and leave the compile cache "
                  "($TCC_CACHE_DIR, default ~/.cache/tcc) untouched.")
    @click.option("--debug", is_flag=True, help="Show Python tracebacks on errors.")
    def cli(model, maccel, opt_level, emit, output, targets, strict, placement_report, verbose, print_ir_after_all,
            timing, no_cache, debug, **plugin_opts):
        check_output(output, [model])
        options = CompileOptions(maccel=[a.name for a in accels], opt_level=opt_level, emit=emit, output=output,
                                 strict=strict, verbose=verbose, print_ir_after_all=print_ir_after_all,
                                 timing=timing, accel_options=accel.plugin_option_values(accels, plugin_opts),
                                 targets=accel.parse_targets(targets, accels))
        report = bool(accels and (placement_report or verbose))
        if output == "-" and emit == "tcc":  # as --emit=obj and lib: not a file named '-', not binary on a terminal
            raise CLIError("--emit=tcc writes a binary file: give one with -o")
        where = None
        if model == "-":  # the model from standard input, read once (the cache key and the compile)
            if options.output is None and emit == "tcc":
                raise CLIError("the model comes from standard input: give the artifact's path with -o")
            from tcc.dialects.onnx.importer import STDIN, load_model
            model, where = load_model("-"), STDIN
        if options.output is None and emit == "tcc":
            options.output = os.path.splitext(model)[0] + ".tcc"
            check_output(options.output, [model])  # `tcc m.tcc` would replace its input
        from .cached import cacheable, compile_cached
        from .progress import watch
        with watch(timing):
            if not no_cache and not placement_report and cacheable(model, options):
                compile_cached(model, options, lambda tmp: _compile(
                    model, dataclasses.replace(options, output=tmp, verbose=False), accels, report, where))
                return
            _compile(model, options, accels, report, where)

    for opt in accel.plugin_click_options(accels):
        cli.params.append(opt)
    return cli


def _compile(model, options, accels, report, where=None):
    """Imports, optimizes and places `model` (`where` names it in messages),
    then writes what `options.emit` asks for."""
    emit, output = options.emit, options.output
    pipeline = CompilePipeline(options, accels)
    module = pipeline.import_and_optimize(model, where)
    if report:
        from .placement_report import text_report
        from .specializing import needs_specialization
        sys.stderr.write("placement report: deferred to run time (dynamic shapes or shape-deciding inputs: "
                         "each input shape is placed when first run)\n" if needs_specialization(module)
                         else text_report(module, _devices(pipeline.ctx)))
    if emit == "onnx-ir":
        write_ir(module, output)
        return
    if emit in ("placement-dot", "placement-svg"):
        from .placement_report import dot, svg
        write_text(dot(module, _devices(pipeline.ctx)) if emit == "placement-dot"
                   else svg(module, _devices(pipeline.ctx)).decode(), output)
        return
    pipeline.emit(module)


def _devices(ctx):
    from .placement_report import accelerator_devices
    return accelerator_devices(getattr(ctx, "accelerators", []))


def main():
    run(build, "tcc")


if __name__ == "__main__":
    main()
