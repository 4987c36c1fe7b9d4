"""An onnxruntime-compatible session: code written against onnxruntime's
Python API switches to tcc by changing its import (`import tcc as ort`).

`InferenceSession(model, providers=[...] | maccel=[...])` compiles the model
(a path, serialized bytes or a ModelProto) through the compile cache and runs
it; `get_inputs()` / `get_outputs()` give NodeArg-like objects (name, shape
with symbolic dims as strings, type such as 'tensor(float)'), and
`run(output_names_or_None, feeds)` returns a list of numpy arrays. A wrong
input name, type, rank or dimension raises what onnxruntime raises (a
ValueError for missing inputs, InvalidArgument with onnxruntime's wording
otherwise)."""
from __future__ import annotations

import enum
import os
import tempfile
import warnings
from dataclasses import dataclass, field

import numpy as np

from tcc.dialects.ir.errors import TccError

# onnxruntime provider -> tcc accelerator (an accelerator's own name works too).
PROVIDERS = {"CPUExecutionProvider": "cpu", "CUDAExecutionProvider": "gpu", "TensorrtExecutionProvider": "gpu"}
_PREFIX = "[tcc] : 2 : INVALID_ARGUMENT : "


class Fail(TccError):
    """onnxruntime's Fail: the base of its session errors."""


class InvalidArgument(Fail):
    pass


class NoSuchFile(Fail, FileNotFoundError):
    pass


class InvalidGraph(Fail):
    pass


@dataclass(frozen=True)
class NodeArg:
    name: str
    type: str
    shape: list

    def __repr__(self):
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


class GraphOptimizationLevel(enum.IntEnum):
    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_ALL = 99


@dataclass
class SessionOptions:
    """Accepted so code that builds one keeps working; tcc's own options are
    its compile options (`-O`), and threads follow TCC_NUM_THREADS."""
    graph_optimization_level: object = None
    intra_op_num_threads: int = 0
    inter_op_num_threads: int = 0
    log_severity_level: int = 2
    config: dict = field(default_factory=dict)

    def add_session_config_entry(self, key, value):
        self.config[key] = value


@dataclass(frozen=True)
class ModelMetadata:
    producer_name: str
    graph_name: str
    domain: str
    description: str
    version: int
    custom_metadata_map: dict


def get_available_providers():
    from tcc.accelerators.manager import available_names
    names = set(available_names())
    return [p for p, a in PROVIDERS.items() if a in names and p != "TensorrtExecutionProvider"]


def _type_string(elem_type):
    import onnx
    return f"tensor({onnx.TensorProto.DataType.Name(elem_type).lower()})"


def _node_arg(vi):
    tp, wrap = vi.type, "{}"
    while tp.WhichOneof("value") in ("sequence_type", "optional_type"):  # as onnxruntime: seq(tensor(float))
        kind = tp.WhichOneof("value")
        wrap = wrap.format(("seq(" if kind == "sequence_type" else "optional(") + "{})")
        tp = getattr(tp, kind).elem_type
    t = tp.tensor_type
    shape = None
    if t.HasField("shape") and wrap == "{}":
        shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim]
    return NodeArg(vi.name, wrap.format(_type_string(t.elem_type)), shape)


def _np_type_string(dtype):
    from onnx.helper import np_dtype_to_tensor_dtype
    try:
        return _type_string(np_dtype_to_tensor_dtype(np.dtype(dtype)))
    except (TypeError, KeyError, ValueError):
        return f"tensor({dtype})"


def _sig_node_arg(spec):
    kinds = spec.get("container", [])
    t = _np_type_string(spec["dtype"])
    for k in reversed(kinds):
        t = f"{'seq' if k == 'seq' else 'optional'}({t})"
    return NodeArg(spec["name"], t, None if kinds else list(spec["shape"]))


def _maccel_for(providers):
    """The accelerators for onnxruntime provider names; one that cannot load
    here is dropped with a warning (as onnxruntime falls back to its CPU
    provider)."""
    from tcc.accelerators.manager import AcceleratorError, available_names, load_accelerators
    out = []
    for p in providers:
        name = p[0] if isinstance(p, (tuple, list)) else p
        acc = PROVIDERS.get(name, name)
        if acc not in available_names():
            known = ", ".join(list(PROVIDERS) + available_names())
            raise ValueError(f"Unknown Provider Type: {name} (tcc knows: {known})")
        try:
            load_accelerators([acc])
        except AcceleratorError as e:
            warnings.warn(f"{name} is not available here ({e}); falling back to CPUExecutionProvider",
                          stacklevel=3)
            acc = "cpu"
        if acc not in out:
            out.append(acc)
    return out


