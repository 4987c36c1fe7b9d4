"""maximumf/minimumf against a constant bound (a Clip's, a Relu's, a
quantization's range), which the native backend lowers to one compare and
select instead of LLVM's general expansion, and one-element loop.globals,
which it reads as constants: the same bits as the loop interpreter (the
spec), the sign of zero and NaN included, with the constant on either side
and reached through a load of a global or a view of one."""
import numpy as np
import pytest
from native_helpers import float_data, func_text, module_from_text, np_dtype

from tcc.dialects.conversions.loop_to_native.jit import NativeFunction
from tcc.dialects.ir.attributes import format_float
from tcc.dialects.ir.types import parse_element_name
from tcc.dialects.loop.interpreter import run_loop_module

N = 67  # no vector width divides it: the scalar remainder runs too
rng = np.random.default_rng()
BOUNDS = [0.0, -0.0, 2.5, -1.0, np.inf, -np.inf, np.nan]


def _text(el, c):
    return format_float(float(c), parse_element_name(el))


def _module(op, el, c, how, const_first):
    m, mo = f"memref<{N}x{el}>", f"memref<{N}x{el}>"
    if how == "constant":
        make = f'    %k = "arith.constant"() {{value = {_text(el, c)} : {el}}} : () -> {el}'
        read = ""
    else:
        make = f'    %g = "loop.global"() {{value = dense<{_text(el, c)}> : tensor<{el}>}} : () -> memref<{el}>'
        if how == "global":
            make += f'\n    %k = "loop.load"(%g) : (memref<{el}>) -> {el}'
        else:  # a 1x1 view of it, loaded at (0, 0), as the QDQ lowering reads its scales
            make += (f'\n    %z = "arith.constant"() {{value = 0 : index}} : () -> index'
                     f'\n    %v = "loop.view"(%g) : (memref<{el}>) -> memref<1x1x{el}>'
                     f'\n    %k = "loop.load"(%v, %z, %z) : (memref<1x1x{el}>, index, index) -> {el}')
    ops = "%k, %x" if const_first else "%x, %k"
    body = f'''{make}
    %c0 = "arith.constant"() {{value = 0 : index}} : () -> index
    %cn = "arith.constant"() {{value = {N} : index}} : () -> index
    "loop.for"(%c0, %cn) ({{
    ^bb1(%i: index):
      %x = "loop.load"(%a0, %i) : ({m}, index) -> {el}
      %r = "arith.{op}"({ops}) : ({el}, {el}) -> {el}
      "loop.store"(%r, %a1, %i) : ({el}, {mo}, index) -> ()
      "loop.yield"() : () -> ()
    }}) {{parallel}} : (index, index) -> ()'''
    return module_from_text(func_text([m, mo], body))


@pytest.mark.parametrize("how", ["constant", "global", "view"])
@pytest.mark.parametrize("el", ["f32", "f64"])
@pytest.mark.parametrize("op", ["maximumf", "minimumf"])
@pytest.mark.parametrize("c", BOUNDS, ids=[repr(c) for c in BOUNDS])
@pytest.mark.parametrize("const_first", [False, True])
def test_bound_bits(op, el, c, how, const_first):
    x = float_data(rng, el, N)
    x[:4] = np.array([0.0, -0.0, c, -c], dtype=np_dtype(el))  # ties with the bound and both zeros
    m = _module(op, el, c, how, const_first)
    want = run_loop_module(m, [x])[0]
    got = NativeFunction(m)(x)[0]
    uint = np.uint32 if el == "f32" else np.uint64
    nan_w, nan_g = np.isnan(want), np.isnan(got)
    np.testing.assert_array_equal(nan_g, nan_w, err_msg="NaN positions")
    np.testing.assert_array_equal(got[~nan_g].view(uint), want[~nan_w].view(uint), err_msg=f"{op} bits")
