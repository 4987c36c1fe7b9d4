"""Placement after TVM's BYOC flow (seeds/002): composite patterns merge,
each op is annotated with the accelerator that takes it (or why none does),
regions of one accelerator are merged greedily while the graph stays
acyclic, and each region is outlined into a function tagged with its
accelerator. Everything unclaimed stays in @main_graph on the host.

The accelerators come from `context.accelerators` (priority = --maccel order).
Attributes used: `tcc.placement` (accelerator name), `tcc.composite`,
`tcc.region`, `tcc.host_reason` (why an op stayed on the host)."""
from __future__ import annotations

from ..ir import attributes as A
from ..ir.core import Block, Operation, Region, free_values
from ..ir.errors import PassError
from ..ir.passes import Pass
from ..ir.types import FunctionType, TensorType
from .fuse import ELEMENTWISE as FUSE_ELEMENTWISE
from .ordering import topological_sort

PLACEMENT, COMPOSITE, REGION, REASON = "tcc.placement", "tcc.composite", "tcc.region", "tcc.host_reason"
FREE_OPS = {"onnx.Constant", "onnx.NoValue"}  # cloned into whichever partition uses them
# Moving a tensor between devices is worth this many elementwise op-executions of it.
COPY_COST = 2.0


def _accelerators(ctx):
    return list(getattr(ctx, "accelerators", []) or [])


def _main_block(module):
    f = module.lookup_function("main_graph")
    if f is None:
        raise PassError("placement needs func.func @main_graph")
    return f.regions[0].blocks[0]


def _placeable(block):
    return [op for op in block.ops if op.name not in FREE_OPS and op is not block.last]


def _producer(v):
    return getattr(v, "op", None)


def _elements(t):
    return t.num_elements or 1 if isinstance(t, TensorType) and t.has_static_shape else 1


class MergeCompositesPass(Pass):
    name = "merge-composites"
    summary = "match accelerators' composite patterns (e.g. conv+bias+relu) and place each match whole"

    def run(self, module, ctx):
        block = _main_block(module)
        n = 0
        for acc in _accelerators(ctx):
            pats = acc.call("tcc_composite_patterns") if acc.has("tcc_composite_patterns") else None
            for pat in sorted(pats or [], key=lambda p: -len(p.ops)):
                for op in list(block.ops):
                    chain = self._match(op, pat)
                    if chain is None or any(PLACEMENT in o.attributes for o in chain):
                        continue
                    if pat.check is not None and not pat.check(chain):
                        continue
                    tag = f"{pat.name}#{n}"
                    n += 1
                    for o in chain:
                        o.attributes[PLACEMENT] = A.StringAttr(acc.name)
                        o.attributes[COMPOSITE] = A.StringAttr(tag)

    @staticmethod
    def _match(op, pat):
        """Chain starting at `op` whose i-th op feeds the (i+1)-th's first operand
        and has no other user (so the chain can run as one kernel)."""
        if op.name != pat.ops[0] or op.parent is None:
            return None
        chain = [op]
        for want in pat.ops[1:]:
            last = chain[-1]
            if len(last.results) < 1 or len(last.results[0].uses) != 1:
                return None
            user, idx = last.results[0].uses[0]
            if user.name != want:
                return None
            chain.append(user)
        return chain


class AnnotateTargetsPass(Pass):
    name = "annotate-targets"
    summary = "ask each selected accelerator (in priority order) which ops it takes, and record why not"

    def run(self, module, ctx):
        accs = _accelerators(ctx)
        for op in _placeable(_main_block(module)):
            if PLACEMENT in op.attributes:
                continue
            reasons = []
            for acc in accs:
                s = acc.call("tcc_supports_op", op=op, module=module)
                if s:
                    op.attributes[PLACEMENT] = A.StringAttr(acc.name)
                    break
                reasons.append(f"{acc.name}: {getattr(s, 'reason', '') or 'op unsupported'}")
            else:
                if accs:
                    op.attributes[REASON] = A.StringAttr("; ".join(reasons))


