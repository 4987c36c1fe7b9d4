"""The fuzz harness: hypothesis draws mutations of valid inputs (IR text,
serialized ModelProtos, .tcc zips and their manifests), a child process
(fuzz_worker.py) runs each through its target, and anything but success or
the documented one-line error (a TccError) counts as a crash: another
exception, no answer within HANG_S seconds, peak RSS over RSS_LIMIT, or the
child dying on a signal. Crashing inputs are kept in fuzz_corpus/<target>/,
which test_fuzz.py replays on every run."""
import hashlib
import io
import json
import os
import subprocess
import sys
import zipfile

from hypothesis import strategies as st

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "fuzz_corpus")
HANG_S = 10.0
RSS_LIMIT = 2 << 30


class Worker:
    """One child process running targets; restarted after a crash."""

    def __init__(self):
        self.proc = None
        self.tmp = None  # the children's scratch directory: owned here, since a child may be killed

    def _start(self):
        import tempfile
        root = os.path.dirname(os.path.dirname(HERE))
        env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
        if self.tmp is None:
            self.tmp = tempfile.TemporaryDirectory(prefix="tcc-fuzz-")
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "fuzz_worker.py"), self.tmp.name],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=root)

    def run(self, target, data: bytes):
        """(status, detail): status ok, error or crash."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        p = self.proc
        try:
            p.stdin.write(f"{target} {len(data)}\n".encode() + data)
            p.stdin.flush()
        except BrokenPipeError:
            return self._died()
        import select
        ready, _, _ = select.select([p.stdout], [], [], HANG_S + 60 * (self.first_call(target)))
        if not ready:
            p.kill()
            p.wait()
            self.proc = None
            return "crash", f"hang: no answer within {HANG_S:g} s"
        line = p.stdout.readline()
        if not line:
            return self._died()
        r = json.loads(line)
        if r["rss"] > RSS_LIMIT:
            self.close()
            return "crash", f"peak RSS {r['rss'] >> 20} MiB (over {RSS_LIMIT >> 20} MiB); {r['detail']}"
        return r["status"], r["detail"]

    _warm = set()

    def first_call(self, target):
        """The first input after a (re)start also pays the imports."""
        key = (id(self.proc), target)
        first = key not in self._warm
        self._warm.add(key)
        return first

    def _died(self):
        rc = self.proc.wait()
        self.proc = None
        return "crash", f"worker died (exit {rc}, signal {-rc if rc < 0 else 0})"

    def close(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
        if self.tmp is not None:
            self.tmp.cleanup()
            self.tmp = None


def save_to_corpus(target, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, hashlib.sha256(data).hexdigest()[:16] + ".bin")
    with open(path, "wb") as f:
        f.write(data)
    return path


def corpus(target):
    d = os.path.join(CORPUS, target)
    return [os.path.join(d, n) for n in sorted(os.listdir(d))] if os.path.isdir(d) else []


# -- seeds -------------------------------------------------------------------------------------
def seed_models():
    """Serialized valid models: elementwise, a conv net, a subgraph (If)."""
    from onnx import TensorProto, helper

    from tcc import samples
    from .models import relu_model
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    c = helper.make_tensor("c", TensorProto.FLOAT, [2, 3], [1, 2, 3, 4, 5, 6])
    cond = helper.make_tensor("k", TensorProto.BOOL, [], [True])
    then = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2, 3])])
    other = helper.make_graph([helper.make_node("Abs", ["x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2, 3])])
    nodes = [helper.make_node("Add", ["x", "c"], ["a"]), helper.make_node("If", ["k"], ["b"], then_branch=then,
                                                                          else_branch=other),
             helper.make_node("Mul", ["a", "b"], ["s"]), helper.make_node("Softmax", ["s"], ["y"], axis=1)]
    g = helper.make_graph(nodes, "g", [x], [y], initializer=[c, cond])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    return [relu_model().SerializeToString(), m.SerializeToString(), samples.cnn(seed=1).SerializeToString()]


def seed_ir():
    from tcc.dialects.ir import print_module
    from tcc.dialects.onnx.importer import import_model
    import onnx
    out = []
    for b in seed_models():
        out.append(print_module(import_model(onnx.load_from_string(b))).encode())
    return out


_ARTIFACTS = {}


def seed_artifact():
    if "a" not in _ARTIFACTS:
        import tempfile

        import tcc
        from .models import relu_model
        with tempfile.TemporaryDirectory(prefix="tcc-fuzz-seed-") as d:
            p = tcc.compile(relu_model(), output=os.path.join(d, "m.tcc"))
            with open(p, "rb") as f:
                _ARTIFACTS["a"] = f.read()
    return _ARTIFACTS["a"]


# -- mutations ---------------------------------------------------------------------------------
IR_TOKENS = [b"%0", b"%arg0", b"%x#1", b"tensor<", b"memref<", b">", b"x", b"?x", b"*x", b"f32", b"i64", b"f16", b"(",
             b")", b"{", b"}", b"[", b"]", b"<", b",", b":", b"->", b"=", b"\"onnx.Add\"", b"\"func.return\"",
             b"\"builtin.module\"", b"^bb0", b"^bb1(", b"dense<", b"dense<\"0x", b"dense_resource<", b"array<i64: ",
             b"loc(", b"\"", b"\\", b"\\ff", b"@main", b"func.func", b"module", b"return", b"attributes",
             b"unit", b"true", b"-1", b"99999999999999999999", b"1e999", b"nan", b"0x7FF", b"\n", b" ", b"//",
             b"\xff", b"\xc3", b"\x00", b"complex<", b"!onnx.String", b"(" * 50, b"[" * 200, b"{" * 100]


@st.composite
def mutated(draw, seeds, tokens=()):
    """A seed with 1-8 byte-level or token-level edits."""
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["flip", "delete", "insert", "token", "dup", "truncate"] if tokens
                                    else ["flip", "delete", "insert", "dup", "truncate"]))
        n = len(data)
        i = draw(st.integers(0, max(n - 1, 0)))
        if kind == "flip" and n:
            data[i] = draw(st.integers(0, 255))
        elif kind == "delete" and n:
            del data[i:i + draw(st.integers(1, 16))]
        elif kind == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "token":
            j = draw(st.integers(i, min(n, i + 12)))
            data[i:j] = draw(st.sampled_from(tokens))
        elif kind == "dup" and n:
            j = draw(st.integers(i, min(n, i + 64)))
            data[i:i] = data[i:j] * draw(st.integers(1, 4))
        elif kind == "truncate":
            del data[i:]
    return bytes(data)


ONNX_OPS = ["Relu", "Add", "Conv", "MatMul", "Reshape", "Gather", "If", "Loop", "Cast", "Slice", "Concat", "Unknown",
            "ConstantOfShape", "Expand", "Resize", "Einsum", "Split", "TopK", "Tile", ""]


@st.composite
def mutated_model(draw):
    """A seed ModelProto with structural edits (op types, attributes, shapes,
    element types, initializer bytes, opsets, names), then maybe byte edits."""
    import onnx
    from onnx import TensorProto
    m = onnx.load_from_string(draw(st.sampled_from(seed_models())))
    g = m.graph
    big = st.one_of(st.integers(-3, 8), st.sampled_from([0, -1, 1 << 31, 1 << 40, -(1 << 62)]))
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["op", "attr", "dim", "elem", "init", "opset", "name", "drop", "domain"]))
        if kind == "op" and g.node:
            draw(st.sampled_from(list(g.node))).op_type = draw(st.sampled_from(ONNX_OPS))
        elif kind == "attr" and g.node:
            n = draw(st.sampled_from(list(g.node)))
            a = n.attribute.add()
            a.name = draw(st.sampled_from(["axis", "to", "kernel_shape", "pads", "perm", "value", "x"]))
            a.type = draw(st.sampled_from([onnx.AttributeProto.INT, onnx.AttributeProto.INTS,
                                           onnx.AttributeProto.FLOAT, onnx.AttributeProto.STRING]))
            a.i = draw(big)
            a.ints.extend(draw(st.lists(big, max_size=4)))
            a.f = draw(st.floats(allow_nan=True))
        elif kind == "dim":
            vis = list(g.input) + list(g.output)
            if vis and vis[0].type.tensor_type.shape.dim:
                t = draw(st.sampled_from(vis)).type.tensor_type
                if t.shape.dim:
                    d = draw(st.sampled_from(list(t.shape.dim)))
                    if draw(st.booleans()):
                        d.dim_value = max(draw(big), 0)
                    else:
                        d.dim_param = draw(st.sampled_from(["N", "", "?"]))
        elif kind == "elem":
            vis = list(g.input) + list(g.output) + list(g.initializer)
            if vis:
                v = draw(st.sampled_from(vis))
                e = draw(st.sampled_from([0, 1, 2, 7, 8, 9, 10, 11, 14, 16, 17, 22, 23, 99]))
                if isinstance(v, TensorProto):
                    v.data_type = e
                else:
                    v.type.tensor_type.elem_type = e
        elif kind == "init" and g.initializer:
            t = draw(st.sampled_from(list(g.initializer)))
            if draw(st.booleans()):
                t.raw_data = draw(st.binary(max_size=64))
            else:
                del t.dims[:]
                t.dims.extend(draw(st.lists(big, max_size=4)))
        elif kind == "opset":
            m.opset_import[0].version = draw(st.integers(-2, 40))
        elif kind == "name" and g.node:
            n = draw(st.sampled_from(list(g.node)))
            if n.input:
                n.input[draw(st.integers(0, len(n.input) - 1))] = draw(st.sampled_from(["x", "y", "", "nope", "c"]))
        elif kind == "drop" and g.node:
            del g.node[draw(st.integers(0, len(g.node) - 1))]
        elif kind == "domain" and g.node:
            draw(st.sampled_from(list(g.node))).domain = draw(st.sampled_from(["", "ai.onnx.ml", "com.x"]))
    data = m.SerializeToString()
    if draw(st.integers(0, 3)) == 0:
        data = draw(mutated([data]))
    return data


@st.composite
def mutated_artifact(draw):
    """The seed .tcc with a mutated manifest (its members untouched, so the
    loader gets past their hashes), an extra member, or byte edits."""
    src = seed_artifact()
    kind = draw(st.sampled_from(["manifest", "members", "bytes"]))
    if kind == "bytes":
        return draw(mutated([src]))
    zin = zipfile.ZipFile(io.BytesIO(src))
    members = {i.filename: zin.read(i.filename) for i in zin.infolist()}
    man = json.loads(members["manifest.json"])
    if kind == "manifest":
        junk = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-(1 << 70), 1 << 70),
                                      st.floats(), st.text(max_size=8)),
                            lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(st.text(max_size=6), c,
                                                                                          max_size=3)), max_leaves=6)
        for _ in range(draw(st.integers(1, 4))):
            path, node = [], man
            while isinstance(node, (dict, list)) and node and draw(st.booleans()):
                key = draw(st.sampled_from(sorted(node) if isinstance(node, dict) else range(len(node))))
                path.append((node, key))
                node = node[key]
            if path:
                parent, key = path[-1]
                if draw(st.integers(0, 4)) == 0 and isinstance(parent, dict):
                    del parent[key]
                else:
                    parent[key] = draw(junk)
        raw = json.dumps(man).encode()
        members["manifest.json"] = raw
    else:
        name = draw(st.sampled_from(["../x", "/abs", "extra", "host.o", "weights.bin", "a/../../b", "manifest.json"]))
        members[name + draw(st.sampled_from(["", "2"]))] = draw(st.binary(max_size=32))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for n, b in members.items():
            z.writestr(n, b, zipfile.ZIP_STORED if n == "weights.bin" else zipfile.ZIP_DEFLATED)
    return buf.getvalue()


STRATEGIES = {"ir": lambda: mutated(seed_ir(), IR_TOKENS), "onnx": mutated_model, "artifact": mutated_artifact}


LAST = {}  # target -> the input of its last crash (after shrinking: the minimal one)


def check(worker, target, data):
    status, detail = worker.run(target, data)
    if status == "crash":
        LAST[target] = data
        raise AssertionError(f"fuzz target {target} crashed on {data[:200]!r}: {detail}")
