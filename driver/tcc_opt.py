"""`tcc-opt`: runs named passes on textual IR, like mlir-opt / onnx-mlir-opt.
`--maccel=X` loads X's dialects and passes first (two-phase options)."""
from __future__ import annotations

import sys

import click

from tcc.dialects.ir import PassManager, make_pass, parse_module, parse_pipeline, verify
from tcc.dialects.init_all import new_context
from tcc.dialects.ir.errors import VerifyError
from tcc.dialects.ir.parser import source_position

from . import accelerators as accel
from .cli_errors import run
from .io import check_output, read_text, write_ir


def build(argv):
    accels = accel.load(argv)

    @click.command(context_settings={"help_option_names": ["-h", "--help"]})
    @click.argument("input", default="-", required=False)
    @click.option("--pass", "passes", multiple=True, metavar="NAME[{opt=v}]",
                  help="Run a pass (repeatable, in order).")
    @click.option("--pipeline", default=None,
                  help="Comma-separated passes, e.g. 'canonicalize,fuse{max-ops=8}' (runs before --pass).")
    @click.option("-o", "--output", default=None, help="Write IR here (constants beside it) instead of stdout.")
    @click.option("--maccel", multiple=True, help="Load an accelerator's dialects and passes (repeatable).")
    @click.option("--list-passes", is_flag=True, help="List the available passes and exit.")
    @click.option("--print-ir-after-all", is_flag=True, help="Print the IR to stderr after every pass.")
    @click.option("--timing", is_flag=True, help="Report the time each pass took (stderr).")
    @click.option("--verify-each/--no-verify-each", default=True, help="Verify after every pass (default on).")
    @click.option("--resources", default=None, help="Resource file for dense_resource constants "
                  "(default: INPUT.resources when present).")
    @click.option("--allow-unregistered-dialect", is_flag=True, help="Accept ops of unknown dialects.")
    @click.option("--debug", is_flag=True, help="Show Python tracebacks on errors.")
    def cli(input, passes, pipeline, output, maccel, list_passes, print_ir_after_all, timing, verify_each,
            resources, allow_unregistered_dialect, debug, **plugin_opts):
        check_output(output, [input, resources, None if input == "-" else input + ".resources"])
        ctx = accel.setup_context(new_context(), accels)
        accel.configure(accels, accel.plugin_option_values(accels, plugin_opts))
        ctx.allow_unregistered = allow_unregistered_dialect
        if list_passes:
            for name in sorted(ctx.passes):
                cls = ctx.passes[name]
                opts = ", ".join(f"{k}={d!r}" for k, (_t, d, *_h) in cls.options.items())
                click.echo(f"  {name:<24} {cls.summary}" + (f"  [{opts}]" if opts else ""))
            return
        # Build the pipeline before reading input, so a bad pass name fails fast.
        pipe = parse_pipeline(pipeline, ctx) if pipeline else []
        for p in passes:
            name, _, rest = p.partition("{")
            pipe.append(make_pass(name.strip(), rest.rstrip("}") if rest else None, ctx))
        filename = "<stdin>" if input == "-" else input
        text = read_text(input)
        module = parse_module(text, filename, ctx, resources_path=resources, positions=True)
        try:
            verify(module, ctx)
        except VerifyError as e:
            where = source_position(module, e.op) if e.op is not None else None
            raise VerifyError(f"{where or filename}: {e}") from None
        pm = PassManager(ctx, pipe, verify_each=verify_each,
                         print_after_all=sys.stderr if print_ir_after_all else None)
        pm.run(module)
        if timing:
            pm.timing_report(sys.stderr)
        write_ir(module, output)

    for opt in accel.plugin_click_options(accels):
        cli.params.append(opt)
    return cli


def main():
    run(build, "tcc-opt")


if __name__ == "__main__":
    main()
