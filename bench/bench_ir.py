"""IR speed: import + print + parse of a 50,000-op model (target: under 5 s
on the 2-core CI machine). Prints each phase and the total."""
import sys
import time

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from tcc.dialects.ir import parse_module, print_module, verify
from tcc.dialects.init_all import default_context
from tcc.dialects.onnx.importer import import_model

N = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
TARGET_S = 5.0


def big_model(n):
    ops = ["Add", "Mul", "Relu", "Sub", "Tanh"]
    nodes, prev = [], "x"
    for i in range(n):
        op = ops[i % len(ops)]
        ins = [prev, "c"] if op in ("Add", "Mul", "Sub") else [prev]
        nodes.append(helper.make_node(op, ins, [f"t{i}"], name=f"n{i}"))
        prev = f"t{i}"
    nodes[-1].output[0] = "y"
    g = helper.make_graph(nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
                          [numpy_helper.from_array(np.ones((4, 8), np.float32), "c")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def main():
    model = big_model(N)
    ctx = default_context()
    t0 = time.perf_counter()
    module = import_model(model)
    t1 = time.perf_counter()
    text = print_module(module)
    t2 = time.perf_counter()
    back = parse_module(text, "<bench>", ctx)
    t3 = time.perf_counter()
    verify(back, ctx)
    t4 = time.perf_counter()
    total = t3 - t0
    print(f"ops: {N}   text: {len(text) / 1e6:.1f} MB")
    print(f"import (checker + onnx shape inference + build): {t1 - t0:6.2f} s")
    print(f"print:                                           {t2 - t1:6.2f} s")
    print(f"parse:                                           {t3 - t2:6.2f} s")
    print(f"import + print + parse:                          {total:6.2f} s  (target < {TARGET_S:.0f} s: "
          f"{'OK' if total < TARGET_S else 'MISSED'})")
    print(f"verify (not counted):                            {t4 - t3:6.2f} s")


if __name__ == "__main__":
    main()
