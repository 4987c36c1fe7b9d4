"""What every kernel family of the shape-generic executor shares: the
registry, a node's decoded attributes, axis and broadcasting helpers, and
the cpu accelerator's C kernels (accelerators/cpu/kernels/tcc_cpu.h) where
they are built.

A kernel is registered as a factory `make(node) -> fn`: `node` is a `Node`
(its name, op, attributes decoded once, opset version, result count); `fn`
takes the operand arrays in schema order (None for an absent optional one)
and returns the result (a tuple where the op has several). Everything a
kernel can derive from its attributes it derives in `make`, once per
session; a factory that cannot serve these attributes returns None and the
node falls back to onnx.reference's implementation of that one op."""
from __future__ import annotations

import ctypes

import numpy as np
from onnx import helper

from tcc.dialects.ir.errors import TccError
from tcc.runtime.signature import data_ptr

KERNELS = {}  # IR op name ("onnx.Add") -> factory


class GenericShapeError(TccError):
    """An operand shape the node cannot take (a Reshape whose element count
    does not match, a MatMul whose inner dims differ): the input does not fit
    the model."""


def kernel(*names):
    def register(fn):
        for n in names:
            KERNELS["onnx." + n] = fn
        return fn
    return register


class Node:
    """One node's name, op, attributes (decoded from its NodeProto once),
    the opset version of its domain, how many results it has, and which of
    its operands are constants (with their values)."""

    def __init__(self, proto, opset, n_results, op_name, consts=(), present=(), used=None, ranks=()):
        # consts: per operand its value where it is a constant, else None;
        # present: per operand whether it is given (an optional one may not be)
        self.consts, self.present = list(consts), list(present)
        self.ranks = list(ranks)  # per operand its rank from the IR type (None: unranked or absent)
        self.used = list(used) if used is not None else [True] * n_results  # per result: whether it is read
        self.name = proto.name or (proto.output[0] if proto.output else op_name)
        self.op = op_name
        self.opset = opset
        self.n_results = n_results
        self.attrs = {}
        for a in proto.attribute:
            v = helper.get_attribute_value(a)
            self.attrs[a.name] = v.decode("utf-8") if isinstance(v, bytes) else v

    def get(self, name, default=None):
        return self.attrs.get(name, default)

    def error(self, what):
        return GenericShapeError(f"node '{self.name}' ({self.op}) {what}")


def axis_of(axis, rank):
    return axis + rank if axis < 0 else axis


def int_list(x):
    return [int(v) for v in np.asarray(x).reshape(-1)]


# ---- the cpu accelerator's C kernels -------------------------------------------------

class PoolParams(ctypes.Structure):
    _fields_ = [(n, ctypes.c_long) for n in ("n", "c", "h", "w", "oh", "ow", "kh", "kw", "sh", "sw", "dh", "dw",
                                             "pt", "pl", "pb", "pr")] + [("count_include_pad", ctypes.c_int)]


class ConvParams(ctypes.Structure):
    _fields_ = [(n, ctypes.c_long) for n in ("n", "c", "h", "w", "m", "kh", "kw", "oh", "ow", "sh", "sw", "dh",
                                             "dw", "pt", "pl", "pb", "pr", "group")]


class Epilogue(ctypes.Structure):
    _fields_ = [("bias", ctypes.c_void_p), ("bias_mode", ctypes.c_int), ("bias_scale", ctypes.c_float),
                ("residual", ctypes.c_void_p), ("act", ctypes.c_int), ("a0", ctypes.c_float), ("a1", ctypes.c_float)]


class RnnParams(ctypes.Structure):  # tcc_rnn_params
    _fields_ = [(n, ctypes.c_int) for n in ("kind", "nd", "reverse", "layout", "linear_before_reset", "input_forget",
                                            "has_clip")] + [("clip", ctypes.c_float)] + \
        [(n, ctypes.c_long) for n in ("T", "NB", "In", "H")]


_lib = []


def c_kernels():
    """The cpu accelerator's kernel library, or None where it is not built
    (a numpy fallback serves then). Called through ctypes.PyDLL, which keeps
    the GIL across the call: the kernels run on their own thread pool, and a
    call that released the GIL gave it to the background compile, which
    kept it for up to sys.getswitchinterval() (5 ms) per kernel call."""
    if not _lib:
        lib = None
        try:
            from tcc.accelerators.cpu import build
            cdll = build.load_kernels()
            lib = ctypes.PyDLL(cdll._name, handle=cdll._handle)
            vp, lg, fl = ctypes.c_void_p, ctypes.c_long, ctypes.c_float
            lib.tcc_cpu_gemm.argtypes = [ctypes.c_int, ctypes.c_int, lg, lg, lg, fl, vp, lg, vp, lg, vp, lg,
                                         ctypes.POINTER(Epilogue)]
            lib.tcc_cpu_softmax.argtypes = [lg, lg, lg, vp, vp, ctypes.c_int]
            lib.tcc_cpu_layernorm.argtypes = [lg, lg, vp, vp, vp, fl, vp]
            lib.tcc_cpu_conv2d_scratch.argtypes = [ctypes.POINTER(ConvParams)]
            lib.tcc_cpu_conv2d_scratch.restype = ctypes.c_size_t
            lib.tcc_cpu_conv2d.argtypes = [ctypes.POINTER(ConvParams), vp, vp, vp, vp, ctypes.POINTER(Epilogue)]
            lib.tcc_cpu_maxpool2d.argtypes = [ctypes.POINTER(PoolParams), vp, vp]
            lib.tcc_cpu_avgpool2d.argtypes = [ctypes.POINTER(PoolParams), vp, vp]
            lib.tcc_cpu_rnn_scratch.argtypes = [ctypes.POINTER(RnnParams)]
            lib.tcc_cpu_rnn_scratch.restype = lg
            lib.tcc_cpu_rnn.argtypes = [ctypes.POINTER(RnnParams)] + [vp] * 10 + [vp]
        except (ImportError, OSError, TccError, AttributeError):
            lib = None
        _lib.append(lib)
    return _lib[0]


def f32(x):
    """x as a C-contiguous float32 array (no copy where it is one)."""
    return np.ascontiguousarray(x, dtype=np.float32)


# a C-contiguous array's data address, the cheap way (runtime/signature.py)
ptr = data_ptr


_rt = []


def rt_kernels():
    """The runtime library (runtime/native: libtccrt) with the generic
    path's kernels (generic_ops.c), or None where it cannot be built; a
    ctypes.PyDLL for the same reason as c_kernels."""
    if not _rt:
        lib = None
        try:
            from tcc.runtime import native
            lib = ctypes.PyDLL(native.load())
            vp, lg = ctypes.c_void_p, ctypes.c_long
            lib.tcc_erf_f32.argtypes = [vp, vp, lg]
            lib.tcc_gelu_f32.argtypes = [vp, vp, lg]
            lib.tcc_rmsnorm_f32.argtypes = [lg, lg, vp, vp, ctypes.c_float, vp]
        except (ImportError, OSError, TccError, AttributeError):
            lib = None
        _rt.append(lib)
    return _rt[0]
