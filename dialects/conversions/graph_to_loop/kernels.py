"""Library calls: a loop nest that the native backend may replace by a call
to a hand-written runtime kernel (runtime/native/gemm.c), like MLIR linalg's
`library_call`.

The nest stays the semantics (the loop interpreter runs it, so every
lowering test keeps checking the same IR), and its root `loop.for` carries

    tcc.library_call = {callee = "tcc_gemm_f32", params = array<i64: ...>,
                        buffers = array<i64: ...>}

`buffers[i]` is an index into the nest's memref free values (values used
inside the root but defined outside it, in first-use order; -1 passes a null
pointer; -2 the pre-packed constant `packed`, when there is one: conv
weights in the micro-kernel's panel layout); `params` is the kernel's
parameter block. loop-to-native emits
`callee(&params, buffer...)` instead of the nest; f64 parameters travel as
their IEEE bits (`f64_bits`)."""
from __future__ import annotations

import struct

from ...ir.core import free_values
from ...ir.attributes import DenseArrayAttr, DictAttr, StringAttr
from ...ir.types import MemRefType, i64

ATTR = "tcc.library_call"

# tcc_gemm_f32's parameter block (gemm.c's P_* enum)
MAXB = 4
GEMM_FIELDS = ["M", "N", "K", "rsa", "csa", "rsb", "csb", "ldc", "bias_rs", "bias_cs", "alpha", "beta", "relu",
               "nb"]
# tcc_conv_f32's (gemm.c's Q_* enum)
CONV_FIELDS = ["N", "C", "H", "W", "M", "KH", "KW", "OH", "OW", "SH", "SW", "PH", "PW", "DH", "DW", "G", "relu",
               "apacked"]
CONV_I8_FIELDS = ["N", "C", "H", "W", "M", "KH", "KW", "OH", "OW", "SH", "SW", "PH", "PW", "DH", "DW", "xsigned",
                  "wsigned", "xzp", "bias", "packed"]  # gemm_int.c's tcc_conv_i8
MR = 12  # gemm.c's micro-tile rows
NR = 32  # and columns
PACKED = -2  # a `buffers` entry: the call's pre-packed constant (`packed`)


def f64_bits(x):
    return struct.unpack("<q", struct.pack("<d", float(x)))[0]


def memref_free_values(root):
    """The memrefs used inside `root` but defined outside it, in first-use
    order (loop-to-native resolves `buffers` with the same walk)."""
    return [v for v in free_values(root) if isinstance(v.type, MemRefType)]


