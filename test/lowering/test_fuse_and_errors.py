import numpy as np
import pytest
from onnx import helper as h

from helpers import check, make_model, rand, lower
from tcc.dialects.ir import PassManager, verify
from tcc.dialects.init_all import new_context
from tcc.dialects.onnx.importer import import_model
from tcc.dialects.transforms.fuse import FusePass

CHAIN = [h.make_node("Add", ["x", "b"], ["t1"]), h.make_node("Mul", ["t1", "x"], ["t2"]),
         h.make_node("Relu", ["t2"], ["t3"]), h.make_node("Sigmoid", ["t3"], ["t4"]),
         h.make_node("Sub", ["t4", "y"], ["t5"]), h.make_node("Tanh", ["t5"], ["t6"]),
         h.make_node("Exp", ["t6"], ["t7"]), h.make_node("Div", ["t7", "y"], ["o"])]


def _inputs():
    return {"x": rand(4, 8), "y": rand(4, 8, lo=0.5)}


def test_chain_of_8_is_one_group_and_one_nest():
    inits = {"b": rand(8)}
    mod = check(CHAIN, _inputs(), {"o": (np.float32, None)}, initializers=inits, fuse=True)
    body = mod.lookup_function("main_graph").regions[0].blocks[0]
    nests = [op for op in body.ops if op.name == "loop.for"]
    assert len(nests) == 1
    loads = [op for op in nests[0].walk() if op.name == "loop.load"]
    stores = [op for op in nests[0].walk() if op.name == "loop.store"]
    assert len(loads) == 3 and len({id(op.operands[0]) for op in loads}) == 3  # x, b, y once each
    assert len(stores) == 1
    assert not any(op.name == "loop.alloc" for op in body.ops)


def test_fuse_pass_makes_one_fused_op():
    mod = import_model(make_model(CHAIN, _inputs(), {"o": (np.float32, None)}, {"b": rand(8)}))
    ctx = new_context()
    PassManager(ctx, [FusePass()]).run(mod)
    verify(mod, ctx)
    names = [op.name for op in mod.lookup_function("main_graph").regions[0].blocks[0].ops]
    assert names.count("graph.fused") == 1
    assert not any(n in ("onnx.Add", "onnx.Tanh", "onnx.Div") for n in names)


def test_fuse_respects_max_ops_and_keeps_acyclic():
    mod = import_model(make_model(CHAIN, _inputs(), {"o": (np.float32, None)}, {"b": rand(8)}))
    ctx = new_context()
    PassManager(ctx, [FusePass(**{"max-ops": 3})]).run(mod)
    fused = [op for op in mod.lookup_function("main_graph").regions[0].blocks[0].ops if op.name == "graph.fused"]
    assert all(len(f.regions[0].blocks[0]) - 1 <= 3 for f in fused) and len(fused) >= 3
    # a side branch through a non-fusable op (Softmax) between two members must not be merged into a cycle
    nodes = [h.make_node("Relu", ["x"], ["a"]), h.make_node("Softmax", ["a"], ["s"]),
             h.make_node("Add", ["a", "s"], ["c"]), h.make_node("Exp", ["c"], ["o"])]
    check(nodes, {"x": rand(3, 5)}, {"o": (np.float32, None)}, fuse=True)


def test_fused_group_with_multiple_outputs_and_broadcast():
    nodes = [h.make_node("Mul", ["x", "s"], ["a"]), h.make_node("Relu", ["a"], ["r"]),
             h.make_node("Add", ["r", "x"], ["o1"]), h.make_node("Softmax", ["a"], ["o2"])]
    check(nodes, {"x": rand(2, 3, 4), "s": rand(3, 1)}, {"o1": (np.float32, None), "o2": (np.float32, None)},
          fuse=True)


def test_unlowerable_op_is_a_one_line_error():
    from tcc.dialects.conversions.graph_to_loop import LoweringError
    model = make_model([h.make_node("Multinomial", ["x"], ["y"], name="n3", sample_size=2)], {"x": rand(3, 3)},
                       {"y": (np.int32, None)})
    with pytest.raises(LoweringError) as e:
        lower(model)
    assert str(e.value) == "node 'n3': no host lowering for onnx.Multinomial"


def test_dynamic_shape_is_a_clear_error():
    from onnx import TensorProto
    from tcc.dialects.conversions.graph_to_loop import LoweringError
    g = h.make_graph([h.make_node("Relu", ["x"], ["y"], name="r")], "g",
                     [h.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
                     [h.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])])
    with pytest.raises(LoweringError, match="dynamic"):
        lower(h.make_model(g))
