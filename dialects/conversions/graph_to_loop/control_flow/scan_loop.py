"""Scan (opset 9+: state variables, scan inputs and outputs on any axis, in
either direction) and Loop (a trip count and exit condition known at
compile time, after specialization) as one sequential loop whose body is
the op's body graph, lowered in place by the same lowerings:

- the final-state results are the state buffers: they start as copies of
  the initial values, the body reads them through its state arguments, and
  each iteration ends by copying the body's new state into them (after the
  scan outputs are written, since a body may yield one value as both);
- each scan input's slice for the iteration is copied into a buffer of its
  own (the body's argument), each scan output's slice is copied out to its
  position along the output axis (Loop: axis 0, forward);
- buffers the body allocates are freed inside the iteration.
Values the body captures from the enclosing graph are read where they are."""
from __future__ import annotations

from ....ir.types import NONE
from ....transforms.shape_inference import loop_trip_count
from ..registry import lowering


def _axes(cx, op, name, n, ranks):
    vals = list(cx.attr(op, name) or [0] * n)
    if len(vals) != n:
        cx.fail(op, f"Scan {name} has {len(vals)} entries for {n} tensors")
    return [a % r if r else 0 for a, r in zip(vals, ranks)]


def _slice_copy(L, src, dst, axis, t, into):
    """dst[...] = src[..., t, ...] (into=False) or src[...] -> dst[..., t, ...]
    (into=True), t at `axis` of the stacked tensor."""
    _part_copy(L, src, dst, [(axis, t)], into)


def _part_copy(L, src, dst, fixed, into):
    """_slice_copy with several fixed indices: `fixed` lists (axis, index)
    of the larger tensor, by ascending axis (Scan-8: batch b, step t)."""
    shape = (src if into else dst).type.shape
    with L.loops(shape) as ivs:
        full = list(ivs)
        for axis, t in fixed:
            full.insert(axis, t)
        if into:
            L.store(L.load(src, ivs), dst, full)
        else:
            L.store(L.load(src, full), dst, ivs)


def _reversed(L, it, T, backward):
    return L.op("arith.subi", [L.c(T - 1), it], it.type) if backward else it


def _state(cx, inits, results):
    """The final-state results, initialised with copies of the initial values."""
    state = []
    for v, r in zip(inits, results):
        s = cx.out(r)
        cx.L.op("loop.copy", [cx.buf(v), s])
        state.append(s)
    return state


def _end_step(cx, op, it, T, yld, state, stacked, first, out_axes, out_dirs):
    """Scan outputs written at their step, then the new state (a body may
    yield one value as both), then the step's own buffers freed."""
    from ..convert import insert_deallocs
    L = cx.L
    L.loc = op.loc
    for k, dst in enumerate(stacked):
        _slice_copy(L, cx.buf(yld.operands[first + len(state) + k]), dst, out_axes[k],
                    _reversed(L, it, T, out_dirs[k]), into=True)
    for i, s in enumerate(state):
        new = cx.buf(yld.operands[first + i])
        if new is not s:
            L.op("loop.copy", [new, s])
    insert_deallocs(it.block)


@lowering("Scan")
def lower_scan(cx, op):
    L = cx.L
    if cx.opset() < 9:
        return _lower_scan8(cx, op)
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
    state = _state(cx, op.operands[:N], op.results[:N])
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
        yld = cx.lower_ops(body, " (in a loop body)")
        _end_step(cx, op, it, T, yld, state, stacked, 0, out_axes, out_dirs)


def _lower_scan8(cx, op):
    """Scan-8: every operand and result has a batch axis 0 (scan inputs and
    outputs scan along axis 1); the body, per batch element, is Scan-9's.
    An outer loop over the batch with the state in buffers of its own."""
    L = cx.L
    if op.operands[0].type is not NONE:
        cx.fail(op, "Scan-8 with sequence_lens is not supported (leave it out when every sequence is full "
                    "length, or re-export with opset >= 9)")
    body = op.regions[0].blocks[0]
    M = cx.attr(op, "num_scan_inputs")
    operands = op.operands[1:]
    N = len(operands) - M
    ins, outs = operands[N:], op.results[N:]
    dirs = list(cx.attr(op, "directions") or [0] * M)
    lengths = {v.type.shape[1] for v in ins}
    if len(lengths) != 1:
        cx.fail(op, f"Scan inputs disagree on the scan length: {sorted(lengths)}")
    T, B = lengths.pop(), op.results[0].type.shape[0] if op.results else ins[0].type.shape[0]
    finals = [cx.out(r) for r in op.results[:N]]
    stacked = [cx.out(r) for r in outs]
    with L.loop(0, B) as b:
        state = []
        for i in range(N):
            s = L.alloc(body.args[i].type.shape, body.args[i].type.element)
            _part_copy(L, cx.buf(operands[i]), s, [(0, b)], into=False)
            state.append(s)
        if T:
            with L.loop(0, T) as it:
                for j, v in enumerate(ins):
                    arg = body.args[N + j]
                    sl = L.alloc(arg.type.shape, arg.type.element)
                    _part_copy(L, cx.buf(v), sl, [(0, b), (1, _reversed(L, it, T, dirs[j]))], into=False)
                    cx.bufs[arg] = sl
                for i in range(N):
                    cx.bufs[body.args[i]] = state[i]
                yld = cx.lower_ops(body, " (in a loop body)")
                L.loc = op.loc
                for k, dst in enumerate(stacked):
                    _part_copy(L, cx.buf(yld.operands[N + k]), dst, [(0, b), (1, it)], into=True)
                for i, s in enumerate(state):
                    new = cx.buf(yld.operands[i])
                    if new is not s:
                        L.op("loop.copy", [new, s])
                from ..convert import insert_deallocs
                insert_deallocs(it.block)
        for i, s in enumerate(state):
            _part_copy(L, s, finals[i], [(0, b)], into=True)
        from ..convert import insert_deallocs
        insert_deallocs(b.block)


@lowering("Loop")
def lower_loop(cx, op):
    L = cx.L
    T = loop_trip_count(op)
    if T is None:
        cx.fail(op, "Loop needs a trip count and exit condition known at compile time (constants, or graph "
                    "inputs tcc specializes on) and a body that keeps the condition true")
    body = op.regions[0].blocks[0]
    N = len(op.operands) - 2
    state = _state(cx, op.operands[2:], op.results[:N])
    stacked = [cx.out(r) for r in op.results[N:]]
    if T == 0:
        return
    it_buf = L.alloc((), body.args[0].type.element)
    cond_buf = L.alloc((), body.args[1].type.element)
    L.store(L.c(1, body.args[1].type.element), cond_buf)
    with L.loop(0, T) as it:
        L.store(L.op("arith.index_cast", [it], body.args[0].type.element), it_buf)
        cx.bufs[body.args[0]], cx.bufs[body.args[1]] = it_buf, cond_buf
        for i in range(N):
            cx.bufs[body.args[2 + i]] = state[i]
        yld = cx.lower_ops(body, " (in a loop body)")
        _end_step(cx, op, it, T, yld, state, stacked, 1, [0] * len(stacked), [0] * len(stacked))
