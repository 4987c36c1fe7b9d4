"""Ops the runtime computes in Python on numpy arrays, between natively
compiled stages (runtime/staged.py cuts the graph before each one):

- string ops (StringConcat, StringSplit, StringNormalizer, RegexFullMatch,
  and any op with a string operand or result: Equal, Identity, Reshape,
  Gather...). A string tensor is a numpy object array of Python str; there
  is no arithmetic in these ops to compile, and the loop IR has no string
  element type;
- the ai.onnx.ml operators scikit-learn models convert to (ml.py): tree
  ensembles, linear and SVM models, scalers and encoders, vectorized in
  numpy over all rows (and all trees) at once;
- ImageDecoder (Pillow, the `tcc[image]` extra) and TfIdfVectorizer;
- NonMaxSuppression (detection.py: the selection in C, runtime/native/nms.c).

A kernel is `fn(node, inputs) -> outputs`: `node` is a `Node` (its name,
op type and attributes, decoded), `inputs` the operand arrays in schema
order (None for an absent optional one). Bad attributes or inputs raise
`HostOpError` naming the node and op."""
from __future__ import annotations

import numpy as np
from onnx import helper

from tcc.dialects.ir.errors import TccError

# IR op name ("onnx.StringConcat", "onnx.ml.TreeEnsemble") -> kernel; "string:onnx.Equal":
# the kernel for that op when an operand or result is a string (it is compiled otherwise)
KERNELS = {}


class HostOpError(TccError):
    pass


def kernel(*names, warns=True):
    """Registers fn for these op names. warns=False: the kernel emits no
    Python warnings (its work is in C), so a caller need not catch them
    (warnings.catch_warnings costs ~3 us a call, a tenth of a small model's
    NonMaxSuppression step)."""
    def register(fn):
        fn.warns = warns
        for n in names:
            KERNELS[n] = fn
        return fn
    return register


class Node:
    """One node's name, op and attributes (strings decoded from UTF-8)."""

    def __init__(self, proto):
        self.name, self.op = proto.name or proto.output[0], proto.op_type
        self.attrs = {a.name: _decode(helper.get_attribute_value(a)) for a in proto.attribute}
        self.cache = {}  # what a kernel derives from the attributes once (a tree ensemble's arrays)

    def get(self, name, default=None):
        return self.attrs.get(name, default)

    def error(self, what):
        return HostOpError(f"node '{self.name}' ({self.op}): {what}")

    def require(self, name):
        if name not in self.attrs:
            raise self.error(f"attribute '{name}' is required")
        return self.attrs[name]


def _decode(v):
    if isinstance(v, bytes):
        return v.decode("utf-8")
    if isinstance(v, list):
        return [_decode(x) for x in v]
    return v


def is_string(t):
    return str(getattr(t, "element", "")) == "!onnx.String"


def is_host_op(op):
    """Whether `op` (an IR operation) runs here rather than natively."""
    from tcc.dialects.ir.types import NONE
    if op.name in _kernels():
        return True
    return any(v.type is not NONE and is_string(v.type) for v in list(op.operands) + list(op.results))


# Result ranks onnx's shape inference leaves unknown for some of these ops
# (the ml domain's): f(rank of operand 0) -> ranks of the results. A stage
# after the op takes its results as arguments, which need a rank to be
# specialized; the dims stay dynamic.
_SAME = lambda r: [r]  # noqa: E731
RESULT_RANKS = {
    "onnx.ml.Scaler": _SAME, "onnx.ml.Normalizer": _SAME, "onnx.ml.Binarizer": _SAME,
    "onnx.ml.LabelEncoder": _SAME, "onnx.TfIdfVectorizer": _SAME,
    "onnx.ml.ArrayFeatureExtractor": lambda r: [max(r, 2)], "onnx.ml.OneHotEncoder": lambda r: [r + 1],
    "onnx.ml.LinearClassifier": lambda r: [1, 2], "onnx.ml.SVMClassifier": lambda r: [1, 2],
    "onnx.ml.TreeEnsembleClassifier": lambda r: [1, 2], "onnx.ml.LinearRegressor": lambda r: [2],
    "onnx.ml.SVMRegressor": lambda r: [2], "onnx.ml.TreeEnsembleRegressor": lambda r: [2],
    "onnx.ml.TreeEnsemble": lambda r: [2], "onnx.ImageDecoder": lambda r: [3],
}


def refine_result_types(op):
    """Gives `op`'s unranked tensor results their rank (RESULT_RANKS)."""
    from tcc.dialects.ir.types import TensorType
    rule = RESULT_RANKS.get(op.name)
    if rule is None or not op.operands or not isinstance(op.operands[0].type, TensorType) or \
            op.operands[0].type.shape is None:
        return
    for r, rank in zip(op.results, rule(len(op.operands[0].type.shape))):
        if isinstance(r.type, TensorType) and r.type.shape is None:
            r.type = TensorType([None] * rank, r.type.element)


def _kernels():
    # the kernel modules register themselves into KERNELS when imported (an
    # import of one of them alone, a test's, must not stand for all)
    from . import detection, image, ml, strings, text  # noqa: F401
    return KERNELS


class HostOpRunner:
    """Runs one node (a one-node ModelProto, inputs i0.., outputs o0..) like
    onnx.reference.ReferenceEvaluator.run: a registered kernel, else (an op
    that only moves strings around: Identity, Reshape, Gather, Concat...)
    onnx's reference evaluator, whose numpy code for these is exact."""

    def __init__(self, model):
        proto = model.graph.node[0]
        self.node = Node(proto)
        self.inputs = list(proto.input)
        domain = proto.domain if proto.domain not in ("", "ai.onnx") else ""
        name = f"onnx.{'ml.' if domain == 'ai.onnx.ml' else ''}{proto.op_type}"
        self.fn = _kernels().get(name) or KERNELS.get(f"string:{name}")
        self.reference = None
        if self.fn is None:
            from onnx.reference import ReferenceEvaluator
            self.reference = ReferenceEvaluator(model)
        self.warns = self.reference is not None or getattr(self.fn, "warns", True)

    def run(self, _names, feeds):
        if self.reference is not None:
            return self.reference.run(None, feeds)
        return list(self.fn(self.node, [feeds.get(n) if n else None for n in self.inputs]))


def as_strings(node, x, what="input"):
    """`x` as an object array of str (numpy 'U' arrays are converted)."""
    x = np.asarray(x)
    if x.dtype.kind == "U":
        return x.astype(object)
    if x.dtype != object:
        raise node.error(f"{what} has dtype {x.dtype}, expected strings")
    return x
