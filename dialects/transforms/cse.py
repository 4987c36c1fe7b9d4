"""cse: merges identical side-effect-free ops (same name, operands,
attributes and result types). A value computed in an enclosing block is
reused inside nested regions, never the other way round."""
from __future__ import annotations

from ..ir.opdef import PURE
from ..ir.passes import Pass


def _key(op):
    try:
        attrs = tuple(sorted((k, a) for k, a in op.attributes.items()))
        hash(attrs)
    except TypeError:
        return None
    return (op.name, tuple(id(v) for v in op.operands), attrs, tuple(r.type for r in op.results))


def _cse_region(module, ctx, op, known):
    merged = 0
    for region in op.regions:
        for block in region.blocks:
            scope = dict(known)
            for child in block.ops:
                if child.regions:
                    merged += _cse_region(module, ctx, child, scope)
                    continue
                d = ctx.lookup(child.name, module)
                if d is None or not d.has_trait(PURE) or d.has_trait("Terminator"):
                    continue
                k = _key(child)
                if k is None:
                    continue
                prev = scope.get(k)
                if prev is None:
                    scope[k] = child
                    continue
                for old, new in zip(child.results, prev.results):
                    old.replace_all_uses_with(new)
                child.erase()
                merged += 1
    return merged


class CSEPass(Pass):
    name = "cse"
    summary = "merge identical side-effect-free ops"

    def run(self, module, ctx):
        _cse_region(module, ctx, module.op, {})
