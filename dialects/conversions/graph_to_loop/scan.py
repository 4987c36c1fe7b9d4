"""Scan (opset 9+: state variables, scan inputs and outputs on any axis, in
either direction) as one sequential loop over the scan axis whose body is
the Scan's body graph, lowered in place by the same lowerings:

- the final-state results are the state buffers: they start as copies of
  the initial values, the body reads them through its state arguments, and
  each iteration ends by copying the body's new state into them (after the
  scan outputs are written, since a body may yield one value as both);
- each scan input's slice for the iteration is copied into a buffer of its
  own (the body's argument), each scan output's slice is copied out to its
  position along the output axis;
- buffers the body allocates are freed inside the iteration.
Values the body captures from the enclosing graph are read where they are."""
from __future__ import annotations

from .registry import LOWERINGS, lowering


def _axes(cx, op, name, n, ranks):
    vals = list(cx.attr(op, name) or [0] * n)
    if len(vals) != n:
        cx.fail(op, f"Scan {name} has {len(vals)} entries for {n} tensors")
    return [a % r if r else 0 for a, r in zip(vals, ranks)]


def _slice_copy(L, src, dst, axis, t, into):
    """dst[...] = src[..., t, ...] (into=False) or src[...] -> dst[..., t, ...]
    (into=True), t at `axis` of the stacked tensor."""
    shape = (src if into else dst).type.shape
    with L.loops(shape) as ivs:
        full = list(ivs[:axis]) + [t] + list(ivs[axis:])
        if into:
            L.store(L.load(src, ivs), dst, full)
        else:
            L.store(L.load(src, full), dst, ivs)


def _reversed(L, it, T, backward):
    return L.op("arith.subi", [L.c(T - 1), it], it.type) if backward else it


@lowering("Scan")
def lower_scan(cx, op):
    from .convert import LoweringError, _insert_deallocs
    L = cx.L
    if cx.opset() < 9:
        cx.fail(op, "Scan-8 (batch axis, sequence_lens) is not supported; re-export with opset >= 9")
    body = op.regions[0].blocks[0]
    M = cx.attr(op, "num_scan_inputs")
    N = len(op.operands) - M
    K = len(op.results) - N
    ins, outs = op.operands[N:], op.results[N:]
    in_axes = _axes(cx, op, "scan_input_axes", M, [v.type.rank for v in ins])
    in_dirs = list(cx.attr(op, "scan_input_directions") or [0] * M)
    out_axes = _axes(cx, op, "scan_output_axes", K, [r.type.rank for r in outs])
    out_dirs = list(cx.attr(op, "scan_output_directions") or [0] * K)
    lengths = {v.type.shape[a] for v, a in zip(ins, in_axes)}
    if len(lengths) != 1:
        cx.fail(op, f"Scan inputs disagree on the scan length: {sorted(lengths)}")
    T = lengths.pop()
    state = []
    for i in range(N):
        s = cx.out(op.results[i])
        L.op("loop.copy", [cx.buf(op.operands[i]), s])
        state.append(s)
    stacked = [cx.out(r) for r in outs]
    if T == 0:
        return
    with L.loop(0, T) as it:
        for j, (v, a) in enumerate(zip(ins, in_axes)):
            arg = body.args[N + j]
            sl = L.alloc(arg.type.shape, arg.type.element)
            _slice_copy(L, cx.buf(v), sl, a, _reversed(L, it, T, in_dirs[j]), into=False)
            cx.bufs[arg] = sl
        for i in range(N):
            cx.bufs[body.args[i]] = state[i]
        yld = body.last
        for bop in list(body.ops):
            if bop is yld:
                break
            if bop.name == "onnx.NoValue":
                continue
            fn = LOWERINGS.get(bop.name)
            if fn is None:
                raise LoweringError(f"{bop.loc.describe()}: no host lowering for {bop.name} (in a Scan body)")
            L.loc = bop.loc
            fn(cx, bop)
        L.loc = op.loc
        for k in range(K):
            _slice_copy(L, cx.buf(yld.operands[N + k]), stacked[k], out_axes[k],
                        _reversed(L, it, T, out_dirs[k]), into=True)
        for i in range(N):
            new = cx.buf(yld.operands[i])
            if new is not state[i]:
                L.op("loop.copy", [new, state[i]])
        _insert_deallocs(it.block)
