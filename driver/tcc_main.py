"""`tcc`: compiles an ONNX model (mirrors onnx-mlir's driver and --maccel)."""
from __future__ import annotations

import os

import click

from .accelerators import check_maccel, installed
from .cli_errors import run
from .io import CLIError, write_ir
from .options import EMIT_TARGETS, CompileOptions
from .pipeline import import_and_optimize


def _list_accelerators(ctx, _param, value):
    if not value or ctx.resilient_parsing:
        return
    accs = installed()
    if not accs:
        click.echo("no accelerators installed (the host always runs what none claims)")
    for name, ep in sorted(accs.items()):
        dist = ep.dist.name if ep.dist is not None else "?"
        ver = ep.dist.version if ep.dist is not None else "?"
        click.echo(f"{name:<12} {dist} {ver}")
    ctx.exit(0)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("model")
@click.option("--maccel", multiple=True, help="Target accelerator (repeatable; installed ones only).")
@click.option("-O", "opt_level", type=click.IntRange(0, 3), default=2, show_default=True,
              help="Optimization level, -O0 to -O3.")
@click.option("--emit", type=click.Choice(EMIT_TARGETS), default="tcc", show_default=True,
              help="Stop after this stage: onnx-ir (printed), loop-ir, native-ir (LLVM IR), obj, lib, "
                   "or the compiled artifact.")
@click.option("-o", "--output", default=None, help="Output path (default: MODEL.tcc; IR goes to stdout).")
@click.option("--strict", is_flag=True, help="Fail instead of falling back to the host.")
@click.option("-v", "--verbose", is_flag=True)
@click.option("--print-ir-after-all", is_flag=True, help="Print the IR to stderr after every pass.")
@click.option("--timing", is_flag=True, help="Report the time each pass took (stderr).")
@click.option("--list-accelerators", is_flag=True, expose_value=False, is_eager=True,
              callback=_list_accelerators, help="List installed accelerators and exit.")
@click.option("--debug", is_flag=True, help="Show Python tracebacks on errors.")
def cli(model, maccel, opt_level, emit, output, strict, verbose, print_ir_after_all, timing, debug):
    options = CompileOptions(maccel=check_maccel(maccel), opt_level=opt_level, emit=emit, output=output,
                             strict=strict, verbose=verbose, print_ir_after_all=print_ir_after_all,
                             timing=timing)
    module, ctx = import_and_optimize(model, options)
    if emit == "onnx-ir":
        write_ir(module, output)
        return
    try:
        from . import compile as backend
    except ImportError:
        raise CLIError(f"--emit={emit}: host code generation is not part of this build yet") from None
    if options.output is None and emit == "tcc":
        options.output = os.path.splitext(model)[0] + ".tcc"
    backend.emit(module, ctx, options)


def main():
    run(cli, "tcc")


if __name__ == "__main__":
    main()
