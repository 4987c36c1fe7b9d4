"""What the loop transforms ask of loops and buffer accesses: constant
bounds, the buffer behind a chain of views, slabs addressed by a loop's
induction variable, and moving one loop's body into another."""
from __future__ import annotations

from tcc.dialects.ir.types import MemRefType

LIBRARY_CALL = "tcc.library_call"  # graph_to_loop/kernels.py: a nest that becomes one kernel call


def is_static(t):
    return isinstance(t, MemRefType) and t.shape is not None and all(d is not None for d in t.shape)


def const(v):
    """The value of an arith.constant, else None."""
    o = getattr(v, "op", None)
    return o.get_attr("value") if o is not None and o.name == "arith.constant" else None


def same_bounds(a, b):
    """Two loop.for run over the same constant (or identical) range."""
    if a.get_attr("step", 1) != b.get_attr("step", 1):
        return False
    return all(x is y or (const(x) is not None and const(x) == const(y)) for x, y in zip(a.operands, b.operands))


def root(mem):
    """The buffer a chain of loop.view ends at."""
    while getattr(mem, "op", None) is not None and mem.op.name == "loop.view":
        mem = mem.op.operands[0]
    return mem


def elem_bytes(t):
    from tcc.dialects.conversions.loop_to_native.types import elem_bytes as eb
    return eb(t.element)


def nbytes(t):
    n = 1
    for d in t.shape:
        n *= d
    return n * elem_bytes(t)


def slab(mem, idx, iv):
    """(dim, elements) when `idx` holds `iv` at a dim with only unit dims
    before it: the access stays in slab `iv` of `mem`, `elements` long.
    None otherwise."""
    if not is_static(mem.type):
        return None
    shape = mem.type.shape
    for d, v in enumerate(idx):
        if v is iv:
            if any(s != 1 for s in shape[:d]):
                return None
            n = 1
            for s in shape[d + 1:]:
                n *= s
            return d, n
    return None


def has_library_call(loop):
    return any(LIBRARY_CALL in o.attributes for o in loop.walk())


def merge_bodies(a, b, attributes=False):
    """Moves b's body (minus its yield) to the end of a's, b's induction
    variable becoming a's; erases b. `attributes`: a also takes b's
    attributes it lacks (vectorize, say)."""
    body_a, body_b = a.regions[0].blocks[0], b.regions[0].blocks[0]
    body_b.args[0].replace_all_uses_with(body_a.args[0])
    end = body_a.last
    for o in list(body_b.ops):
        if o is body_b.last:
            break
        body_b.remove(o)
        body_a.insert_before(end, o)
    if attributes:
        for k, v in b.attributes.items():
            a.attributes.setdefault(k, v)
    b.erase()
