"""The verifier rejects malformed IR with a message naming the op and location."""
import pytest

from tcc.dialects.ir import ParseError, VerifyError, parse_module, verify
from tcc.dialects.init_all import default_context

HEAD = '"builtin.module"() ({\n  "func.func"() ({\n  ^bb0(%arg0: tensor<2x3xf32>, %arg1: tensor<2x3xf32>):\n'
TAIL = ('  }) {function_type = (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>, sym_name = "main_graph"}'
        ' : () -> ()\n}) {onnx.opset_import = {"" = 18 : i64}} : () -> ()\n')


def module(body):
    return HEAD + body + TAIL


GOOD = module('    %0 = "onnx.Add"(%arg0, %arg1) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32> loc("add")\n'
              '    "func.return"(%0) : (tensor<2x3xf32>) -> ()\n')


def check(text):
    ctx = default_context()
    verify(parse_module(text, "t.mlir", ctx), ctx)


def test_good_module_verifies():
    check(GOOD)


@pytest.mark.parametrize("body,message", [
    # wrong operand count for the schema
    ('    %0 = "onnx.Add"(%arg0) : (tensor<2x3xf32>) -> tensor<2x3xf32> loc("add")\n'
     '    "func.return"(%0) : (tensor<2x3xf32>) -> ()\n', "expects 2 operands"),
    # element type not allowed by the schema's type constraint
    ('    %0 = "onnx.Relu"(%arg0) : (tensor<2x3xf32>) -> tensor<2x3x!onnx.String> loc("r")\n'
     '    "func.return"(%arg0) : (tensor<2x3xf32>) -> ()\n', "does not accept"),
    # type variable T must agree between operands and results
    ('    %0 = "onnx.Add"(%arg0, %arg1) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf64> loc("add")\n'
     '    "func.return"(%arg0) : (tensor<2x3xf32>) -> ()\n', "both are T"),
    # missing required attribute
    ('    %0 = "onnx.Cast"(%arg0) : (tensor<2x3xf32>) -> tensor<2x3xf64> loc("cast")\n'
     '    "func.return"(%arg0) : (tensor<2x3xf32>) -> ()\n', "requires attribute 'to'"),
    # attribute of the wrong kind
    ('    %0 = "onnx.Softmax"(%arg0) {axis = "one"} : (tensor<2x3xf32>) -> tensor<2x3xf32> loc("sm")\n'
     '    "func.return"(%0) : (tensor<2x3xf32>) -> ()\n', "attribute 'axis' should be int"),
    # unknown attribute
    ('    %0 = "onnx.Relu"(%arg0) {alpha = 1.0 : f32} : (tensor<2x3xf32>) -> tensor<2x3xf32> loc("r")\n'
     '    "func.return"(%0) : (tensor<2x3xf32>) -> ()\n', "unknown attribute 'alpha'"),
    # return types disagree with the function type
    ('    "func.return"(%arg0, %arg1) : (tensor<2x3xf32>, tensor<2x3xf32>) -> ()\n', "function_type says"),
    # op after the terminator
    ('    "func.return"(%arg0) : (tensor<2x3xf32>) -> ()\n'
     '    %0 = "onnx.Relu"(%arg0) : (tensor<2x3xf32>) -> tensor<2x3xf32>\n', "must end with 'func.return'"),
])
def test_verifier_rejects(body, message):
    with pytest.raises(VerifyError) as e:
        check(module(body))
    assert message in str(e.value)


def test_verifier_error_names_location():
    with pytest.raises(VerifyError) as e:
        check(module('    %0 = "onnx.Add"(%arg0) : (tensor<2x3xf32>) -> tensor<2x3xf32> loc("my_add")\n'
                     '    "func.return"(%0) : (tensor<2x3xf32>) -> ()\n'))
    assert "onnx.Add" in str(e.value) and "my_add" in str(e.value)


def test_dominance_is_checked_after_rewrites():
    ctx = default_context()
    m = parse_module(GOOD, "t.mlir", ctx)
    func = m.functions()[0]
    block = func.regions[0].blocks[0]
    add, ret = block.first, block.last
    block.remove(add)
    block.insert_after(ret, add)  # use before def, op after terminator
    with pytest.raises(VerifyError):
        verify(m, ctx)


@pytest.mark.parametrize("text,message,line", [
    (GOOD.replace('"onnx.Add"(%arg0, %arg1)', '"onnx.Add"(%arg0, %nope)'), "undefined value '%nope'", 4),
    (GOOD.replace('"onnx.Add"', '"onnx.NoSuchOp"'), "unknown operation 'onnx.NoSuchOp'", 4),
    (GOOD.replace("-> tensor<2x3xf32> loc", "-> tensor<2x3xf33> loc"), "unknown element type", 4),
    (GOOD.replace('(%arg0, %arg1) :', '(%arg0, %arg1'), "expected", 4),
    (GOOD.replace('%0 = "onnx.Add"', '%arg0 = "onnx.Add"'), "redefinition", 4),
    (GOOD + "garbage", "expected an operation", 8),
])
def test_parse_errors_have_line_and_column(text, message, line):
    with pytest.raises(ParseError) as e:
        parse_module(text, "t.mlir", default_context())
    assert message in str(e.value)
    assert str(e.value).startswith(f"t.mlir:{line}:")
