"""graph-to-loop for gpu partitions.

A partition function (tensor-level onnx ops) is lowered in three steps:
1. library/template ops (MatMul, Gemm, Conv, row Softmax/LayerNorm/reductions,
   2-D transposes) become `gpu.lib` placeholders that the host lowering turns
   into `loop.call @gpu.<kind>` (cuBLAS calls and hand-written kernel
   templates);
2. the generic `fuse` pass groups elementwise chains, and the host
   graph-to-loop lowering (reused as is) turns everything else into loop nests
   over buffers;
3. every top-level loop nest becomes a `gpu.launch` whose region is the nest
   (the grid/block mapping is computed from the nest's parallel loops), every
   `loop.call @gpu.*` becomes a `gpu.library` op, and the buffer plumbing
   (loop.alloc/view/copy/global) stays as it is.

The function ends with a memref signature (inputs, then outputs), as the host's
`convert-onnx-to-loop` leaves @main_graph.
"""
from __future__ import annotations

import numpy as np

from tcc.dialects.ir import Module
from tcc.dialects.ir import attributes as A
from tcc.dialects.ir.core import Block, Operation, Region
from tcc.dialects.ir.types import NONE, f32, i64

LIB = "gpu.lib"

# Ops the lowering leaves as loop.call to the gpu runtime.
_COMPUTE_TOP = ("loop.load", "loop.store", "loop.if")
_PLUMBING = ("arith.constant", "loop.global", "loop.alloc", "loop.dealloc", "loop.view", "loop.copy",
             "func.return")


def _static_f32(v):
    t = v.type
    return getattr(t, "has_static_shape", False) and str(t.element) == "f32"


def _attr(op, module, ctx, name, default=None):
    a = op.attributes.get(name)
    if a is not None:
        return a.value
    d = ctx.lookup(op.name, module) if ctx is not None else None
    v = None if d is None else d.attr_default(name)
    return default if v is None else v


def _const_array(v):
    p = getattr(v, "op", None)
    if p is None or p.name != "onnx.Constant":
        return None
    from tcc.dialects.ir.attributes import elements_value
    return np.asarray(elements_value(p.attributes["value"]))


def lib_params(op, module, ctx):
    """The `gpu.lib` kind and parameters for `op`, or None when the generic
    loop-nest path should take it."""
    n = op.name
    ins = [v for v in op.operands]
    if not all(v.type is NONE or _static_f32(v) for v in ins) or not all(_static_f32(r) for r in op.results):
        return None
    if n == "onnx.MatMul":
        a, b = ins[0].type.shape, ins[1].type.shape
        if len(a) >= 2 and len(b) >= 2:
            return {"kind": "matmul"}
        return None
    if n == "onnx.Gemm":
        return {"kind": "gemm", "transA": int(_attr(op, module, ctx, "transA", 0)),
                "transB": int(_attr(op, module, ctx, "transB", 0)),
                "alpha": float(_attr(op, module, ctx, "alpha", 1.0)), "beta": float(_attr(op, module, ctx, "beta", 1.0))}
    if n == "onnx.Conv":
        w = ins[1].type.shape
        if len(w) != 4 or _attr(op, module, ctx, "auto_pad", "NOTSET") not in ("NOTSET", b"NOTSET"):
            return None
        group = int(_attr(op, module, ctx, "group", 1))
        if group != 1:
            return None  # grouped/depthwise: the direct loop nest (one thread per output)
        return {"kind": "conv", "strides": list(_attr(op, module, ctx, "strides", None) or [1, 1]),
                "pads": list(_attr(op, module, ctx, "pads", None) or [0, 0, 0, 0]),
                "dilations": list(_attr(op, module, ctx, "dilations", None) or [1, 1])}
    if n in ("onnx.Softmax", "onnx.LogSoftmax"):
        shape = ins[0].type.shape
        axis = int(_attr(op, module, ctx, "axis", -1)) % max(len(shape), 1)
        opset = _opset(module)
        if opset < 13:  # softmax over the flattened trailing dims from axis
            cols = int(np.prod(shape[axis:]))
        elif axis == len(shape) - 1:
            cols = shape[-1]
        else:
            return None
        return {"kind": "softmax", "log": int(n == "onnx.LogSoftmax"), "cols": cols}
    if n == "onnx.LayerNormalization":
        shape = ins[0].type.shape
        axis = int(_attr(op, module, ctx, "axis", -1)) % len(shape)
        cols = int(np.prod(shape[axis:]))
        if len([r for r in op.results if r.type is not NONE]) != 1 or len(op.results) > 1 and \
                any(r.uses for r in op.results[1:]):
            return None
        for k, v in enumerate(ins[1:3], 1):
            if v.type is not NONE and int(np.prod(v.type.shape)) != cols:
                return None
        return {"kind": "layernorm", "cols": cols, "eps": float(_attr(op, module, ctx, "epsilon", 1e-5)),
                "has_bias": int(len(ins) > 2 and ins[2].type is not NONE)}
    if n in ("onnx.ReduceSum", "onnx.ReduceMean", "onnx.ReduceMax", "onnx.ReduceMin"):
        shape = ins[0].type.shape
        if len(ins) > 1 and ins[1].type is not NONE:
            axes = _const_array(ins[1])
            if axes is None:
                return None
            axes = [int(a) for a in axes.reshape(-1)]
        else:
            axes = _attr(op, module, ctx, "axes", None)
            axes = None if axes is None else list(axes)
        if not axes or not shape:
            return None
        axes = sorted({a % len(shape) for a in axes})
        if axes != list(range(axes[0], len(shape))):
            return None  # only trailing (row) reductions use the warp template
        cols = int(np.prod([shape[a] for a in axes]))
        return {"kind": "reduce", "op": n[len("onnx.Reduce"):].lower(), "cols": cols}
    if n == "onnx.Transpose":
        shape = ins[0].type.shape
        perm = _attr(op, module, ctx, "perm", None)
        perm = list(range(len(shape)))[::-1] if perm is None else list(perm)
        r = len(shape)
        if r >= 2 and perm == list(range(r - 2)) + [r - 1, r - 2]:
            return {"kind": "transpose2d", "rows": shape[-2], "cols": shape[-1]}
        return None
    return None


