"""`fuse-rows`: merges consecutive parallel row loops, then shrinks the
buffers that only carried one row from one to the next.

Row-wise lowerings (Softmax, LayerNormalization, the normalizations) each
emit one `parallel` loop over rows whose body walks its row several times.
Two of them back to back (Softmax then LayerNormalization, the attention
block's tail) write and re-read a whole intermediate tensor through memory;
merged, row r of the second runs right after row r of the first while that
row is still in L1, and the intermediate shrinks to one row per worker
(array contraction). That halves the DRAM traffic of such pairs.

Fusion of loops A then B (same constant bounds, both parallel) is legal when
every buffer one of them writes and the other touches is accessed only at
row `iv` in both: the first index of each access, through views that keep
the leading dimension, is the loop's own induction variable. Then no
iteration of the merged loop reads what another one writes. Loops with
external calls or whole-buffer copies are left alone (their accesses are not
visible here), and so are nests marked as library calls (graph_to_loop's
kernels.py: they must stay whole to become one call). Ops between A and B that touch no memory (constants, views,
allocs, globals) move above A first; deallocs move below B.

Contraction: a function-level static buffer whose every use (through such
views) is a row-`iv` access inside one parallel loop becomes a per-iteration
buffer of the row's shape, allocated in the loop body (codegen puts small
ones on the worker's stack)."""
from __future__ import annotations

from tcc.dialects.ir.attributes import IntegerAttr
from tcc.dialects.ir.core import Operation
from tcc.dialects.ir.passes import Pass
from tcc.dialects.ir.types import INDEX, MemRefType

from .access import LIBRARY_CALL, is_static, merge_bodies, same_bounds

_MOVABLE = {"arith.constant", "loop.view", "loop.alloc", "loop.global"}


def _is_parallel_for(op):
    return op is not None and op.name == "loop.for" and "parallel" in op.attributes


def _root_keeping_rows(mem):
    """(root buffer, whether every view on the way keeps the leading dim)."""
    keeps = True
    while getattr(mem, "op", None) is not None and mem.op.name == "loop.view":
        src = mem.op.operands[0]
        if not (is_static(mem.type) and is_static(src.type) and mem.type.rank and src.type.rank
                and mem.type.shape[0] == src.type.shape[0]):
            keeps = False
        mem = src
    return mem, keeps


def _accesses(loop):
    """{root buffer: (written?, all accesses at row iv?)} for buffers defined
    outside `loop`; None when the loop holds an access this pass cannot see."""
    iv = loop.regions[0].blocks[0].args[0]
    out = {}
    for o in loop.walk():
        if LIBRARY_CALL in o.attributes:
            return None  # a nest that becomes one kernel call must stay whole
        if o is loop:
            continue
        if o.name in ("loop.call", "loop.copy", "loop.dim", "loop.store_block"):
            return None
        if o.name == "loop.load":
            mem, idx, write = o.operands[0], o.operands[1:], False
        elif o.name == "loop.store":
            mem, idx, write = o.operands[1], o.operands[2:], True
        else:
            continue
        root, keeps = _root_keeping_rows(mem)
        if _defined_inside(root, loop):
            continue
        rowwise = keeps and bool(idx) and idx[0] is iv
        w, r = out.get(root, (False, True))
        out[root] = (w or write, r and rowwise)
    return out


def _defined_inside(value, loop):
    owner = getattr(value, "op", None)
    if owner is None:
        owner = value.block.parent_op if hasattr(value, "block") else None
    return owner is not None and owner is not loop and loop.is_ancestor_of(owner)


def _can_fuse(a, b):
    acc_a, acc_b = _accesses(a), _accesses(b)
    if acc_a is None or acc_b is None:
        return False
    for buf in acc_a.keys() & acc_b.keys():
        (wa, ra), (wb, rb) = acc_a[buf], acc_b[buf]
        if (wa or wb) and not (ra and rb):
            return False
    return True


def fuse_block(block):
    """Fuses runs of parallel row loops in `block`; returns how many merges."""
    merged = 0
    op = block.first
    while op is not None:
        if not _is_parallel_for(op):
            op = op.next
            continue
        nxt, between = op.next, []
        while nxt is not None and (nxt.name in _MOVABLE or nxt.name == "loop.dealloc"):
            between.append(nxt)
            nxt = nxt.next
        if _is_parallel_for(nxt) and same_bounds(op, nxt) and _can_fuse(op, nxt):
            for o in between:
                block.remove(o)
                if o.name == "loop.dealloc":  # a later free is always safe
                    block.insert_after(nxt, o)
                else:
                    block.insert_before(op, o)
            merge_bodies(op, nxt)
            merged += 1
            continue  # try the next loop against the merged one
        op = op.next
    return merged


