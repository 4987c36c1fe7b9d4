"""FileCheck-style tests: each test/ir/lit/*.mlir file has `// RUN:` lines
(a tcc-opt command line, `%s` the file itself) and `// CHECK:` lines matched in
order against the output (`CHECK-NEXT:` on the next line, `CHECK-NOT:` absent
between two matches; `{{regex}}` inside a pattern)."""
import glob
import os
import re
import shlex

import pytest

from ..conftest import run_tool

HERE = os.path.join(os.path.dirname(__file__), "lit")


def _pattern(text):
    parts = re.split(r"\{\{(.*?)\}\}", text.strip())
    return re.compile("".join(re.escape(p) if i % 2 == 0 else p for i, p in enumerate(parts)))


def filecheck(output, checks):
    lines = output.splitlines()
    pos, pending_not = 0, []
    for kind, pat in checks:
        rx = _pattern(pat)
        if kind == "CHECK-NOT":
            pending_not.append((rx, pat))
            continue
        start = pos
        if kind == "CHECK-NEXT":
            found = pos if pos < len(lines) and rx.search(lines[pos]) else None
        else:
            found = next((i for i in range(pos, len(lines)) if rx.search(lines[i])), None)
        assert found is not None, f"{kind}: '{pat}' not found after line {pos}:\n{output}"
        for nrx, npat in pending_not:
            for i in range(start, found):
                assert not nrx.search(lines[i]), f"CHECK-NOT: '{npat}' matched line {i}: {lines[i]}"
        pending_not = []
        pos = found + 1
    for nrx, npat in pending_not:
        for i in range(pos, len(lines)):
            assert not nrx.search(lines[i]), f"CHECK-NOT: '{npat}' matched line {i}: {lines[i]}"


def test_filecheck_itself_can_fail():
    with pytest.raises(AssertionError):
        filecheck("a\nb\n", [("CHECK", "b"), ("CHECK", "a")])
    with pytest.raises(AssertionError):
        filecheck("a\nx\nb\n", [("CHECK", "a"), ("CHECK-NOT", "x"), ("CHECK", "b")])


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(HERE, "*.mlir"))), ids=os.path.basename)
def test_lit(path):
    src = open(path).read()
    runs = re.findall(r"^// RUN: (.*)$", src, re.M)
    checks = re.findall(r"^// (CHECK(?:-NEXT|-NOT)?): (.*)$", src, re.M)
    assert runs and checks, "a lit test needs RUN and CHECK lines"
    for run in runs:
        argv = shlex.split(run.replace("%s", shlex.quote(path)))
        r = run_tool(argv[0], *argv[1:])
        assert r.returncode == 0, r.stderr
        filecheck(r.stdout, checks)
