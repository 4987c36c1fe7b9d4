"""Files written whole or not at all: every output tcc writes (IR text, its
constants, artifacts, the CLIs' outputs) goes through `atomic_open`, so a
failure leaves no partial file and two processes writing one path leave one
complete file, never a mix, never a crash over a shared temporary name."""
from __future__ import annotations

import contextlib
import os
import tempfile


@contextlib.contextmanager
def atomic_open(path, mode="wb", **kw):
    """A file object on a temporary beside `path`, renamed onto `path` when the
    block ends without an error and removed when it raises. The temporary's
    name is unique (mkstemp): a fixed `path + ".tmp"` was shared by two
    processes writing one output, and the second rename failed."""
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path)[:64] + ".", suffix=".tmp", dir=d)
    try:
        # mkstemp makes the file 0600; outputs get what `cc -o` gives: 0666 less the umask
        os.fchmod(fd, 0o666 & ~umask())
        with os.fdopen(fd, mode, **kw) as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def umask() -> int:
    """The process's umask, read without changing it (os.umask sets it, which
    would race with other threads creating files)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old