class MergeRegionsPass(Pass):
    name = "merge-regions"
    summary = "merge neighbouring ops of one accelerator into regions, keeping the graph acyclic"

    def run(self, module, ctx):
        block = _main_block(module)
        # deps[op]: the regions with a path of ops into op; rdeps[r]: the
        # union of its members' deps. Each region becomes one call, so r
        # reaches op when r is in the closure of deps[op] over rdeps: a path
        # may enter a region at one op and leave it at another.
        region_of, deps, members, rdeps = {}, {}, {}, {}
        next_id = 0

        def upstream(regions):
            seen, todo = set(), list(regions)
            while todo:
                r = todo.pop()
                if r not in seen:
                    seen.add(r)
                    todo.extend(rdeps[r])
            return seen

        for op in _placeable(block):
            producers = [p for p in (_producer(v) for v in op.operands) if p is not None and p in deps]
            my_deps = set()
            for p in producers:
                my_deps |= deps[p]
                if p in region_of:
                    my_deps.add(region_of[p])
            acc = op.get_attr(PLACEMENT)
            chosen = None
            if acc is not None:
                for p in producers:
                    r = region_of.get(p)
                    if r is None or members[r][0] != acc:
                        continue
                    # Joining r is safe unless another input of op depends on r
                    # through something outside it: that path would form a cycle.
                    if all(region_of.get(q) == r or
                           r not in upstream(deps[q] | ({region_of[q]} if q in region_of else set()))
                           for q in producers):
                        chosen = r
                        break
                if chosen is None:
                    chosen, next_id = next_id, next_id + 1
                    members[chosen] = (acc, [])
                    rdeps[chosen] = set()
                region_of[op] = chosen
                members[chosen][1].append(op)
                my_deps.discard(chosen)
                rdeps[chosen] |= my_deps
            deps[op] = my_deps
        self._merge_siblings(members, region_of)
        self._drop_unprofitable(module, ctx, members, region_of)
        for rid, (acc, ops) in members.items():
            for op in ops:
                if op.get_attr(PLACEMENT) is not None:
                    op.attributes[REGION] = A.IntegerAttr(rid)

    @staticmethod
    def _merge_siblings(members, region_of):
        """Ops join a producer's region, so regions with no edge between
        them (three projections of one input, say) stay apart, each its own
        call. Two regions of one accelerator merge when no path leaves one
        and reaches the other through an op outside both: such a path would
        become a cycle. A path that enters a third region goes on from all
        of that region's ops (it becomes one call)."""
        def reaches(src, dst):
            a, b = set(members[src][1]), set(members[dst][1])
            todo = [u for op in a for r in op.results for u, _ in r.uses if u not in a and u not in b]
            seen, entered = set(), {src, dst}
            while todo:
                op = todo.pop()
                if op in seen:
                    continue
                seen.add(op)
                rid = region_of.get(op)
                if rid is not None and rid not in entered:
                    entered.add(rid)
                    todo.extend(members[rid][1])
                for r in op.results:
                    for u, _ in r.uses:
                        if u in b:
                            return True
                        if u not in a:
                            todo.append(u)
            return False

        merged = True
        while merged:
            merged = False
            live = [r for r in members if members[r][1]]
            for i, ra in enumerate(live):
                for rb in live[i + 1:]:
                    if not members[ra][1] or not members[rb][1] or members[ra][0] != members[rb][0]:
                        continue
                    if reaches(ra, rb) or reaches(rb, ra):
                        continue
                    for op in members[rb][1]:
                        region_of[op] = ra
                    members[ra][1].extend(members[rb][1])
                    members[rb][1].clear()
                    merged = True

    @staticmethod
    def _drop_unprofitable(module, ctx, members, region_of):
        """Regions not worth leaving the host go back to it (tcc_cost_hint).
        A device of its own: the saving (sum of (1 - hint) x output elements)
        must beat COPY_COST per element copied in or out. An accelerator on
        the host's own memory (Accelerator.on_host_memory) copies nothing;
        what a region costs there is the fusion it takes from the host steps
        beside it, so its saving must beat one pass per element it exchanges
        with them, and a region with an op of no hint (None: the cpu's
        kernels) is kept but gives back its edges (_peel). Judged again
        until nothing moves: a region gone back can leave its neighbours
        beside host steps. Each op's hint is asked once."""
        accs = {a.name: a for a in _accelerators(ctx) if a.has("tcc_cost_hint")}
        hints = {}

        def costs(acc, ops):
            for op in ops:
                if op not in hints:
                    hints[op] = acc.call("tcc_cost_hint", op=op, module=module)
            return [hints[op] for op in ops]
        dropped = True
        while dropped:
            dropped = False
            for acc_name, ops in members.values():
                acc = accs.get(acc_name)
                if acc is not None and ops:
                    dropped |= MergeRegionsPass._judge(acc, acc_name, ops, costs(acc, ops))

    @staticmethod
    def _judge(acc, acc_name, ops, costs):
        """Whether `ops` (one region, `costs` its ops' hints) went back to the host."""
        inside = set(ops)
        if all(c is None for c in costs):
            return False  # no opinion: keep the region
        host_memory = acc.on_host_memory
        if host_memory and any(c is None for c in costs):
            return _peel(ops, costs, acc_name)
        saving = 0.0
        for op, cost in zip(ops, costs):
            saving += (1.0 - (1.0 if cost is None else cost)) * sum(_elements(r.type) for r in op.results)
        if host_memory:
            moved, limit, what = _host_exchange(ops, inside), 1.0, "fusion with host steps"
        else:
            moved, limit, what = _copied(ops, inside), COPY_COST, "a copy"
        if saving < limit * moved:
            for op in ops:
                del op.attributes[PLACEMENT]
                op.attributes.pop(COMPOSITE, None)
                op.attributes[REASON] = A.StringAttr(
                    f"{acc_name}: not worth {what} (saves {saving:.0f}, moves {moved} elements)")
            ops.clear()
            return True
        return False


