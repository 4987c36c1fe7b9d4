"""`torch.compile(model, backend="tcc", options={"maccel": [...]})`: a
TorchDynamo backend (registered through the `torch_dynamo_backends` entry
point; `pip install tcc[torch]`).

Each FX graph Dynamo hands over is exported to ONNX (torch's TorchScript
exporter: no onnxscript needed), compiled by tcc through the compile cache and
called with the graph's tensor inputs. Parameters and buffers are baked into
the model as constants, so their packing and folding happen at compile time;
a parameter changed in place afterwards (its version counter moves) makes the
graph compile again. When Dynamo recompiles a graph with symbolic sizes (an
input shape changed), the symbolic dims become dynamic ONNX dims and tcc's
run-time specialization compiles each new shape once, with no further
recompiles in Dynamo. Anything tcc cannot export, compile or run falls back
to eager PyTorch with a one-line warning (logger `tcc.torch`)."""
from __future__ import annotations

import io
import logging
import os
import tempfile
import warnings

import numpy as np

log = logging.getLogger("tcc.torch")

OPTIONS = ("maccel", "opt_level")


def _one_line(e):
    first = (str(e).strip().splitlines() or [""])[0]  # torch's messages go on to print tensors
    return " ".join(f"{type(e).__name__}: {first}".split())[:200]


def tcc_backend(gm, example_inputs, options=None):
    """The Dynamo backend: returns a callable running `gm` through tcc, or
    `gm.forward` (eager) when tcc cannot take the graph."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"torch.compile(backend='tcc'): unknown option(s) {unknown} (known: {list(OPTIONS)})")
    maccel = options.get("maccel", [])
    maccel = [maccel] if isinstance(maccel, str) else list(maccel)
    try:
        return _TccGraph(gm, example_inputs, maccel, int(options.get("opt_level", 2)))
    except Exception as e:  # noqa: BLE001 - any failure means: run this graph eagerly
        log.warning("tcc: running a graph of %d ops eagerly (%s)", _op_count(gm), _one_line(e))
        return gm.forward


def _op_count(gm):
    return sum(1 for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module"))


def _is_constant(node, value):
    import torch
    return isinstance(value, torch.nn.Parameter) or "_buffers_" in node.name


class _TccGraph:
    def __init__(self, gm, example_inputs, maccel, opt_level):
        import torch
        self.gm, self.maccel, self.opt_level = gm, maccel, opt_level
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(example_inputs):
            raise ValueError("the graph's placeholders do not match its example inputs")
        # layout[i]: how argument i of the graph is fed: ("const", k), ("input", j) or ("sym", (j, dim)).
        self.layout, self.consts, self.const_src, self.const_pos, tensor_pos = [], [], [], [], []
        for i, (n, v) in enumerate(zip(placeholders, example_inputs)):
            if isinstance(v, torch.Tensor) and _is_constant(n, v):
                self.layout.append(("const", len(self.consts)))
                self.consts.append(v.detach())  # traced as constants: no autograd history
                self.const_src.append(v)
                self.const_pos.append(i)
            elif isinstance(v, torch.Tensor):
                self.layout.append(("input", len(tensor_pos)))
                tensor_pos.append(i)
            elif isinstance(v, (int, torch.SymInt)):
                self.layout.append(("sym", None))
            else:
                raise TypeError(f"graph input {n.name} is a {type(v).__name__}")
        self.tensor_pos = tensor_pos
        fake = [n.meta.get("example_value") for n in placeholders]
        for i, (kind, _) in enumerate(self.layout):
            if kind == "sym":
                self.layout[i] = ("sym", self._find_dim(str(fake[i]), [fake[p] for p in tensor_pos]))
        self.dynamic = {j: [d for d, s in enumerate(fake[p].shape) if not isinstance(s, int)]
                        for j, p in enumerate(tensor_pos) if fake[p] is not None}
        self.versions = [c._version for c in self.const_src]
        self.example = [example_inputs[p] for p in tensor_pos]
        self._build()

    @staticmethod
    def _find_dim(sym, tensors):
        for j, t in enumerate(tensors):
            for d, s in enumerate(getattr(t, "shape", ())):
                if str(s) == sym:
                    return j, d
        raise ValueError(f"symbolic size {sym} is no input's dimension")

    def _build(self):
        import onnx
        import torch

        import tcc
        graph = self

        class Wrapped(torch.nn.Module):
            def forward(self, *xs):
                args = []
                for kind, k in graph.layout:
                    if kind == "const":
                        args.append(graph.consts[k])
                    elif kind == "input":
                        args.append(xs[k])
                    else:
                        args.append(xs[k[0]].shape[k[1]])
                out = graph.gm(*args)
                return tuple(out) if isinstance(out, (tuple, list)) else out

        names = [f"input_{j}" for j in range(len(self.example))]
        dyn = {names[j]: {d: f"d{j}_{d}" for d in dims} for j, dims in self.dynamic.items() if dims}
        f = io.BytesIO()
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            example = tuple(t.detach() for t in self.example)
            out = Wrapped()(*example)
            self.single = not isinstance(out, tuple)
            outs = (out,) if self.single else out
            if not all(isinstance(o, torch.Tensor) for o in outs):
                raise TypeError("the graph returns something other than tensors")
            torch.onnx.export(Wrapped(), example, f, dynamo=False, input_names=names,
                              output_names=[f"output_{i}" for i in range(len(outs))], dynamic_axes=dyn or None,
                              opset_version=18)
        model = onnx.load_from_string(f.getvalue())
        self.in_names = [i.name for i in model.graph.input]  # inputs the graph ignores are dropped
        self.feed_idx = [names.index(n) for n in self.in_names]
        self.out_dtypes = [o.dtype for o in outs]
        self._dir = tempfile.TemporaryDirectory(prefix="tcc-torch-")
        out = os.path.join(self._dir.name, "graph.tcc")
        self.session = tcc.load(tcc.compile(model, maccel=self.maccel, opt_level=self.opt_level, output=out))

    def __call__(self, *args):
        import torch
        if self.session is None:
            return self.gm(*args)
        for k, p in enumerate(self.const_pos):
            c = args[p]
            if c is not self.const_src[k] or c._version != self.versions[k]:  # a weight changed: compile again
                self.const_src = [args[q] for q in self.const_pos]
                self.consts = [t.detach() for t in self.const_src]
                self.versions = [t._version for t in self.const_src]
                self.example = [args[q] for q in self.tensor_pos]
                self._build()
                break
        xs = [args[self.tensor_pos[j]] for j in self.feed_idx]
        feeds = {n: np.ascontiguousarray(x.detach().cpu().numpy()) for n, x in zip(self.in_names, xs)}
        try:
            outs = self.session.run(feeds)
        except Exception as e:  # noqa: BLE001 - e.g. a new shape tcc cannot compile
            log.warning("tcc: running a graph of %d ops eagerly from now on (%s)", _op_count(self.gm),
                        _one_line(e))
            self.session = None
            return self.gm(*args)
        res = tuple(torch.from_numpy(np.asarray(o)) for o in outs)
        return res[0] if self.single else res
