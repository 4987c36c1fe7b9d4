"""The official ONNX backend node tests (onnx 1.23.2, generated in memory by
onnx.backend.test) run against tcc through `tcc.backend`, for every case in
the allow-list of the host (allowlist_host.txt). The list only grows:
regenerate it with `python -m tcc.node_report --write-allowlist
test/backend/allowlist_host.txt` and review the diff; a case that leaves it
is a regression."""
import os
import warnings

import onnx.backend.test

from tcc.backend import backend_for

HERE = os.path.dirname(os.path.abspath(__file__))


def allowlist(name):
    with open(os.path.join(HERE, name)) as f:
        return sorted(l.strip() for l in f if l.strip() and not l.startswith("#"))


HOST = allowlist("allowlist_host.txt")


def test_allowlist_names_real_cases():
    from tcc.node_report import cases
    unknown = [n for n in HOST if n not in cases()]
    assert not unknown, f"allow-list names cases that do not exist: {unknown[:5]}"


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    _suite = onnx.backend.test.BackendTest(backend_for(), __name__)
    for _name in HOST:
        _suite.include(f"^{_name}_cpu$")
    globals().update(_suite.test_cases)