def _peel(ops, costs, acc_name):
    """A kept region on host memory gives back the elementwise ops on its
    edges that the host's `fuse` would join to a host step beside them: an
    op with a hint (no faster than the host) that reads only host steps'
    results, one of them an elementwise op of its shape (or that makes a
    single element), or whose results only host steps read, one of them
    elementwise of its shape; repeated inward. Composite members stay."""
    hinted = {op for op, c in zip(ops, costs)
              if c is not None and op.get_attr(COMPOSITE) is None and op.name in FUSE_ELEMENTWISE}
    peeled = False
    while True:
        edge = None
        for op in ops:
            if op not in hinted:
                continue
            shape = [r.type for r in op.results]
            ins = [p for p in (_producer(v) for v in op.operands) if p is None or p.name not in FREE_OPS]
            uses = [u for r in op.results for u, _ in r.uses]
            if (ins and all(_on_host(p) for p in ins)
                    and (sum(_elements(t) for t in shape) == 1 or any(_fuses(p, shape) for p in ins))) \
                    or (uses and all(_on_host(u) for u in uses) and any(_fuses(u, shape) for u in uses)):
                edge = op
                break
        if edge is None:
            return peeled
        ops.remove(edge)
        del edge.attributes[PLACEMENT]
        edge.attributes[REASON] = A.StringAttr(f"{acc_name}: fuses with the host steps beside it")
        peeled = True


def _fuses(op, types):
    """Would the host's `fuse` join `op` and an elementwise op making `types`?"""
    return op.name in FUSE_ELEMENTWISE and [r.type for r in op.results] == types


def _on_host(op):
    """An op that stays on the host (not a graph input or output, not a
    constant, not placed)."""
    return op is not None and op.name not in FREE_OPS and op.name != "func.return" \
        and op.get_attr(PLACEMENT) is None


def _copied(ops, inside):
    """Elements copied to run `ops` on a device of their own: every operand
    from outside (constants are uploaded once) and every result used outside."""
    copies = 0
    for op in ops:
        for v in op.operands:
            p = _producer(v)
            if p is None or (p not in inside and p.name not in FREE_OPS):
                copies += _elements(v.type)
        for r in op.results:
            if any(u not in inside for u, _ in r.uses):
                copies += _elements(r.type)
    return copies


