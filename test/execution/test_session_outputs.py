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
