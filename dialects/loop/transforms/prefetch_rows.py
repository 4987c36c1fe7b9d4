"""`prefetch-rows`: a parallel row loop that reads a large tensor one row
(slab) per iteration asks for the next iteration's row at the start of this
one (`loop.prefetch`).

A row-wise body (Softmax then LayerNormalization over 1024 columns) works on
its row for thousands of cycles between reading rows, too long for the
hardware's stream prefetcher to run ahead: each row's first pass then waits
on memory (measured: 40 % of the loop's time on the loads of its first
pass). Prefetching row iv + 1 overlaps that wait with row iv's work; each
worker runs contiguous chunks of rows, so the next row is usually its own.

Applies to loads from a buffer of at least `min-bytes` whose index holds
the loop's induction variable at some dimension with only unit dimensions
before it (the same slab form as `stream-outputs`), slabs of 1 to 64 KiB."""
from __future__ import annotations

from tcc.dialects.ir.attributes import IntegerAttr
from tcc.dialects.ir.core import Operation
from tcc.dialects.ir.passes import Pass
from tcc.dialects.ir.types import INDEX

from .access import elem_bytes, has_library_call, is_static, nbytes, root, slab

SLAB_MIN, SLAB_MAX = 1024, 64 << 10


def prefetch_rows(loop, min_bytes):
    body = loop.regions[0].blocks[0]
    iv = body.args[0]
    slabs = {}
    for o in loop.walk():
        if o.name != "loop.load":
            continue
        buf = root(o.operands[0])
        if not is_static(buf.type) or nbytes(buf.type) < min_bytes or buf in slabs:
            continue
        found = slab(o.operands[0], o.operands[1:], iv)
        if found is not None and SLAB_MIN <= found[1] * elem_bytes(buf.type) <= SLAB_MAX:
            slabs[buf] = found[1]
    if not slabs:
        return 0
    one = Operation("arith.constant", [], [INDEX], {"value": IntegerAttr(1, INDEX)})
    nxt = Operation("arith.addi", [iv, one.results[0]], [INDEX])
    ops = [one, nxt]
    for buf, n in slabs.items():
        size = Operation("arith.constant", [], [INDEX], {"value": IntegerAttr(n, INDEX)})
        off = Operation("arith.muli", [nxt.results[0], size.results[0]], [INDEX])
        ops += [size, off, Operation("loop.prefetch", [buf, off.results[0], size.results[0]])]
    first = body.first
    for o in ops:
        body.insert_before(first, o)
    return len(slabs)


class PrefetchRowsPass(Pass):
    name = "prefetch-rows"
    summary = "parallel row loops prefetch the next row of large inputs at the start of each row"
    options = {"min-bytes": (int, 4 << 20, "smaller buffers stay in the cache anyway", 0)}

    def run(self, module, context):
        for func in module.functions():
            for region in func.regions:
                for block in region.blocks:
                    for op in block.ops:
                        if op.name == "loop.for" and "parallel" in op.attributes and not has_library_call(op):
                            prefetch_rows(op, self.min_bytes)