def pack_a_panels(w, groups):
    """Constant conv weights (M, ...) -> gemm.c's pre-packed A layout
    [G][ceil(Mg/MR)][K][MR] (rows past Mg zero), so no call repacks them."""
    import numpy as np
    M = w.shape[0]
    K = int(np.prod(w.shape[1:]))
    Mg = M // groups
    panels = -(-Mg // MR)
    a = np.zeros((groups, panels * MR, K), np.float32)
    a[:, :Mg] = np.asarray(w, np.float32).reshape(groups, Mg, K)
    return np.ascontiguousarray(a.reshape(groups, panels, MR, K).transpose(0, 1, 3, 2))


def pack_b_panels(b):
    """A constant (K, N) GEMM operand -> gemm.c's B panels [ceil(N/NR)][K][NR]
    (columns past N zero), for tcc_gemm_bpacked_f32."""
    import numpy as np
    b = np.asarray(b, np.float32)
    K, N = b.shape
    panels = -(-N // NR)
    out = np.zeros((K, panels * NR), np.float32)
    out[:, :N] = b
    return np.ascontiguousarray(out.reshape(K, panels, NR).transpose(1, 0, 2))


def pack_int16_pairs(b):
    """A constant (K, N) integer GEMM operand, its zero point subtracted
    (|v| <= 255) -> gemm_int.c's panels [ceil(N/32)][ceil(K/2)][32][2] of
    int16 (k and k + 1 of a column side by side; zero past K and N), for
    tcc_matmul_i8 with B packed."""
    import numpy as np
    b = np.asarray(b)
    K, N = b.shape
    kp, panels = -(-K // 2), -(-N // 32)
    out = np.zeros((2 * kp, panels * 32), np.int16)
    out[:K, :N] = b
    return np.ascontiguousarray(out.reshape(kp, 2, panels, 32).transpose(2, 0, 3, 1))


def pack_u8s8(b):
    """A constant (K, N) integer GEMM operand, its zero point subtracted and
    within int8 -> gemm_int.c's VNNI layout as one int8 array: panels
    [ceil(N/32)][ceil(K/4) up to a multiple of 16][32][4] (4 consecutive k
    of a column side by side; zero past K and N: AMX's tiles take 64 k),
    then each padded column's sum as int32."""
    import numpy as np
    return np.concatenate([_u8s8_tiles(b), _column_sums(b)])


def _u8s8_tiles(b):
    """pack_u8s8's panels of b (values within int8), flat int8."""
    import numpy as np
    b = np.asarray(b, np.int64)
    K, N = b.shape
    kq, panels = -(-K // 64) * 16, -(-N // 32)
    out = np.zeros((4 * kq, panels * 32), np.int8)
    out[:K, :N] = b
    return np.ascontiguousarray(out.reshape(kq, 4, panels, 32).transpose(2, 0, 3, 1)).reshape(-1)


def _column_sums(b):
    """Each column's sum of b as int32, zero for the columns padding the last
    panel, as int8 bytes."""
    import numpy as np
    b = np.asarray(b, np.int64)
    sums = np.zeros(-(-b.shape[1] // 32) * 32, "<i4")
    sums[:b.shape[1]] = b.sum(axis=0)
    return sums.view(np.int8)


def _pair_safe_split(b):
    """(the bytes vpmaddubsw multiplies exactly, the rest) of an int64 (K, N)
    b: pack_u8s8_pair_safe's split, the first padded to an even K."""
    import numpy as np
    K, N = b.shape
    s = np.zeros((K + K % 2, N), np.int64)
    s[:K] = np.clip(b, -128, 127)
    p0, p1 = s[0::2], s[1::2]
    over = np.abs(p0) + np.abs(p1) > 128
    first = over & (np.abs(p0) >= np.abs(p1))
    second = over & ~first
    s[0::2] = np.where(first, np.sign(p0) * (128 - np.abs(p1)), p0)
    s[1::2] = np.where(second, np.sign(p1) * (128 - np.abs(p0)), p1)
    return s, b - s[:K]


def pair_safe_corrections(b):
    """How many of b's values pack_u8s8_pair_safe would list as corrections
    (without packing it)."""
    import numpy as np
    return int(np.count_nonzero(_pair_safe_split(np.asarray(b, np.int64))[1]))


def pack_u8s8_pair_safe(b):
    """A constant (K, N) integer GEMM operand, its zero point subtracted ->
    (gemm_int.c's B packed 3 as one int8 array, corrections): pack_u8s8's
    layout and column sums (of the whole of b) for values that AVX2's
    vpmaddubsw multiplies exactly, then the rest as corrections. A byte pair
    (k even, k + 1) of a column with |b0| + |b1| > 128 could saturate the
    instruction's int16 sum with unsigned A (255 * 129 > 32767): its larger
    value is cut to 128 - |other| there, and the difference (as any value
    past int8) goes to a list of (k, column in the panel, value) the kernel
    adds exactly, ordered by panel, after one int32 per panel and one past
    the last saying where each panel's entries start. Symmetric int8
    weights of the bench models need 0.02-0.6 % of their values corrected."""
    import numpy as np
    b = np.asarray(b, np.int64)
    K, N = b.shape
    s, fix = _pair_safe_split(b)
    ks, ns = np.nonzero(fix)
    order = np.argsort(ns // 32, kind="stable")
    ks, ns = ks[order], ns[order]
    panels = -(-N // 32)
    at = np.searchsorted(ns // 32, np.arange(panels + 1)).astype("<i4")
    entries = np.stack([ks, ns % 32, fix[ks, ns]], axis=1).astype("<i4").reshape(-1)
    # the safe part's panels, then the whole of b's column sums (the kernel takes za * colsum off both parts)
    return np.concatenate([_u8s8_tiles(s[:K]), _column_sums(b), at.view(np.int8), entries.view(np.int8)]), len(ks)


def annotate(root, callee, params, buffers, packed=None):
    """Marks `root` (a loop.for) as `callee(params, *buffers)`; `buffers`
    are memref Values the nest uses (or None). Returns False, leaving the
    nest alone, when a buffer is not among the nest's free values, or when
    a pre-packed constant would be needed inside another loop (a Scan body:
    loop-to-native passes those to the entry function only)."""
    if packed is not None and _inside_loop(root):
        return False
    free = memref_free_values(root)
    idx = []
    for b in buffers:
        if b is None:
            idx.append(-1)
        elif isinstance(b, str) and b == "packed":
            idx.append(PACKED)
        elif b in free:
            idx.append(free.index(b))
        else:
            return False
    spec = {"callee": StringAttr(callee), "params": DenseArrayAttr(params, i64),
            "buffers": DenseArrayAttr(idx, i64)}
    if packed is not None:
        from ...ir.attributes import DenseElementsAttr
        from ...ir.types import TensorType, from_numpy_dtype
        spec["packed"] = DenseElementsAttr(packed, TensorType(packed.shape, from_numpy_dtype(packed.dtype)))
    root.attributes[ATTR] = DictAttr(spec)
    return True


def _inside_loop(op):
    p = op.parent_op
    while p is not None:
        if p.name == "loop.for":
            return True
        p = p.parent_op
    return False


def gemm_params(M, N, K, rsa, csa, rsb, csb, ldc, bias_rs=0, bias_cs=0, alpha=1.0, beta=1.0, relu=0,
                batch=(), sa=(), sb=(), sc=(), sbias=()):
    nb = len(batch)
    assert nb <= MAXB

    def pad(xs, fill):
        return list(xs) + [fill] * (MAXB - len(xs))
    return [M, N, K, rsa, csa, rsb, csb, ldc, bias_rs, bias_cs, f64_bits(alpha), f64_bits(beta), relu, nb] + \
        pad(batch, 1) + pad(sa, 0) + pad(sb, 0) + pad(sc, 0) + pad(sbias, 0)


def strides(shape):
    s, acc = [], 1
    for d in reversed(shape):
        s.append(acc)
        acc *= d
    return list(reversed(s))
