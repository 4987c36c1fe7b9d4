"""Every arith/math op and cast, compiled natively, against the loop
interpreter (the executable spec) on fresh random data with NaN/Inf/±0 and
integer edge values."""
import numpy as np
import pytest
from native_helpers import elementwise, float_data, int_data, np_dtype

from tcc.dialects.conversions.loop_to_native.jit import NativeFunction
from tcc.dialects.loop.interpreter import run_loop_module

# 67: no vector width (4..64 lanes, unrolled or not) divides it, so every
# vectorized loop also runs its scalar remainder (64 never did)
N = 67
rng = np.random.default_rng()

# Relative tolerance per element type for results that are not exactly rounded
# (math functions: ours vs numpy's); arithmetic must match exactly.
MATH_RTOL = {"f32": 1e-5, "f64": 1e-12, "f16": 2e-3, "bf16": 1.6e-2}


def check(op, in_types, out_type, inputs, rtol=0.0, atol=0.0, attrs=""):
    m = elementwise(op, in_types, out_type, N, attrs)
    want = run_loop_module(m, inputs)[0]
    got = NativeFunction(m)(*inputs)[0]
    if np.dtype(want.dtype).kind in "fV" or want.dtype.name == "bfloat16":
        w, g = want.astype(np.float64), got.astype(np.float64)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=f"{op} NaN positions")
        ok = ~np.isnan(w)
        np.testing.assert_allclose(g[ok], w[ok], rtol=rtol, atol=atol, err_msg=f"{op} {in_types}")
    else:
        np.testing.assert_array_equal(got, want, err_msg=f"{op} {in_types}")


FLOAT_TYPES = ["f32", "f64", "f16", "bf16"]


@pytest.mark.parametrize("el", FLOAT_TYPES)
@pytest.mark.parametrize("op", ["addf", "subf", "mulf", "divf", "maximumf", "minimumf", "copysign", "remf",
                                "powf"])
def test_float_binary(op, el):
    a, b = float_data(rng, el, N), float_data(rng, el, N)
    exact = op not in ("powf", "remf")
    check(f"arith.{op}", [el, el], el, [a, b], rtol=0 if exact else MATH_RTOL[el])


@pytest.mark.parametrize("el", FLOAT_TYPES)
def test_negf(el):
    check("arith.negf", [el], el, [float_data(rng, el, N)])


UNARY = ["exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "tanh", "erf", "sin", "cos",
         "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "floor", "ceil", "round",
         "roundeven", "trunc", "absf"]


