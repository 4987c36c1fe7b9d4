"""Watching a compile: the phase it is in, for a progress line on stderr
(only when stderr is a terminal, and only once the compile has run for
about a second) and for `--timing`'s table of phases.

The compile stages call `phase("lowering", module)` around their work; with
no compile watched in this thread that is a no-op, so run-time
specialization and library callers pay nothing. Times are exclusive: a phase
entered inside another (host code compiled for one step of a placed model)
is not counted twice."""
from __future__ import annotations

import contextlib
import sys
import threading
import time

# The table's rows, in pipeline order.
PHASES = ("import", "graph passes", "placement", "lowering", "LLVM", "accelerator code (C compile)", "write")
DELAY = 1.0      # seconds before a progress line appears
REFRESH = 0.25   # seconds between its updates

_local = threading.local()


class _Watch:
    def __init__(self, out, show_progress):
        self.out, self.t0 = out, time.perf_counter()
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.stack = []          # [name, start] of the open phases, innermost last
        self.label = "starting"
        self._stop = threading.Event()
        self._shown = False
        self._thread = None
        if show_progress:
            self._thread = threading.Thread(target=self._tick, name="tcc-progress", daemon=True)
            self._thread.start()

    def enter(self, name, ops):
        now = time.perf_counter()
        if self.stack:
            parent = self.stack[-1]
            self.seconds[parent[0]] += now - parent[1]
        self.stack.append([name, now])
        self.label = name + (f" ({ops} ops)" if ops else "")

    def leave(self):
        now = time.perf_counter()
        name, start = self.stack.pop()
        self.seconds[name] += now - start
        if self.stack:
            self.stack[-1][1] = now
            self.label = self.stack[-1][0]

    def _tick(self):
        if self._stop.wait(DELAY):
            return
        while not self._stop.is_set():
            self.out.write(f"\rtcc: {self.label:<40} {time.perf_counter() - self.t0:6.1f} s")
            self.out.flush()
            self._shown = True
            self._stop.wait(REFRESH)

    def close(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._shown:
            self.out.write("\r\033[K")  # the terminal line goes back to what it was
            self.out.flush()

    def table(self):
        total = time.perf_counter() - self.t0
        rows = [(k, v) for k, v in self.seconds.items() if v > 0]
        rows.append(("other", max(total - sum(v for _, v in rows), 0.0)))
        w = max(len(k) for k, _ in rows + [("total", 0)])
        lines = ["compile phases", f"  {'phase':<{w}}  {'seconds':>8}  {'share':>6}"]
        lines += [f"  {k:<{w}}  {v:8.3f}  {100 * v / total if total else 0:5.1f}%" for k, v in rows]
        lines.append(f"  {'total':<{w}}  {total:8.3f}  100.0%")
        return "\n".join(lines) + "\n"


@contextlib.contextmanager
def watch(timing=False, out=None):
    """Watches the compile run inside the block: a progress line when `out`
    (default stderr) is a terminal, and with `timing` the phase table after."""
    out = out or sys.stderr
    if getattr(_local, "watch", None) is not None:  # nested (the cache's build inside a compile): one watch
        yield _local.watch
        return
    tty = bool(getattr(out, "isatty", lambda: False)())
    w = _local.watch = _Watch(out, tty)
    try:
        yield w
    finally:
        _local.watch = None
        w.close()
    if timing:
        out.write(w.table())


def _count_ops(module):
    try:
        return sum(1 for _ in module.walk())
    except Exception:  # noqa: BLE001 - a count is decoration, never a failure
        return None


@contextlib.contextmanager
def phase(name, module=None):
    """Marks the block as phase `name` of the watched compile (if any)."""
    w = getattr(_local, "watch", None)
    if w is None:
        yield
        return
    w.enter(name, _count_ops(module) if module is not None and w._thread is not None else None)
    try:
        yield
    finally:
        w.leave()
