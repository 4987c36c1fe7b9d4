"""`stream-outputs`: large outputs that the function only writes are
written a block at a time through a small buffer and a non-temporal
`loop.store_block`, so their cache lines are never read from memory first.

A store to memory normally fetches its line (read-for-ownership): a loop
that reads one tensor and writes another moves three bytes for every two it
needs. Streaming stores skip the fetch; LLVM's vectorizer cannot emit them
for unaligned element stores, so this pass makes the loop write into a
buffer in L1 and copy it out in one streaming call per block.

Applies to a function output of at least `min-bytes` whose only uses are
stores (and views feeding stores), all inside one top-level parallel loop:
- row form: each store addresses slab `iv` of its buffer (the loop's own
  induction variable at some dimension, only unit dimensions before it) and
  the slab is 1 to 128 KiB: the slab is written into a per-iteration
  buffer and stored at the end of the iteration;
- flat form: a loop with no nested loops over [0, N) storing element `iv`
  of a 1-D buffer of N elements: it is tiled into blocks of 16 KiB, each
  computed into a buffer and stored at the end of its block.
The data each iteration (block) stores is exactly what it wrote before, so
results do not change; which backend instruction writes them does."""
from __future__ import annotations

from tcc.dialects.ir.attributes import IntegerAttr, UnitAttr
from tcc.dialects.ir.core import Block, Operation, Region
from tcc.dialects.ir.passes import Pass
from tcc.dialects.ir.types import INDEX, MemRefType

from .access import const, elem_bytes, has_library_call, is_static, nbytes, slab

ROW_MIN_BYTES = 1024
ROW_MAX_BYTES = 128 << 10   # larger slabs would not stay in the cache: leave them
TILE_BYTES = 16 << 10


def _stores(arg):
    """Every store into `arg` (through views), or None when anything else uses it."""
    out, todo = [], [arg]
    while todo:
        v = todo.pop()
        for u, i in v.uses:
            if u.name == "loop.view" and is_static(u.results[0].type):
                todo.extend(u.results)
            elif u.name == "loop.store" and i == 1:
                out.append(u)
            else:
                return None
    return out


def _top_level(op, block):
    while op is not None and op.parent is not block:
        op = op.parent_op
    return op


def _index_const(block, anchor, value, before=True):
    c = Operation("arith.constant", [], [INDEX], {"value": IntegerAttr(value, INDEX)})
    (block.insert_before if before else block.insert_after)(anchor, c)
    return c.results[0]


def _row_form(loop, stores, out):
    iv = loop.regions[0].blocks[0].args[0]
    slabs = [slab(s.operands[1], s.operands[2:], iv) for s in stores]
    if any(s is None for s in slabs) or len({n for _, n in slabs}) != 1:
        return False
    n = slabs[0][1]
    if not ROW_MIN_BYTES <= n * elem_bytes(out.type) <= ROW_MAX_BYTES:
        return False
    body = loop.regions[0].blocks[0]
    row = Operation("loop.alloc", [], [MemRefType((n,), out.type.element)])
    body.insert_before(body.first, row)
    views = {(n,): row.results[0]}
    for st, (d, _) in zip(stores, slabs):
        shape = tuple(st.operands[1].type.shape[d + 1:])
        buf = views.get(shape)
        if buf is None:
            v = Operation("loop.view", [row.results[0]], [MemRefType(shape, out.type.element)])
            body.insert_after(row, v)
            buf = views[shape] = v.results[0]
        st.set_operands([st.operands[0], buf] + list(st.operands[2 + d + 1:]))
    end = body.last  # loop.yield
    size = _index_const(body, end, n)
    off = Operation("arith.muli", [iv, size], [INDEX])
    body.insert_before(end, off)
    body.insert_before(end, Operation("loop.store_block", [row.results[0], out, off.results[0], size], [],
                                      {"nontemporal": UnitAttr()}))
    return True