class InferenceSession:
    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None, maccel=None):
        import onnx
        if maccel is not None and providers is not None:
            raise ValueError("give providers or maccel, not both")
        self._sess_options = sess_options or SessionOptions()
        if maccel is None:
            maccel = _maccel_for(providers or ["CPUExecutionProvider"])
        elif isinstance(maccel, str):
            maccel = [maccel]
        self._maccel = list(maccel)
        self._tmp = tempfile.TemporaryDirectory(prefix="tcc-ort-")
        model = path_or_bytes
        if isinstance(model, os.PathLike):
            model = os.fspath(model)
        if isinstance(model, str):
            if not os.path.isfile(model):
                raise NoSuchFile(f"[tcc] : 3 : NO_SUCHFILE : Load model from {model} failed: "
                                 f"File doesn't exist")
            artifact = model if model.endswith(".tcc") else None
            proto = None if artifact else onnx.load(model, load_external_data=False)
        elif isinstance(model, (bytes, bytearray)):
            try:
                proto = onnx.load_from_string(bytes(model))
            except Exception as e:  # noqa: BLE001 - protobuf's DecodeError and friends
                raise InvalidGraph(f"[tcc] : 10 : INVALID_GRAPH : the bytes are not an ONNX model ({e})") from None
            model, artifact = proto, None
        elif isinstance(model, onnx.ModelProto):
            proto, artifact = model, None
        else:
            raise TypeError(f"InferenceSession takes a path, bytes or a ModelProto, not {type(model).__name__}")
        self._proto = proto
        if artifact is None:
            import tcc
            artifact = tcc.compile(model, maccel=self._maccel, output=os.path.join(self._tmp.name, "model.tcc"))
        import tcc
        self._sess = tcc.load(artifact)  # with the run-time compiler a dynamic model needs
        self._inputs, self._outputs = self._node_args()
        self._by_name = {a.name: a for a in self._inputs}
        self._out_names = [a.name for a in self._outputs]
        self._np_types = {s["name"]: np.dtype(s["dtype"]) for s in self._sess.input_signature}

    def _node_args(self):
        ins = [_sig_node_arg(s) for s in self._sess.input_signature]
        outs = [_sig_node_arg(s) for s in self._sess.output_signature]
        if self._proto is not None:  # symbolic dim names, as onnxruntime shows them
            g = self._proto.graph
            vis = {vi.name: vi for vi in list(g.input) + list(g.output) if vi.type.HasField("tensor_type")}
            ins = [_node_arg(vis[a.name]) if a.name in vis else a for a in ins]
            outs = [_node_arg(vis[a.name]) if a.name in vis else a for a in outs]
        return ins, outs

    def get_inputs(self):
        return list(self._inputs)

    def get_outputs(self):
        return list(self._outputs)

    def get_overridable_initializers(self):
        return []

    def get_providers(self):
        back = {v: k for k, v in reversed(PROVIDERS.items())}
        return [back.get(a, a) for a in self._maccel]

    def get_provider_options(self):
        return {p: {} for p in self.get_providers()}

    def get_session_options(self):
        return self._sess_options

    def get_modelmeta(self):
        p = self._proto
        if p is None:
            return ModelMetadata("", "", "", "", 0, {})
        return ModelMetadata(p.producer_name, p.graph.name, p.domain, p.doc_string, p.model_version,
                             {e.key: e.value for e in p.metadata_props})

    def _check(self, feeds):
        missing = [a.name for a in self._inputs if a.name not in feeds]
        if missing:
            raise ValueError(f"Required inputs ({missing}) are missing from input feed ({list(feeds)}).")
        arrays = {}
        for name, value in feeds.items():
            arg = self._by_name.get(name)
            if arg is None:
                raise InvalidArgument(f"{_PREFIX}Invalid input name: {name}")
            if arg.type.startswith(("seq(", "optional(")):  # a list / None: the session checks it
                arrays[name] = value
                continue
            want = self._np_types[name]
            if not hasattr(value, "dtype"):
                value = np.asarray(value, dtype=want)
            if np.dtype(value.dtype) != want:
                got = _np_type_string(value.dtype)
                raise InvalidArgument(f"{_PREFIX}Unexpected input data type. Actual: ({got}) , "
                                      f"expected: ({arg.type})")
            shape = tuple(value.shape)
            if arg.shape is not None:
                if len(shape) != len(arg.shape):
                    raise InvalidArgument(f"{_PREFIX}Invalid rank for input: {name} Got: {len(shape)} "
                                          f"Expected: {len(arg.shape)} Please fix either the inputs/outputs "
                                          f"or the model.")
                bad = [(i, g, w) for i, (g, w) in enumerate(zip(shape, arg.shape)) if isinstance(w, int) and g != w]
                if bad:
                    idx = "".join(f" index: {i} Got: {g} Expected: {w}\n" for i, g, w in bad)
                    raise InvalidArgument(f"{_PREFIX}Got invalid dimensions for input: {name} for the following "
                                          f"indices\n{idx} Please fix either the inputs/outputs or the model.")
            arrays[name] = value
        return arrays

    def run(self, output_names, input_feed, run_options=None):
        """output_names: a list of names, or None for every output -> a list
        of numpy arrays, in that order."""
        if output_names:
            for n in output_names:
                if n not in self._out_names:
                    raise InvalidArgument(f"{_PREFIX}Invalid output name:{n}")
        arrays = self._check(dict(input_feed))
        outs = self._sess.run(arrays, list(output_names) if output_names else None)
        return [o if o is None or isinstance(o, list) else np.asarray(o) for o in outs]

    def __repr__(self):
        return f"<tcc.InferenceSession {self._maccel}: {self._inputs} -> {self._outputs}>"
