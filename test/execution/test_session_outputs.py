"""Output arrays are recycled only when nothing outside the session still
sees them: a kept output, or a view of one, is never overwritten."""
import numpy as np

import tcc
from tcc import samples


def test_outputs_never_alias_what_the_caller_keeps(tmp_path, rng):
    sess = tcc.load(tcc.compile(samples.mlp(seed=1), output=str(tmp_path / "m.tcc")))
    xs = [rng.standard_normal((1, 784)).astype(np.float32) for _ in range(4)]
    first = sess.run({"x": xs[0]})[0]
    snapshot = first.copy()
    second = sess.run({"x": xs[1]})[0]
    assert not np.shares_memory(first, second)
    np.testing.assert_array_equal(first, snapshot)
    view = second[0, :3]
    view_snapshot = view.copy()
    del second
    third = sess.run({"x": xs[2]})[0]
    assert not np.shares_memory(view, third)
    np.testing.assert_array_equal(view, view_snapshot)
    # A discarded output's memory is reused, and still holds correct results.
    addresses = {sess.run({"x": xs[3]})[0].ctypes.data for _ in range(3)}
    assert len(addresses) == 1
    np.testing.assert_array_equal(sess.run({"x": xs[2]})[0], third)


def test_inputs_at_any_element_aligned_address_are_read_in_place(tmp_path, rng):
    """Generated code assumes element alignment only: inputs 4 bytes past a
    cache line, or strided views (copied), give the same results."""
    m = samples.mlp(seed=2)
    sess = tcc.load(tcc.compile(m, output=str(tmp_path / "m.tcc")))
    x = rng.standard_normal((1, 784)).astype(np.float32)
    want = sess.run({"x": np.ascontiguousarray(x)})[0].copy()
    raw = np.empty(785 + 16, np.float32)
    for off in range(1, 17):
        shifted = raw[off:off + 784].reshape(1, 784)
        shifted[...] = x
        np.testing.assert_array_equal(sess.run({"x": shifted})[0], want)
    strided = np.repeat(x, 2, axis=1)[:, ::2]
    np.testing.assert_array_equal(sess.run({"x": strided})[0], want)
