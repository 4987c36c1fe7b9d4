"""Hand-written loop IR for the native backend's tests."""
from __future__ import annotations

import numpy as np

from tcc.dialects.ir import parse_module, verify
from tcc.dialects.init_all import default_context
from tcc.dialects.ir.types import parse_element_name, to_numpy_dtype


def module_from_text(text):
    ctx = default_context()
    m = parse_module(text, "<test>", ctx)
    verify(m, ctx)
    return m


def func_text(args, body, nout=1):
    """args: memref type strings (inputs then outputs); body: op lines."""
    sig = ", ".join(f"%a{i}: {t}" for i, t in enumerate(args))
    return f'''"builtin.module"() ({{
  "func.func"() ({{
  ^bb0({sig}):
{body}
    "func.return"() : () -> ()
  }}) {{sym_name = "main_graph", function_type = ({", ".join(args)}) -> (), tcc.num_outputs = {nout} : i64}} : () -> ()
}}) : () -> ()
'''


def elementwise(op, in_types, out_type, n, attrs="", parallel=True):
    """out[i] = op(in0[i], in1[i], ...) over n elements."""
    mins = [f"memref<{n}x{t}>" for t in in_types]
    mout = f"memref<{n}x{out_type}>"
    loads = "\n".join(f'      %x{k} = "loop.load"(%a{k}, %i) : ({m}, index) -> {t}'
                      for k, (m, t) in enumerate(zip(mins, in_types)))
    operands = ", ".join(f"%x{k}" for k in range(len(in_types)))
    attr = f" {{{attrs}}}" if attrs else ""
    body = f'''    %c0 = "arith.constant"() {{value = 0 : index}} : () -> index
    %cn = "arith.constant"() {{value = {n} : index}} : () -> index
    "loop.for"(%c0, %cn) ({{
    ^bb1(%i: index):
{loads}
      %r = "{op}"({operands}){attr} : ({", ".join(in_types)}) -> {out_type}
      "loop.store"(%r, %a{len(in_types)}, %i) : ({out_type}, {mout}, index) -> ()
      "loop.yield"() : () -> ()
    }}) {{{"parallel" if parallel else ""}}} : (index, index) -> ()'''
    return module_from_text(func_text(mins + [mout], body))


def np_dtype(el: str):
    return to_numpy_dtype(parse_element_name(el))


SPECIAL_F = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5, 1e-3, 100.0, -100.0, 1e30, -1e30]


def float_data(rng, el, n, specials=True, scale=3.0):
    x = rng.standard_normal(n) * scale
    if specials:
        k = min(len(SPECIAL_F), n // 2)
        idx = rng.choice(n, k, replace=False)
        x[idx] = SPECIAL_F[:k]
    with np.errstate(over="ignore"):  # 1e30 in f16 is inf, on purpose
        return x.astype(np_dtype(el))


def int_data(rng, el, n, nonzero=False):
    dt = np.dtype(np_dtype(el))
    info = np.iinfo(dt)
    x = rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)
    edge = np.array([info.min, info.max, 0, 1, info.max // 2] + ([-1] if info.min < 0 else []), dtype=dt)
    x[:len(edge)] = edge
    if nonzero:
        x[x == 0] = 1
    return x
