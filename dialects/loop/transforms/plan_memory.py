"""`plan-memory`: places every static `loop.alloc` at a byte offset of one
workspace buffer (attribute `tcc.offset`), reusing bytes between buffers
whose lifetimes do not overlap, and records the workspace's size on the
function (`tcc.workspace_bytes`).

Lifetimes: ops are numbered in program order (a pre-order walk, so a loop's
body sits between the loop and the next op); a buffer lives from its alloc to
its last use (its dealloc, or any use of it or of a view of it), where a use
inside a loop that does not also contain the alloc counts as the loop's end,
since the next iteration uses the buffer again.

Placement: buffers in order of birth, each into the best-fitting gap (the
smallest that holds it) between the buffers already placed that are live at
the same time, else on top; offsets and sizes are 64-byte aligned.

Not planned (codegen allocates them itself): buffers with dynamic shapes and
buffers allocated inside a `parallel` loop (each worker needs its own)."""
from __future__ import annotations

from tcc.dialects.ir.attributes import IntegerAttr
from tcc.dialects.ir.passes import Pass
from tcc.dialects.ir.types import i64


ALIGN = 64


def _align(n):
    return -(-n // ALIGN) * ALIGN


def _in_parallel_loop(op):
    p = op.parent_op
    while p is not None:
        if p.name == "loop.for" and "parallel" in p.attributes:
            return True
        p = p.parent_op
    return False


def _number(func):
    """Pre-order positions, and for each op the position of the last op nested in it."""
    pos, last, order = {}, {}, []

    def visit(op):
        pos[op] = len(order)
        order.append(op)
        for reg in op.regions:
            for blk in reg.blocks:
                for o in blk.ops:
                    visit(o)
        last[op] = len(order) - 1

    visit(func)
    return pos, last, order


def _users(value):
    """Ops using a buffer, directly or through views of it."""
    out, todo = [], [value]
    while todo:
        v = todo.pop()
        for u, _ in v.uses:
            out.append(u)
            if u.name == "loop.view":
                todo.extend(u.results)
    return out


def _end(use, alloc, pos, last):
    """Where a use ends the buffer's life: a use inside a loop that does not
    also hold the alloc keeps the buffer alive to the end of that loop (the
    next iteration uses it again)."""
    end, p = pos[use], use.parent_op
    while p is not None and not p.is_ancestor_of(alloc):
        if p.name == "loop.for":
            end = last[p]
        p = p.parent_op
    return end


def lifetimes(func):
    """[(alloc op, size, start, end)] for every plannable alloc: from the
    alloc to its dealloc, or to its last use when it has none."""
    # The native backend's element sizes (imported here: its package pulls in
    # llvmlite, which registering this pass in every context must not).
    from tcc.dialects.conversions.loop_to_native.types import byte_size
    pos, last, order = _number(func)
    out = []
    for op in order:
        if op.name != "loop.alloc":
            continue
        t = op.results[0].type
        if t.shape is None or any(d is None for d in t.shape) or _in_parallel_loop(op):
            continue
        users = _users(op.results[0])
        end = max((_end(u, op, pos, last) for u in users), default=pos[op])
        out.append((op, _align(max(byte_size(t), 1)), pos[op], end))
    return out


def plan(items):
    """items: [(key, size, start, end)] -> ({key: offset}, peak bytes)."""
    placed = []  # (offset, size, start, end)
    offsets, peak = {}, 0
    for key, size, start, end in sorted(items, key=lambda x: (x[2], -x[1])):
        live = sorted((o, s) for o, s, st, en in placed if st <= end and start <= en)
        best, best_gap, cursor = None, None, 0
        for o, s in live:
            gap = o - cursor
            if gap >= size and (best_gap is None or gap < best_gap):
                best, best_gap = cursor, gap
            cursor = max(cursor, o + s)
        off = best if best is not None else cursor
        placed.append((off, size, start, end))
        offsets[key] = off
        peak = max(peak, off + size)
    return offsets, peak


class PlanMemory(Pass):
    name = "plan-memory"
    summary = "place loop.alloc buffers in one workspace by liveness (tcc.offset, tcc.workspace_bytes)"

    def run(self, module, context):
        for func in module.functions():
            items = lifetimes(func)
            offsets, peak = plan(items)
            for op, off in offsets.items():
                op.set_attr("tcc.offset", IntegerAttr(off, i64))
            func.set_attr("tcc.workspace_bytes", IntegerAttr(peak, i64))
