"""Progress and timing: a compile running past about a second shows its
stage and op count on stderr when stderr is a terminal (and says nothing
otherwise); `--timing` prints one table of the compile's phases."""
import io
import os
import pty
import re
import select
import subprocess
import sys
import time

import onnx

from tcc import samples
from tcc.driver import progress

from ..conftest import run_tool


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


class FakeModule:
    def walk(self):
        return iter(range(42))


def test_progress_line_only_after_the_delay_and_cleared():
    out = FakeTerminal()
    with progress.watch(out=out):
        with progress.phase("lowering", FakeModule()):
            time.sleep(progress.DELAY + 4 * progress.REFRESH)
    text = out.getvalue()
    assert "\rtcc: lowering (42 ops)" in text
    assert text.endswith("\r\033[K")  # the line is erased at the end
    quick = FakeTerminal()
    with progress.watch(out=quick):
        with progress.phase("lowering", FakeModule()):
            pass
    assert quick.getvalue() == ""  # a short compile shows nothing


def test_silent_when_not_a_terminal():
    out = io.StringIO()
    with progress.watch(out=out):
        with progress.phase("LLVM"):
            time.sleep(progress.DELAY + 2 * progress.REFRESH)
    assert out.getvalue() == ""


def test_phase_times_are_exclusive():
    out = io.StringIO()
    with progress.watch(timing=True, out=out) as w:
        with progress.phase("placement"):
            time.sleep(0.2)
            with progress.phase("lowering"):
                time.sleep(0.3)
    assert 0.18 < w.seconds["placement"] < 0.28 and 0.28 < w.seconds["lowering"] < 0.4
    table = out.getvalue().splitlines()
    assert table[0] == "compile phases" and table[-1].split()[0] == "total"
    assert [l.split()[0] for l in table[2:-1]] == ["placement", "lowering", "other"]


def test_cli_timing_table(tmp_path):
    onnx.save(samples.cnn(seed=2), tmp_path / "cnn.onnx")
    r = run_tool("tcc", "--maccel=host", "--timing", tmp_path / "cnn.onnx")  # the host path: its phases
    assert r.returncode == 0, r.stderr
    rows = [l.split()[0] for l in r.stderr.splitlines()[2:]]
    assert rows[:5] == ["import", "graph", "lowering", "LLVM", "write"] and rows[-1] == "total", r.stderr
    assert "\r" not in r.stderr  # stderr is a pipe here: no progress line


def test_cli_progress_on_a_terminal(tmp_path):
    onnx.save(samples.resnet18(seed=2), tmp_path / "r18.onnx")  # compiles in more than a second
    master, slave = pty.openpty()
    exe = os.path.join(os.path.dirname(sys.executable), "tcc")
    p = subprocess.Popen([exe, "--no-cache", "--maccel=host", str(tmp_path / "r18.onnx")], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=slave, close_fds=True)
    os.close(slave)
    seen = b""
    while True:
        ready, _, _ = select.select([master], [], [], 300)
        if not ready:
            break
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    assert p.wait(timeout=300) == 0, seen
    text = seen.decode()
    # each update names the phase the compile is in (with its op count where it has one); which
    # phases a second in reaches depends on the machine (AMD EPYC Zen 5: only `write`)
    labels = re.findall(r"\rtcc: (.*?) +\d+\.\d s", text)
    assert labels and all(re.fullmatch(r"(.+?)( \(\d+ ops\))?", lb).group(1) in progress.PHASES
                          for lb in labels), text
    assert text.endswith("\r\033[K"), text
