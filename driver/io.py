"""Reading inputs and writing outputs for the CLIs: outputs are written to a
temporary file and renamed, so a failure never leaves a partial file."""
from __future__ import annotations

import os
import sys

from tcc.dialects.ir import print_module
from tcc.dialects.ir.errors import TccError


class CLIError(TccError):
    pass


def read_text(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    if not os.path.exists(path):
        raise CLIError(f"{path}: no such file")
    if os.path.isdir(path):
        raise CLIError(f"{path}: is a directory")
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except UnicodeDecodeError as e:
        raise CLIError(f"{path}: not a text file ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise CLIError(f"{path}: cannot read ({e.strerror})") from None


def write_ir(module, output: str | None):
    """IR to stdout, or to `output` with its constants beside it."""
    if output is None or output == "-":
        sys.stdout.write(print_module(module))
        return
    _check_writable(output)
    print_module(module, path=output)


def write_bytes(data: bytes, output: str):
    _check_writable(output)
    tmp = output + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, output)


def write_text(text: str, output: str | None):
    if output is None or output == "-":
        sys.stdout.write(text)
        return
    write_bytes(text.encode(), output)


def _check_writable(output):
    d = os.path.dirname(os.path.abspath(output)) or "."
    if not os.path.isdir(d):
        raise CLIError(f"{output}: directory {d} does not exist")
    if os.path.isdir(output):
        raise CLIError(f"{output}: is a directory")
