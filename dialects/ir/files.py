"""Files written whole or not at all: every output tcc writes (IR text, its
constants, artifacts, the CLIs' outputs) goes through `atomic_open`, so a
failure leaves no partial file and two processes writing one path leave one
complete file, never a mix, never a crash over a shared temporary name."""
from __future__ import annotations

import contextlib
import os
import stat
import tempfile


@contextlib.contextmanager
def atomic_open(path, mode="wb", **kw):
    """A file object on a temporary beside `path`, renamed onto `path` when the
    block ends without an error and removed when it raises. The temporary's
    name is unique (mkstemp): a fixed `path + ".tmp"` was shared by two
    processes writing one output, and the second rename failed."""
    # Through symbolic links: the link stays, its target gets the new bytes.
    shown = os.fspath(path)  # errors name the path as given
    path = os.path.realpath(shown)
    try:
        mode_bits = os.stat(path).st_mode
        special = not (stat.S_ISREG(mode_bits) or stat.S_ISDIR(mode_bits))
    except OSError:  # not there yet
        special = False
    if special:
        # A device or a named pipe (-o /dev/null, a FIFO) is written in place,
        # as cc -o does: renaming a temporary over it replaced the node itself
        # with a regular file (/dev/null, when run as root).
        with open(path, mode, **kw) as f:
            yield f
        return
    d = os.path.dirname(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path)[:64] + ".", suffix=".tmp", dir=d)
    except OSError as e:  # a read-only or full file system: name the output, not the temporary
        raise OSError(e.errno, f"cannot write it ({e.strerror})", shown) from None
    try:
        # mkstemp makes the file 0600; outputs get what `cc -o` gives: 0666 less the umask
        os.fchmod(fd, 0o666 & ~umask())
        with os.fdopen(fd, mode, **kw) as f:
            yield f
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.filename in (None, tmp):
            raise OSError(e.errno, f"cannot write it ({e.strerror})", shown) from None
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