def _row_uses(alloc):
    """The loads, stores and views reaching `alloc`, or None when some use is
    not a row access or not inside one single parallel loop."""
    uses, loop, todo = [], None, [alloc.results[0]]
    while todo:
        v = todo.pop()
        for u, i in v.uses:
            if u.name == "loop.view":
                t, s = u.results[0].type, u.operands[0].type
                if not (is_static(t) and t.rank and t.shape[0] == s.shape[0]):
                    return None
                uses.append(u)
                todo.extend(u.results)
                continue
            if u.name == "loop.dealloc" and u.parent is alloc.parent:
                uses.append(u)
                continue
            if not ((u.name == "loop.load" and i == 0) or (u.name == "loop.store" and i == 1)):
                return None
            p = u.parent_op
            while p is not None and not _is_parallel_for(p):
                p = p.parent_op
            if p is None or (loop is not None and p is not loop):
                return None
            idx = u.operands[1:] if u.name == "loop.load" else u.operands[2:]
            if not idx or idx[0] is not p.regions[0].blocks[0].args[0]:
                return None
            loop = p
            uses.append(u)
    return (loop, uses) if loop is not None and loop.parent is alloc.parent else None


def _row_type(t):
    return MemRefType(tuple(t.shape[1:]) or (1,), t.element)


def contract(alloc):
    """Replaces a whole-tensor buffer used one row per iteration by a row
    buffer allocated inside the loop. Returns whether it did."""
    t = alloc.results[0].type
    if not is_static(t) or t.rank < 2 or alloc.operands:
        return False
    found = _row_uses(alloc)
    if found is None:
        return False
    loop, uses = found
    body = loop.regions[0].blocks[0]
    row = Operation("loop.alloc", [], [_row_type(t)], dict(alloc.attributes), loc=alloc.loc)
    row.attributes.pop("tcc.offset", None)
    body.insert_before(body.first, row)
    new = {alloc.results[0]: row.results[0]}
    anchor = row
    for v in _views_in_order(uses):  # each re-created from its (already replaced) source
        nv = Operation("loop.view", [new[v.operands[0]]], [_row_type(v.results[0].type)], dict(v.attributes),
                       loc=v.loc)
        body.insert_after(anchor, nv)
        anchor = nv
        new[v.results[0]] = nv.results[0]
    zero = None
    for u in uses:
        if u.name not in ("loop.load", "loop.store"):
            continue
        k = 0 if u.name == "loop.load" else 1
        rest = u.operands[k + 2:]
        if not rest:  # the row was one element: index 0 of a (1,) buffer
            if zero is None:
                zero = Operation("arith.constant", [], [INDEX], {"value": IntegerAttr(0, INDEX)})
                body.insert_after(anchor, zero)
            rest = [zero.results[0]]
        u.set_operands(u.operands[:k] + [new[u.operands[k]]] + rest)
    for u in uses:
        if u.name == "loop.dealloc":
            u.erase()
    for u in reversed(_views_in_order(uses)):
        u.erase()
    alloc.erase()
    return True


def _views_in_order(uses):
    views = [u for u in uses if u.name == "loop.view"]
    done, out = set(), []
    while len(out) < len(views):
        for v in views:
            if v not in done and not (getattr(v.operands[0], "op", None) in views
                                      and v.operands[0].op not in done):
                done.add(v)
                out.append(v)
    return out


class FuseRowsPass(Pass):
    name = "fuse-rows"
    summary = ("merge consecutive parallel row loops, shrink the buffers between them to one row, "
               "and merge the inner loops of a merged row body that walk the row alike")

    def run(self, module, context):
        from .fuse_siblings import fuse_siblings
        for func in module.functions():
            for region in func.regions:
                for block in region.blocks:
                    if fuse_block(block):
                        for o in list(block.ops):
                            if o.name == "loop.alloc":
                                contract(o)
                        for o in block.ops:
                            if _is_parallel_for(o):
                                fuse_siblings(o.regions[0].blocks[0])