@pytest.mark.parametrize("el", FLOAT_TYPES)
@pytest.mark.parametrize("op", UNARY)
def test_math_unary(op, el):
    x = float_data(rng, el, N)
    if op in ("asin", "acos", "atanh"):
        x[N // 2:] = (rng.uniform(-1, 1, N - N // 2)).astype(x.dtype)
    # Near a function's zero only an absolute error is meaningful.
    atol = {"f32": 1e-6, "f64": 1e-14, "f16": 1e-3, "bf16": 1e-2}[el]
    check(f"math.{op}", [el], el, [x], rtol=MATH_RTOL[el], atol=atol)


def test_exp_tanh_f32_full_range():
    """The inline polynomial exp/tanh over their whole range, incl. denormal results and overflow."""
    x = np.concatenate([np.linspace(-110, 95, N - 8), [np.nan, np.inf, -np.inf, 0, -0.0, 88.7, -87.5, -103.5]])
    x = x.astype(np.float32)
    check("math.exp", ["f32"], "f32", [x], rtol=1e-6, atol=1e-44)
    check("math.tanh", ["f32"], "f32", [np.linspace(-12, 12, N).astype(np.float32)], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("el", ["f32", "f64"])
def test_fma_atan2(el):
    a, b, c = (float_data(rng, el, N) for _ in range(3))
    # f64: ours is fused (MLIR's math.fma); the interpreter rounds the product first.
    exact = el == "f32"
    check("math.fma", [el, el, el], el, [a, b, c], rtol=0 if exact else 1e-15, atol=0 if exact else 1e-12)
    check("math.atan2", [el, el], el, [a, b], rtol=MATH_RTOL[el], atol=1e-7)


@pytest.mark.parametrize("op", ["isnan", "isinf"])
@pytest.mark.parametrize("el", ["f32", "f16", "f64"])
def test_classify(op, el):
    check(f"math.{op}", [el], "i1", [float_data(rng, el, N)])


@pytest.mark.parametrize("pred", ["false", "oeq", "ogt", "oge", "olt", "ole", "one", "ord", "ueq", "ugt", "uge",
                                  "ult", "ule", "une", "uno", "true"])
def test_cmpf(pred):
    a = float_data(rng, "f32", N)
    b = np.where(rng.random(N) < 0.3, a, float_data(rng, "f32", N)).astype(np.float32)
    if pred == "true":  # the interpreter answers false for NaN operands; MLIR says always true
        a, b = np.nan_to_num(a), np.nan_to_num(b)
    check("arith.cmpf", ["f32", "f32"], "i1", [a, b], attrs=f'predicate = "{pred}"')


@pytest.mark.parametrize("pred", ["eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge"])
def test_cmpi(pred):
    a = int_data(rng, "i32", N)
    b = np.where(rng.random(N) < 0.3, a, int_data(rng, "i32", N)).astype(np.int32)
    check("arith.cmpi", ["i32", "i32"], "i1", [a, b], attrs=f'predicate = "{pred}"')


INT_OPS = ["addi", "subi", "muli", "divsi", "divui", "remsi", "remui", "maxsi", "minsi", "maxui", "minui",
           "andi", "ori", "xori", "shli", "shrsi", "shrui"]


@pytest.mark.parametrize("el", ["i8", "i16", "i32", "i64", "ui8"])
@pytest.mark.parametrize("op", INT_OPS)
def test_int_binary(op, el):
    a = int_data(rng, el, N)
    b = int_data(rng, el, N, nonzero=op.startswith(("div", "rem")))
    if op.startswith("sh"):
        bits = np.dtype(np_dtype(el)).itemsize * 8
        b = rng.integers(0, bits + 3, N).astype(np_dtype(el))  # includes shifts >= the width
    check(f"arith.{op}", [el, el], el, [a, b])


def test_int_division_by_zero_does_not_trap():
    a = int_data(rng, "i32", N)
    b = np.zeros(N, np.int32)
    m = elementwise("arith.divsi", ["i32", "i32"], "i32", N)
    np.testing.assert_array_equal(NativeFunction(m)(a, b)[0], a)  # documented: divides by 1
    m = elementwise("arith.remui", ["i32", "i32"], "i32", N)
    np.testing.assert_array_equal(NativeFunction(m)(a, b)[0], 0)


def test_absi_select():
    check("math.absi", ["i32"], "i32", [int_data(rng, "i32", N)])
    c = rng.integers(0, 2, N).astype(bool)
    check("arith.select", ["i1", "f32", "f32"], "f32", [c, float_data(rng, "f32", N), float_data(rng, "f32", N)])


CASTS = [
    ("sitofp", "i32", "f32"), ("sitofp", "i64", "f64"), ("sitofp", "i16", "f16"), ("sitofp", "i32", "bf16"),
    ("uitofp", "i32", "f32"), ("uitofp", "ui8", "f32"), ("uitofp", "i64", "f64"),
    ("fptosi", "f32", "i32"), ("fptosi", "f32", "i8"), ("fptosi", "f64", "i64"), ("fptosi", "f16", "i16"),
    ("fptosi", "bf16", "i32"), ("fptoui", "f32", "ui8"), ("fptoui", "f32", "i32"), ("fptoui", "f64", "ui64"),
    ("extf", "f16", "f32"), ("extf", "bf16", "f32"), ("extf", "f32", "f64"), ("extf", "bf16", "f64"),
    ("truncf", "f32", "f16"), ("truncf", "f32", "bf16"), ("truncf", "f64", "f32"), ("truncf", "f64", "f16"),
    ("extsi", "i8", "i32"), ("extsi", "i1", "i8"), ("extui", "i8", "i32"), ("extui", "i1", "i64"),
    ("trunci", "i64", "i16"), ("trunci", "i32", "i1"),
    ("bitcast", "f32", "i32"), ("bitcast", "bf16", "i16"), ("bitcast", "f16", "i16"), ("bitcast", "f64", "i64"),
]


@pytest.mark.parametrize("kind,src,dst", CASTS)
def test_cast(kind, src, dst):
    if src[0] == "f" or src == "bf16":
        x = float_data(rng, src, N, scale=100.0)
        if kind in ("fptosi", "fptoui"):
            x[:4] = np.array([np.nan, np.inf, -np.inf, -0.0]).astype(x.dtype)
    elif src == "i1":
        x = rng.integers(0, 2, N).astype(bool)
    elif src == "index":
        x = int_data(rng, "i64", N)
    else:
        x = int_data(rng, src, N)
    check(f"arith.{kind}", [src], dst, [x])


@pytest.mark.parametrize("src,dst", [("i32", "f32"), ("i16", "bf16"), ("i16", "f16"), ("i64", "f64")])
def test_bitcast_int_to_float(src, dst):
    """Against numpy's view (the interpreter cannot bitcast negative ints); bits compared, NaN payloads too."""
    x = int_data(rng, src, N)
    got = NativeFunction(elementwise("arith.bitcast", [src], dst, N))(x)[0]
    np.testing.assert_array_equal(got.view(x.dtype), x)


def test_index_casts():
    """index has no memref dtype here: cast in and out within one loop."""
    from native_helpers import func_text, module_from_text
    body = f'''    %c0 = "arith.constant"() {{value = 0 : index}} : () -> index
    %cn = "arith.constant"() {{value = {N} : index}} : () -> index
    "loop.for"(%c0, %cn) ({{
    ^bb1(%i: index):
      %x = "loop.load"(%a0, %i) : (memref<{N}xi32>, index) -> i32
      %s = "arith.index_cast"(%x) : (i32) -> index
      %u = "arith.index_castui"(%x) : (i32) -> index
      %s64 = "arith.index_cast"(%s) : (index) -> i64
      %u64 = "arith.index_cast"(%u) : (index) -> i64
      %t16 = "arith.index_cast"(%s) : (index) -> i16
      "loop.store"(%s64, %a1, %i) : (i64, memref<{N}xi64>, index) -> ()
      "loop.store"(%u64, %a2, %i) : (i64, memref<{N}xi64>, index) -> ()
      "loop.store"(%t16, %a3, %i) : (i16, memref<{N}xi16>, index) -> ()
      "loop.yield"() : () -> ()
    }}) : (index, index) -> ()'''
    m = module_from_text(func_text([f"memref<{N}xi32>", f"memref<{N}xi64>", f"memref<{N}xi64>",
                                    f"memref<{N}xi16>"], body, nout=3))
    x = int_data(rng, "i32", N)
    want = run_loop_module(m, [x])
    got = NativeFunction(m)(x)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    np.testing.assert_array_equal(got[1], x.astype(np.int64) & 0xFFFFFFFF)
