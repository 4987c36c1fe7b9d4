"""One-line errors for every CLI: a TccError or a usage error prints
`<tool>: error: <what and where>` and exits non-zero; `--debug` (or
TCC_DEBUG=1) shows the traceback instead."""
from __future__ import annotations

import os
import sys

import click

from tcc.dialects.ir.errors import TccError


def run(cli, prog):
    """`cli` is a click command, or a function of argv returning one (so a
    tool can load plugins named on its command line before parsing it)."""
    debug = "--debug" in sys.argv[1:] or os.environ.get("TCC_DEBUG") == "1"
    try:
        if not isinstance(cli, click.Command):
            cli = cli(sys.argv[1:])
        cli.main(args=sys.argv[1:], prog_name=prog, standalone_mode=False)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        sys.stderr.write(f"{prog}: aborted\n")
        sys.exit(130)
    except click.UsageError as e:
        sys.stderr.write(f"{prog}: error: {e.format_message()}\n")
        sys.exit(2)
    except click.ClickException as e:
        sys.stderr.write(f"{prog}: error: {e.format_message()}\n")
        sys.exit(e.exit_code or 1)
    except TccError as e:
        if debug:
            raise
        sys.stderr.write(f"{prog}: error: {_one_line(str(e))}\n")
        sys.exit(1)
    except KeyboardInterrupt:
        sys.stderr.write(f"{prog}: interrupted\n")
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(1)
    except OSError as e:
        if debug:
            raise
        if e.filename is None or not e.strerror:
            _internal(prog, e)
        # the file system refused a path (a read-only or full disk, a missing
        # folder): the environment's doing, named with the path
        where = e.filename if e.filename2 is None else f"{e.filename} -> {e.filename2}"
        sys.stderr.write(f"{prog}: error: {where}: {e.strerror}\n")
        sys.exit(1)
    except MemoryError as e:  # the input asked for more than the machine has (Range to 10^13): not a bug
        if debug:
            raise
        sys.stderr.write(f"{prog}: error: out of memory: {_one_line(str(e)) or 'an allocation failed'}\n")
        sys.exit(1)
    except Exception as e:  # a bug in tcc: still one line, with the way to see more
        if debug:
            raise
        _internal(prog, e)


def _internal(prog, e):
    sys.stderr.write(f"{prog}: internal error: {type(e).__name__}: {_one_line(str(e))} "
                     f"(run with --debug for the traceback)\n")
    sys.exit(3)


def _one_line(msg):
    return " ".join(msg.split("\n")).strip()