def _opset(module):
    imp = module.op.attributes.get("onnx.opset_import")
    v = None if imp is None else imp.value.get("")
    return 18 if v is None else v.value


def _mark_library_ops(func, module, ctx):
    block = func.regions[0].blocks[0]
    for op in list(block.ops):
        p = lib_params(op, module, ctx)
        if p is None:
            continue
        attrs = {"kind": A.StringAttr(p.pop("kind")), "params": A.StringAttr(_json(p))}
        new = Operation(LIB, list(op.operands), [r.type for r in op.results], attrs, loc=op.loc)
        block.insert_before(op, new)
        for old, nr in zip(op.results, new.results):
            old.replace_all_uses_with(nr)
        op.erase()


def _json(p):
    import json
    return json.dumps(p, sort_keys=True)


def to_loop(func, module, ctx):
    """Lowers `func` (in `module`) to loop IR in place, reusing the host's
    fuse pass and convert-onnx-to-loop on a temporary module (`ctx` holds
    the gpu.lib lowering: tcc_register_lowerings)."""
    from tcc.dialects.conversions.graph_to_loop import ConvertOnnxToLoopPass
    from tcc.dialects.transforms.fuse import FusePass
    _mark_library_ops(func, module, ctx)
    name = func.get_attr("sym_name")
    tmp = Module(resources=module.resources)
    for k, v in module.attributes.items():
        tmp.attributes[k] = v
    parent = func.parent
    anchor = _next(func)
    parent.remove(func)
    tmp.body.append(func)
    func.attributes["sym_name"] = A.StringAttr("main_graph")
    try:
        fuse = FusePass()
        fuse.max_ops = 32
        fuse.run(tmp, ctx)
        ConvertOnnxToLoopPass().run(tmp, ctx)
    finally:
        func.attributes["sym_name"] = A.StringAttr(name)
        tmp.body.remove(func)
        if anchor is not None:
            parent.insert_before(anchor, func)
        else:
            parent.append(func)


def _next(op):
    ops = list(op.parent.ops)
    k = ops.index(op)
    return ops[k + 1] if k + 1 < len(ops) else None


# -- loop IR -> gpu dialect ------------------------------------------------------------
def to_gpu(func):
    """Top-level loop nests -> gpu.launch; loop.call @gpu.* -> gpu.library;
    straight-line scalar code at the top -> a one-thread gpu.launch."""
    block = func.regions[0].blocks[0]
    n = 0
    run = []

    def flush():
        nonlocal n
        if not run:
            return
        _wrap(block, list(run), f"{func.get_attr('sym_name')}_k{n}")
        n += 1
        run.clear()

    for op in list(block.ops):
        if op.name == "loop.for":
            flush()
            _wrap(block, [op], f"{func.get_attr('sym_name')}_k{n}")
            n += 1
        elif op.name == "loop.call":
            flush()
            callee = op.get_attr("callee")
            attrs = {k: v for k, v in op.attributes.items()}
            attrs["kind"] = A.StringAttr(callee.split(".", 1)[1])
            del attrs["callee"]
            new = Operation("gpu.library", list(op.operands), [], attrs, loc=op.loc)
            block.insert_before(op, new)
            op.erase()
        elif op.name in _PLUMBING:
            if op.name in ("loop.copy", "loop.dealloc", "func.return"):
                flush()
            continue
        elif op.name in ("loop.store", "loop.if"):
            run.append(op)  # side effects outside any loop: a one-thread kernel
        else:
            continue  # pure scalar code: recomputed inside each kernel that uses it
    flush()


def _wrap(block, ops, name):
    """Moves `ops` (consecutive top-level ops) into a gpu.launch region."""
    body = Block([])
    launch = Operation("gpu.launch", [], [], {"kernel": A.StringAttr(name)}, [Region([body])], loc=ops[0].loc)
    block.insert_before(ops[0], launch)
    for op in ops:
        block.remove(op)
        body.append(op)
    body.append(Operation("gpu.terminator", [], [], None, loc=ops[-1].loc))
    return launch
