"""The fuzz targets, run in a child process so that a crash (a signal, a
hang, a memory blow-up) cannot take the test runner down. Protocol on
stdin/stdout: the parent sends `<target> <n>\\n` then n bytes; the worker
answers one JSON line: {"status": "ok" | "error" | "crash", "detail", "rss"}.
"error" is the documented outcome for bad input (a TccError: one line);
"crash" is any other exception. RSS is the peak resident set in bytes."""
import json
import os
import resource
import sys
import traceback


def _ir(data, tmp):
    from tcc.dialects.init_all import default_context
    from tcc.dialects.ir import parse_module, verify
    from tcc.dialects.ir.parser import decode_source
    text = decode_source(data, "<fuzz>")
    ctx = default_context()
    module = parse_module(text, "<fuzz>", ctx)
    verify(module, ctx)


def _onnx(data, tmp):
    from tcc.dialects.onnx.importer import import_model
    path = os.path.join(tmp, "m.onnx")
    with open(path, "wb") as f:
        f.write(data)
    import_model(path)


def _artifact(data, tmp):
    import tcc
    path = os.path.join(tmp, "m.tcc")
    with open(path, "wb") as f:
        f.write(data)
    tcc.load(path)  # loading only: running an artifact runs its (native) code


TARGETS = {"ir": _ir, "onnx": _onnx, "artifact": _artifact}


def main():
    from tcc.dialects.ir.errors import TccError
    import tcc.dialects.ir  # noqa: F401 - imports first, outside the timed inputs
    import tcc.dialects.onnx.importer  # noqa: F401
    import tcc.runtime.session  # noqa: F401
    tmp = sys.argv[1]  # the parent's directory: it removes it, also after killing this process
    inp, out = sys.stdin.buffer, sys.stdout
    while True:
        header = inp.readline()
        if not header:
            return
        target, n = header.decode().split()
        data = inp.read(int(n))
        try:
            TARGETS[target](data, tmp)
            status, detail = "ok", ""
        except TccError as e:
            msg = str(e)
            status, detail = ("error", msg) if msg and "\n" not in msg else ("crash", f"not one line: {msg!r}")
        except BaseException as e:  # noqa: BLE001 - anything else is the crash we look for
            status = "crash"
            detail = f"{type(e).__name__}: {e}\n" + "".join(traceback.format_tb(e.__traceback__)[-4:])
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        out.write(json.dumps({"status": status, "detail": detail[:4000], "rss": rss}) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
