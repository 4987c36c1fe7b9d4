"""Reading inputs and writing outputs for the CLIs: outputs are written to a
temporary file and renamed, so a failure never leaves a partial file."""
from __future__ import annotations

import os
import sys

from tcc.dialects.ir import print_module
from tcc.dialects.ir.errors import TccError
from tcc.dialects.ir.files import atomic_open


class CLIError(TccError):
    pass


def read_text(path: str) -> str:
    """A file's (or stdin's) text; invalid UTF-8 is an error at file:line:col."""
    from tcc.dialects.ir.parser import decode_source
    if path == "-":
        return decode_source(sys.stdin.buffer.read(), "<stdin>")
    if not os.path.exists(path):
        raise CLIError(f"{path}: no such file")
    if os.path.isdir(path):
        raise CLIError(f"{path}: is a directory")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise CLIError(f"{path}: cannot read ({e.strerror})") from None
    return decode_source(data, path)


def write_ir(module, output: str | None):
    """IR to stdout, or to `output` with its constants beside it."""
    if output is None or output == "-":
        sys.stdout.write(print_module(module))
        return
    _check_writable(output)
    print_module(module, path=output)


def write_bytes(data: bytes, output: str):
    _check_writable(output)
    with atomic_open(output) as f:
        f.write(data)


def write_text(text: str, output: str | None):
    if output is None or output == "-":
        sys.stdout.write(text)
        return
    write_bytes(text.encode(), output)


# Files written beside an output (IR constants, --emit=lib's weights and index):
# they too must never be an input.
_SIDE_FILES = ("", ".resources", ".weights.bin", ".json")


def check_output(output, inputs=()):
    """Refuses, before anything is written, an output path that is empty or
    that names one of the inputs (also through a symlink, `./` or a hard
    link: the same file on disk), so a compile never replaces its own model."""
    if output is None:
        return
    output = os.fspath(output)
    if output == "":
        raise CLIError("-o: the output path is empty")
    if output == "-":
        return
    for inp in inputs:
        if inp is None or not isinstance(inp, (str, os.PathLike)) or os.fspath(inp) in ("", "-"):
            continue
        inp = os.fspath(inp)
        for side in _SIDE_FILES:
            if _same_file(output + side, inp):
                raise CLIError(f"{output + side}: is the input {inp}; refusing to overwrite it (give another -o)")


def _same_file(a, b):
    try:
        return os.path.samefile(a, b)
    except OSError:  # either does not exist (yet)
        return False


def _check_writable(output):
    d = os.path.dirname(os.path.abspath(output)) or "."
    if not os.path.isdir(d):
        raise CLIError(f"{output}: directory {d} does not exist")
    if os.path.isdir(output):
        raise CLIError(f"{output}: is a directory")
