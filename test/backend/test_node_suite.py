"""The official ONNX backend node tests (onnx 1.23.2, generated in memory by
onnx.backend.test) run against tcc through `tcc.backend`, for every case in
the allow-list of the host (allowlist_host.txt). The list only grows:
regenerate it with `python -m tcc.node_report --write-allowlist
test/backend/allowlist_host.txt` and review the diff; a case that leaves it
is a regression."""
import os
import warnings

import numpy as np
import onnx.backend.test

from tcc.backend import backend_for

HERE = os.path.dirname(os.path.abspath(__file__))


def allowlist(name):
    with open(os.path.join(HERE, name)) as f:
        return sorted(l.strip() for l in f if l.strip() and not l.startswith("#"))


HOST = allowlist("allowlist_host.txt")
# The allow-list's size when last regenerated: it may only grow, so a case
# that stops passing cannot leave the list unnoticed when it is rewritten.
# Raise this (never lower it) with the regenerated list.
HOST_CASES = 1877
INT_NAMES = {"int4", "uint4", "int2", "uint2"}  # ml_dtypes' sub-byte integers


def test_allowlist_only_grows():
    assert len(set(HOST)) == len(HOST), "allow-list names a case twice"
    assert len(HOST) >= HOST_CASES, (f"allow-list has {len(HOST)} cases, {HOST_CASES - len(HOST)} fewer than "
                                     f"HOST_CASES = {HOST_CASES}: a regression (see this file's docstring)")


class ExactIntegersBackendTest(onnx.backend.test.BackendTest):
    """onnx's runner compares every output with rtol 1e-3, integers too (so
    1001 passes for 1000): integer and boolean outputs must be exact."""

    @classmethod
    def assert_similar_outputs(cls, ref_outputs, outputs, rtol, atol, model_dir=None):
        np.testing.assert_equal(len(outputs), len(ref_outputs))
        for r, o in zip(ref_outputs, outputs):
            if r is None or isinstance(r, (list, tuple)):  # an empty optional, a sequence: element by element
                assert (o is None) == (r is None), f"got {type(o).__name__}, expected {type(r).__name__}"
                if r is not None:  # (onnx's runner calls len() on each element: a 0-d one has none)
                    assert isinstance(o, (list, tuple)), f"got {type(o).__name__}, expected a sequence"
                    cls.assert_similar_outputs(list(r), list(o), rtol, atol, model_dir=model_dir)
                continue
            dt = getattr(r, "dtype", None)
            if dt is not None and dt != object and (dt.kind in "iub" or dt.name in INT_NAMES):
                np.testing.assert_equal(o.dtype, dt)
                np.testing.assert_array_equal(o.shape, r.shape, err_msg="incorrect shape")
                np.testing.assert_array_equal(o.astype(np.int64), r.astype(np.int64))
            else:
                super().assert_similar_outputs([r], [o], rtol, atol, model_dir=model_dir)


def test_integers_compared_exactly():
    a = np.array([1000, 7], np.int64)
    ExactIntegersBackendTest.assert_similar_outputs([a], [a.copy()], 1e-3, 1e-7)
    with np.testing.assert_raises(AssertionError):
        ExactIntegersBackendTest.assert_similar_outputs([a], [a + [1, 0]], 1e-3, 1e-7)
    with np.testing.assert_raises(AssertionError):
        ExactIntegersBackendTest.assert_similar_outputs([a], [a, a], 1e-3, 1e-7)


def test_sequences_compared_element_by_element():
    a, z = np.arange(3, dtype=np.float32), np.array(1.0, np.float32)
    ExactIntegersBackendTest.assert_similar_outputs([[z, a]], [[z.copy(), a.copy()]], 1e-3, 1e-7)
    ExactIntegersBackendTest.assert_similar_outputs([None], [None], 1e-3, 1e-7)
    for bad in ([[z, a + 1]], [[z]], [[z + 1, a]], [a], [None]):
        with np.testing.assert_raises(AssertionError):
            ExactIntegersBackendTest.assert_similar_outputs([[z, a]], bad, 1e-3, 1e-7)


def test_allowlist_names_real_cases():
    from tcc.node_report import cases
    unknown = [n for n in HOST if n not in cases()]
    assert not unknown, f"allow-list names cases that do not exist: {unknown[:5]}"


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    _suite = ExactIntegersBackendTest(backend_for(), __name__)
    for _name in HOST:
        _suite.include(f"^{_name}_cpu$")
    globals().update(_suite.test_cases)
