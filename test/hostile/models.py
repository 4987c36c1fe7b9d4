"""Small ONNX models for the bad-input tests, built fresh with onnx.helper."""
import numpy as np
import onnx
from onnx import TensorProto, helper


def relu_model(n=8, opset=21):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu", [x], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def save(model, path):
    onnx.save(model, path)
    return path


def reference(model, feeds):
    import onnxruntime as ort
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def random_input(rng, n=8):
    return rng.standard_normal(n).astype(np.float32)
