"""BYOC placement on the IR: composites, priority, acyclic region merging,
outlining, and the cost hint, with in-process plugins."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tcc.accelerators import API_VERSION, AcceleratorInfo, CompositePattern, Support, hookimpl
from tcc.accelerators.manager import load_accelerators, register_plugin, unregister_plugin
from tcc.dialects.ir import PassManager, parse_pipeline, verify
from tcc.dialects.init_all import new_context
from tcc.dialects.onnx.importer import import_model
from tcc.dialects.transforms.placement import PIPELINE


class Plugin:
    def __init__(self, name, takes, composites=(), cost=None):
        self.name, self.takes, self.composites, self.cost = name, set(takes), list(composites), cost

    @hookimpl
    def tcc_accelerator_info(self):
        return AcceleratorInfo(self.name, "1", API_VERSION)

    @hookimpl
    def tcc_supports_op(self, op, module):
        return Support.yes() if op.name in self.takes else Support.no("op unsupported")

    @hookimpl
    def tcc_composite_patterns(self):
        return self.composites

    @hookimpl
    def tcc_cost_hint(self, op, module):
        return self.cost


@pytest.fixture
def place():
    names = []

    def run(model, *plugins):
        for p in plugins:
            register_plugin(p.name, p)
            names.append(p.name)
        ctx = new_context()
        ctx.accelerators = load_accelerators([p.name for p in plugins])
        m = import_model(model)
        PassManager(ctx, parse_pipeline(PIPELINE + ",dce", ctx)).run(m)
        verify(m, ctx)
        return m
    yield run
    for n in names:
        unregister_plugin(n)


def graph(nodes, inits=()):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])
    g = helper.make_graph(nodes, "g", [x], [y], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def partitions(m):
    return {f.get_attr("sym_name"): [o.name for o in f.regions[0].blocks[0].ops if o.name.startswith("onnx.")
                                     and o.name != "onnx.Constant"]
            for f in m.functions() if f.get_attr("tcc.accelerator")}


def test_regions_never_form_a_cycle(place):
    # a -> b(host) -> c, and a -> c: merging a and c would need b inside.
    m = place(graph([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Sigmoid", ["a"], ["b"]),
                     helper.make_node("Add", ["a", "b"], ["y"])]), Plugin("acc", {"onnx.Relu", "onnx.Add"}))
    parts = partitions(m)
    assert sorted(parts.values()) == [["onnx.Add"], ["onnx.Relu"]]


def test_connected_ops_merge_into_one_region(place):
    m = place(graph([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["b"]),
                     helper.make_node("Add", ["a", "b"], ["y"])]), Plugin("acc", {"onnx.Relu", "onnx.Neg", "onnx.Add"}))
    assert list(partitions(m).values()) == [["onnx.Relu", "onnx.Neg", "onnx.Add"]]
    main = m.lookup_function("main_graph").regions[0].blocks[0]
    assert [o.name for o in main.ops if o.name != "onnx.NoValue"] == ["func.call", "func.return"]


def test_composite_wins_even_if_members_are_unsupported_alone(place):
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    b = numpy_helper.from_array(np.ones((4,), np.float32), "b")
    m = place(graph([helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["y"])],
                    [w, b]),
              Plugin("acc", {"onnx.MatMul"}, [CompositePattern("matmul_add", ("onnx.MatMul", "onnx.Add"))]))
    (ops,) = partitions(m).values()
    assert ops == ["onnx.MatMul", "onnx.Add"]
    f = [f for f in m.functions() if f.get_attr("tcc.accelerator")][0]
    assert all(o.get_attr("tcc.composite", "").startswith("matmul_add") for o in f.regions[0].blocks[0].ops
               if o.name in ("onnx.MatMul", "onnx.Add"))


def test_not_worth_a_copy(place):
    m = place(graph([helper.make_node("Relu", ["x"], ["y"])]), Plugin("slow", {"onnx.Relu"}, cost=0.9))
    assert partitions(m) == {}
    relu = [o for o in m.walk() if o.name == "onnx.Relu"][0]
    assert "not worth a copy" in relu.get_attr("tcc.host_reason")


def test_host_op_using_a_region_output_is_reordered(place):
    # host op between two region ops uses the first's output.
    m = place(graph([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Sigmoid", ["a"], ["s"]),
                     helper.make_node("Neg", ["a"], ["b"]), helper.make_node("Add", ["b", "s"], ["y"])]),
              Plugin("acc", {"onnx.Relu", "onnx.Neg"}))
    assert list(partitions(m).values()) == [["onnx.Relu", "onnx.Neg"]]  # verified above: uses follow defs


def test_independent_regions_of_one_accelerator_merge(place):
    # three branches from x with no edge between them, joined on the host
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["x"], ["b"]),
             helper.make_node("Abs", ["x"], ["c"]), helper.make_node("Sum", ["a", "b", "c"], ["y"])]
    m = place(graph(nodes), Plugin("acc", {"onnx.Relu", "onnx.Neg", "onnx.Abs"}))
    assert sorted(sorted(v) for v in partitions(m).values()) == [["onnx.Abs", "onnx.Neg", "onnx.Relu"]]


def test_siblings_joined_through_the_host_stay_apart(place):
    # a -> sigmoid(host) -> c: merging a's and c's regions would need the host op inside
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Sigmoid", ["a"], ["s"]),
             helper.make_node("Neg", ["s"], ["c"]), helper.make_node("Add", ["a", "c"], ["y"])]
    m = place(graph(nodes), Plugin("acc", {"onnx.Relu", "onnx.Neg"}))
    assert sorted(partitions(m).values()) == [["onnx.Neg"], ["onnx.Relu"]]



def graph_outputs(nodes, outputs):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, [4, 4]) for o in outputs]
    return helper.make_model(helper.make_graph(nodes, "g", [x], outs), opset_imports=[helper.make_opsetid("", 18)])


def partition_nodes(m):
    """The ONNX node names in each partition, sorted."""
    return sorted(sorted(o.loc.name for o in f.regions[0].blocks[0].ops
                         if o.name.startswith("onnx.") and o.name != "onnx.Constant")
                  for f in m.functions() if f.get_attr("tcc.accelerator"))


def test_joining_a_region_sees_paths_through_other_regions(place):
    # c joins a's region, which so depends on b's; d (fed by b and, through
    # the host op m, by a) must not then join b's region: {b, d} -> {a, c} ->
    # m -> {b, d} would be a cycle of calls (partitioning looped forever).
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="a"), helper.make_node("Relu", ["x"], ["b"], name="b"),
             helper.make_node("Add", ["a", "b"], ["c"], name="c"), helper.make_node("Mul", ["a", "x"], ["m"], name="m"),
             helper.make_node("Add", ["m", "b"], ["d"], name="d")]
    m = place(graph_outputs(nodes, ["c", "d"]), Plugin("acc", {"onnx.Relu", "onnx.Add"}))
    assert partition_nodes(m) == [["a", "b", "c"], ["d"]]


def test_sibling_merge_sees_paths_through_other_regions(place):
    # a -> m(host) -> c in the region {b, c}, and b -> s(host) -> e: merging
    # a's and e's regions (no path of ops between a and e) would close the
    # cycle {a, e} -> m -> {b, c} -> s -> {a, e} of calls.
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="a"), helper.make_node("Mul", ["x", "a"], ["m"], name="m"),
             helper.make_node("Relu", ["x"], ["b"], name="b"), helper.make_node("Add", ["m", "b"], ["c"], name="c"),
             helper.make_node("Sigmoid", ["b"], ["s"], name="s"), helper.make_node("Relu", ["s"], ["e"], name="e"),
             helper.make_node("Relu", ["m"], ["f"], name="f")]
    m = place(graph_outputs(nodes, ["c", "e", "f"]), Plugin("acc", {"onnx.Relu", "onnx.Add"}))
    assert partition_nodes(m) == [["a"], ["b", "c", "f"], ["e"]]


class HostMemoryPlugin(Plugin):
    """An accelerator on the host's own memory (the cpu accelerator's kind)."""

    @hookimpl
    def tcc_target_kind(self):
        return {"name": f"{self.name}_kind", "device_type": "cpu"}

    @hookimpl
    def tcc_cost_hint(self, op, module):
        return None if op.name == "onnx.Softmax" else self.cost


def test_host_memory_regions_weigh_fusion_not_copies(place):
    # on host memory nothing is copied: a region as fast as the host goes
    # back to it only where it sits beside host steps
    acc = lambda: HostMemoryPlugin("hm", {"onnx.Relu", "onnx.Neg", "onnx.Softmax"}, cost=1.0)
    m = place(graph([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["y"])]), acc())
    assert list(partitions(m).values()) == [["onnx.Relu", "onnx.Neg"]]
    m = place(graph([helper.make_node("Sigmoid", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
                     helper.make_node("Sigmoid", ["b"], ["y"])]), acc())
    assert partitions(m) == {}
    relu = [o for o in m.walk() if o.name == "onnx.Relu"][0]
    assert "not worth fusion with host steps (saves 0, moves 32 elements)" in relu.get_attr("tcc.host_reason")
    # beside host steps that `fuse` would not join it with, it stays
    m = place(graph([helper.make_node("Transpose", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
                     helper.make_node("Transpose", ["b"], ["y"])]), acc())
    assert list(partitions(m).values()) == [["onnx.Relu"]]
    # an op with no hint (a kernel) keeps its region, which gives back its
    # edges beside host steps: the Relu reading one, the Neg feeding one
    m = place(graph([helper.make_node("Sigmoid", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
                     helper.make_node("Softmax", ["b"], ["c"]), helper.make_node("Neg", ["c"], ["d"]),
                     helper.make_node("Sigmoid", ["d"], ["y"])]), acc())
    assert list(partitions(m).values()) == [["onnx.Softmax"]]
    for name in ("onnx.Relu", "onnx.Neg"):
        op = [o for o in m.walk() if o.name == name][0]
        assert op.get_attr("tcc.host_reason") == "hm: fuses with the host steps beside it"
    m = place(graph([helper.make_node("Relu", ["x"], ["b"]), helper.make_node("Softmax", ["b"], ["c"]),
                     helper.make_node("Neg", ["c"], ["y"])]), acc())
    assert list(partitions(m).values()) == [["onnx.Relu", "onnx.Softmax", "onnx.Neg"]]
    # a region dropped leaves its neighbour (judged before it) beside a host step
    m = place(graph([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["b"]),
                     helper.make_node("Sigmoid", ["b"], ["y"])]),
              HostMemoryPlugin("hm1", {"onnx.Relu"}, cost=1.0), HostMemoryPlugin("hm2", {"onnx.Neg"}, cost=1.0))
    assert partitions(m) == {}