def _host_exchange(ops, inside):
    """Elements `ops` take from or give to host steps that the host's `fuse`
    would join them with (elementwise ops of one shape on both sides): each
    is a pass over memory, and a call, that the host path does not make."""
    moved = 0
    for op in ops:
        if op.name not in FUSE_ELEMENTWISE:
            continue
        types = [r.type for r in op.results]
        for v in op.operands:
            p = _producer(v)
            if p not in inside and _on_host(p) and _fuses(p, types):
                moved += _elements(v.type)
        for r in op.results:
            if any(u not in inside and _on_host(u) and _fuses(u, types) for u, _ in r.uses):
                moved += _elements(r.type)
    return moved


class PartitionPass(Pass):
    name = "partition"
    summary = "outline each region into func.func @<accel>_<n> tagged with its accelerator, called from @main_graph"

    def run(self, module, ctx):
        block = _main_block(module)
        regions = {}
        for op in block.ops:
            rid = op.get_attr(REGION)
            if rid is not None and op.get_attr(PLACEMENT) is not None:
                regions.setdefault(rid, []).append(op)
        for rid in sorted(regions):
            self._outline(module, block, regions[rid], rid)

    def _outline(self, module, block, ops, rid):
        acc = ops[0].get_attr(PLACEMENT)
        inside = set(ops)
        inputs, outputs = [], []
        for op in ops:
            for v in _used(op):
                p = _producer(v)
                if (p is None or (p not in inside and p.name not in FREE_OPS)) and v not in inputs:
                    inputs.append(v)
            for r in op.results:
                if any(u not in inside for u, _ in r.uses):
                    outputs.append(r)
        name = f"{acc}_{rid}"
        fblock = Block([v.type for v in inputs])
        mapping = dict(zip(inputs, fblock.args))
        for op in ops:
            for v in _used(op):
                p = _producer(v)
                if v not in mapping and p is not None and p.name in FREE_OPS:
                    clone = Operation(p.name, [], [r.type for r in p.results], dict(p.attributes), loc=p.loc)
                    fblock.append(clone)
                    mapping[v] = clone.results[0]
            new = Operation(op.name, [mapping[v] for v in op.operands], [r.type for r in op.results],
                            dict(op.attributes), [], op.loc)
            for region in op.regions:  # subgraph regions move with their op
                new.add_region(region)
            op.regions = []
            _remap_captures(new, mapping)
            fblock.append(new)
            for old, nr in zip(op.results, new.results):
                mapping[old] = nr
        fblock.append(Operation("func.return", [mapping[r] for r in outputs]))
        func = Operation("func.func", attributes={
            "sym_name": A.StringAttr(name),
            "function_type": A.TypeAttr(FunctionType([v.type for v in inputs], [r.type for r in outputs])),
            "tcc.accelerator": A.StringAttr(acc)}, regions=[Region([fblock])])
        module.body.append(func)
        call = Operation("func.call", inputs, [r.type for r in outputs],
                         {"callee": A.SymbolRefAttr(name), "tcc.accelerator": A.StringAttr(acc)},
                         loc=ops[-1].loc)
        block.insert_after(ops[-1], call)
        for old, nr in zip(outputs, call.results):
            old.replace_all_uses_with(nr)
        for op in reversed(ops):  # users before producers, so no use is left dangling
            op.erase()
        # A host op between the region's ops may use an output of the call:
        # restore def-before-use (regions were merged acyclic, so an order exists).
        topological_sort(block)
def _used(op):
    """The values `op` reads: its operands and, for an op with regions
    (Scan, Loop, If), the outer values its bodies capture, which must move
    into the outlined function as well (a Scan body reading a constant of
    @main_graph did not dominate its use after outlining: LinearAttention
    under --maccel=cpu)."""
    return free_values(op) if op.regions else list(op.operands)


def _remap_captures(new, mapping):
    """Inside `new`'s (moved) regions, outer values -> their outlined copies."""
    for region in new.regions:
        for blk in region.blocks:
            for o in blk.ops:
                for inner in o.walk():
                    for i, v in enumerate(inner.operands):
                        if v in mapping:
                            inner.set_operand(i, mapping[v])


PIPELINE = "merge-composites,annotate-targets,merge-regions,partition"