def _flat_form(loop, stores, out, block):
    body = loop.regions[0].blocks[0]
    iv = body.args[0]
    lb, ub = (const(v) for v in loop.operands)
    if lb != 0 or ub is None or loop.get_attr("step", 1) != 1:
        return False
    if any(o is not loop and o.name == "loop.for" for o in loop.walk()):
        return False
    if any(s.operands[1].type.shape != (ub,) or s.operands[2] is not iv for s in stores):
        return False
    tile = max(1, TILE_BYTES // elem_bytes(out.type))
    if ub <= tile:
        return False
    # outer: for t in [0, ceil(N / tile)) parallel
    zero = _index_const(block, loop, 0)
    ntiles = _index_const(block, loop, -(-ub // tile))
    outer_body = Block([INDEX])
    outer = Operation("loop.for", [zero, ntiles], [], {"parallel": UnitAttr()}, [Region([outer_body])],
                      loc=loop.loc)
    block.insert_before(loop, outer)
    t = outer_body.args[0]
    c_tile = Operation("arith.constant", [], [INDEX], {"value": IntegerAttr(tile, INDEX)})
    c_n = Operation("arith.constant", [], [INDEX], {"value": IntegerAttr(ub, INDEX)})
    c_zero = Operation("arith.constant", [], [INDEX], {"value": IntegerAttr(0, INDEX)})
    base = Operation("arith.muli", [t, c_tile.results[0]], [INDEX])
    rest = Operation("arith.subi", [c_n.results[0], base.results[0]], [INDEX])
    cnt = Operation("arith.minsi", [c_tile.results[0], rest.results[0]], [INDEX])
    buf = Operation("loop.alloc", [], [MemRefType((tile,), out.type.element)])
    for o in (c_tile, c_n, c_zero, base, rest, cnt, buf):
        outer_body.append(o)
    # inner: the old body over j in [0, cnt), at element base + j
    inner_body = Block([INDEX])
    inner = Operation("loop.for", [c_zero.results[0], cnt.results[0]], [], {"vectorize": UnitAttr()},
                      [Region([inner_body])], loc=loop.loc)
    outer_body.append(inner)
    j = inner_body.args[0]
    i = Operation("arith.addi", [base.results[0], j], [INDEX])
    inner_body.append(i)
    iv.replace_all_uses_with(i.results[0])
    for o in list(body.ops):
        body.remove(o)
        inner_body.append(o)
    for st in stores:
        st.set_operands([st.operands[0], buf.results[0], j])
    outer_body.append(Operation("loop.store_block", [buf.results[0], out, base.results[0], cnt.results[0]],
                                [], {"nontemporal": UnitAttr()}))
    outer_body.append(Operation("loop.yield", [], []))
    loop.erase()
    return True


def stream_outputs(func, min_bytes):
    block = func.regions[0].blocks[0]
    nout = func.get_attr("tcc.num_outputs") or 0
    done = 0
    for out in block.args[len(block.args) - nout:]:
        if not is_static(out.type) or nbytes(out.type) < min_bytes:
            continue
        stores = _stores(out)
        if not stores:
            continue
        loops = {_top_level(s, block) for s in stores}
        if len(loops) != 1:
            continue
        loop = loops.pop()
        if loop is None or loop.name != "loop.for" or "parallel" not in loop.attributes:
            continue
        if has_library_call(loop):
            continue  # becomes one kernel call: its stores are not code we emit
        if _row_form(loop, stores, out) or _flat_form(loop, stores, out, block):
            done += 1
    return done


class StreamOutputsPass(Pass):
    name = "stream-outputs"
    summary = "write large write-only outputs through L1 blocks and non-temporal loop.store_block"
    options = {"min-bytes": (int, 4 << 20, "outputs smaller than this stay in the cache", 0)}

    def run(self, module, context):
        for func in module.functions():
            if func.get_attr("tcc.num_outputs") is not None:
                stream_outputs(func, self.min_bytes)
