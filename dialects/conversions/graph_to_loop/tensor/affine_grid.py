"""AffineGrid (opset 20): grid[n, *p, j] = theta[n, j, :nd] . (x, y[, z]) +
theta[n, j, nd], where (x, y, z) are the normalized coordinates of p along
W, H, D. The output's shape gives the spatial sizes, so `size` need not be
a constant. Coordinates are numpy's arange values, as onnx.reference makes
them, held in f64 tables; the sum runs in f64 and rounds once at the end."""
from __future__ import annotations

from contextlib import ExitStack

import numpy as np

from ....ir.types import f64
from ..common import is_float
from ..cast import emit_cast
from ..registry import lowering
from ..common import constant_table


def _coords(n, align_corners):
    if align_corners:
        a = np.arange(-1, 1 + 0.0001, 2.0 / (n - 1)) if n > 1 else np.array([-1.0])
    else:
        step = 2.0 / n
        a = np.arange(-1 + step / 2, 1, step)
    return np.asarray(a, np.float64)[:n]


@lowering("AffineGrid")
def lower_affine_grid(cx, op):
    L = cx.L
    theta, size = op.operands[:2]
    r = op.results[0]
    out = list(r.type.shape)
    nd = len(out) - 2
    N = out[0]
    if nd not in (2, 3) or out[-1] != nd or list(theta.type.shape) != [N, nd, nd + 1]:
        cx.fail(op, f"AffineGrid theta {list(theta.type.shape)} and grid {out} are not a 2D or 3D pair")
    sz = cx.const(size)
    if sz is not None and [int(v) for v in np.asarray(sz).ravel()][2:] != out[1:-1]:
        cx.fail(op, f"AffineGrid size {list(np.asarray(sz).ravel())} disagrees with the grid shape {out}")
    el = r.type.element
    if not is_float(el):
        cx.fail(op, f"AffineGrid does not support element type {el}")
    ac = bool(cx.attr(op, "align_corners"))
    sp = out[1:-1]
    tabs = []
    for n in sp:
        c = _coords(n, ac)
        if len(c) != n:
            cx.fail(op, f"AffineGrid cannot place {n} coordinates")
        tabs.append(constant_table(L, c, f64))
    tb, dst = cx.buf(theta), cx.out(r)
    if r.type.num_elements == 0:
        return
    tel = theta.type.element
    with ExitStack() as st:
        n = st.enter_context(L.loop(0, N, parallel=N > 1))
        t = [[emit_cast(L, L.load(tb, [n, L.c(j), L.c(k)]), tel, f64) for k in range(nd + 1)] for j in range(nd)]
        ivs, cs = [], []
        for d, size_d in enumerate(sp):
            ivs.append(st.enter_context(L.loop(0, size_d, parallel=N == 1 and d == 0 and size_d > 1)))
            cs.append(L.load(tabs[d], [ivs[d]]))
        # Homogeneous coordinate k is spatial dim nd-1-k: x runs along W.
        h = list(reversed(cs))
        for j in range(nd):
            acc = None
            for k in range(nd):
                p = L.op("arith.mulf", [t[j][k], h[k]], f64)
                acc = p if acc is None else L.op("arith.addf", [acc, p], f64)
            acc = L.op("arith.addf", [acc, t[j][nd]], f64)
            L.store(emit_cast(L, acc, f64, el), dst, [n] + ivs + [L.c(j)])
