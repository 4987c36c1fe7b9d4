"""Sibling loop fusion inside a row body: two adjacent inner loops over the
same range merge when every buffer they share (one of them writing it) is
accessed at the same element, a function of the iteration, in both. After
`fuse-rows` puts Softmax and LayerNormalization in one row body, Softmax's
scaling pass and LayerNormalization's mean pass walk the row the same way;
one loop does both (one load and one store per element fewer).

Element identity is decided on flat offsets: each access's indices,
through views (contiguous reshapes), become sum(stride * index) over the
root buffer; it must be `c * iv + (the same terms)` with c != 0 in every
access to a shared, written buffer, so iteration i of one loop touches only
what iteration i of the other touches. A buffer one loop reduces into (a
sum at a fixed element) and the other reads is shared at c == 0: refused,
since the reader needs the finished value.

Ops between the two loops move out of the way when that is safe: deallocs
below the second loop (if it does not touch the buffer), allocs, constants
and stores of values defined before the first loop into buffers it does not
touch, above it."""
from __future__ import annotations

from .access import LIBRARY_CALL, const, is_static, merge_bodies, root, same_bounds

_SIDE_EFFECTS = ("loop.call", "loop.copy", "loop.store_block", "loop.dim")


def _is_inner_loop(op):
    return (op is not None and op.name == "loop.for" and "parallel" not in op.attributes
            and not any(o is not op and o.name == "loop.for" for o in op.walk()))


def _flat(mem, idx, iv, inside):
    """{term: coefficient} of the flat offset (term "iv", a Value defined
    outside, or 1 for the constant part); None when not affine in those."""
    if not is_static(mem.type):
        return None
    strides, acc = [], 1
    for d in reversed(mem.type.shape):
        strides.append(acc)
        acc *= d
    strides.reverse()
    out = {}
    for v, s in zip(idx, strides):
        if v is iv:
            key, k = "iv", s
        elif const(v) is not None:
            key, k = 1, s * int(const(v))
        elif v in inside:
            return None
        else:
            key, k = v, s
        out[key] = out.get(key, 0) + k
    return {k: c for k, c in out.items() if c != 0}


def _accesses(loop):
    """[(root, written?, flat form or None)], or None for a loop this cannot see through."""
    body = loop.regions[0].blocks[0]
    iv = body.args[0]
    inside = set()
    out = []
    for o in loop.walk():
        if o is loop:
            continue
        if o.name in _SIDE_EFFECTS or LIBRARY_CALL in o.attributes:
            return None
        if o.name == "loop.load":
            out.append((root(o.operands[0]), False, _flat(o.operands[0], o.operands[1:], iv, inside)))
        elif o.name == "loop.store":
            out.append((root(o.operands[1]), True, _flat(o.operands[1], o.operands[2:], iv, inside)))
        inside.update(o.results)
    return out


def _fusable(a, b):
    acc_a, acc_b = _accesses(a), _accesses(b)
    if acc_a is None or acc_b is None:
        return False
    roots_a = {r for r, _, _ in acc_a}
    roots_b = {r for r, _, _ in acc_b}
    for buf in roots_a & roots_b:
        forms = [f for r, _, f in acc_a + acc_b if r is buf]
        written = any(w for r, w, _ in acc_a + acc_b if r is buf)
        if not written:
            continue
        if any(f is None for f in forms) or any(f != forms[0] for f in forms) or not forms[0].get("iv"):
            return False
    return True


def _touches(loop, buf):
    return any(o.name in ("loop.load", "loop.store") and root(o.operands[0 if o.name == "loop.load" else 1]) is buf
               for o in loop.walk())


def _movable_up(op, a, up):
    """Can `op` (between a and the next loop) move above loop `a`, given
    the ops before it in `up` move too?"""
    if op.name in ("arith.constant", "loop.alloc"):
        return True
    if op.name == "loop.store":
        return not _touches(a, root(op.operands[1])) and all(
            getattr(v, "op", None) is None or v.op.parent is not a.parent or v.op in up or _precedes(v.op, a)
            for v in op.operands)
    return False


def _precedes(x, y):
    """x comes before y in their block."""
    while x is not None:
        if x is y:
            return True
        x = x.next
    return False


def fuse_siblings(block):
    """Merges adjacent inner loops of `block` where legal; returns how many."""
    merged = 0
    op = block.first
    while op is not None:
        if not _is_inner_loop(op):
            op = op.next
            continue
        nxt, up, down = op.next, [], []
        while nxt is not None and nxt.name != "loop.for":
            if nxt.name == "loop.dealloc":
                down.append(nxt)
            elif _movable_up(nxt, op, up):
                up.append(nxt)
            else:
                break
            nxt = nxt.next
        if (_is_inner_loop(nxt) and same_bounds(op, nxt) and _fusable(op, nxt)
                and not any(_touches(nxt, root(d.operands[0])) for d in down)):
            for o in up:
                block.remove(o)
                block.insert_before(op, o)
            for o in down:
                block.remove(o)
                block.insert_after(nxt, o)
            merge_bodies(op, nxt, attributes=True)
            merged += 1
            continue
        op = op.next
    return merged
