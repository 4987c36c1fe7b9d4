"""IR text errors name the culprit: the token quoted, at file:line:col
(invalid UTF-8 and verifier errors included); MLIR's pretty form, as mlir-opt
prints it, parses to the same IR as the generic form (which stays the printed
form)."""
import subprocess

import pytest

from tcc.dialects.init_all import default_context
from tcc.dialects.ir import parse_module, print_module
from tcc.dialects.ir.errors import ParseError

from ..conftest import assert_one_line_error, run_tool, tool
from .models import relu_model, save

GOOD = '''"builtin.module"() ({
  "func.func"() ({
  ^bb0(%arg0: tensor<8xf32>):
    %0 = "onnx.Relu"(%arg0) : (tensor<8xf32>) -> tensor<8xf32>
    "func.return"(%0) : (tensor<8xf32>) -> ()
  }) {function_type = (tensor<8xf32>) -> tensor<8xf32>, sym_name = "main_graph"} : () -> ()
}) : () -> ()
'''


def _line_col(text, index):
    return text.count("\n", 0, index) + 1, index - (text.rfind("\n", 0, index) + 1) + 1


# (what to replace, with what, the token the error must quote, what marks the error's position)
CASES = [
    ('"onnx.Relu"(%arg0)', '"onnx.Relu"(%nope)', "'%nope'", "%nope"),
    ('%0 = "onnx.Relu"', '%arg0 = "onnx.Relu"', "'%arg0'", '%arg0 = "onnx.Relu"'),
    ("^bb0(%arg0: tensor<8xf32>)", "^bb0(%arg0: tensor<2xx3xf32>)", "'tensor<2xx3xf32>'", "tensor<2xx3xf32>"),
    ("^bb0(%arg0: tensor<8xf32>)", "^bb0(%arg0: tensor<8x?f32>)", "'tensor<8x?f32>'", "tensor<8x?f32>"),
    ('"onnx.Relu"(%arg0)', '"onnx.Relux"(%arg0)', "'onnx.Relux'", '"onnx.Relux"'),
    ('"onnx.Relu"(%arg0)', '"nodialect.Relu"(%arg0)', "unknown dialect 'nodialect'", '"nodialect.Relu"'),
]


@pytest.mark.parametrize("old,new,token,mark", CASES)
def test_parse_error_quotes_the_token_at_its_position(tmp_path, old, new, token, mark):
    text = GOOD.replace(old, new)
    assert text != GOOD
    path = tmp_path / "bad.mlir"
    path.write_text(text)
    line, col = _line_col(text, text.index(mark))
    assert_one_line_error(run_tool("tcc-opt", path), f"bad.mlir:{line}:{col}:", token)


def test_invalid_utf8_carries_file_line_col(tmp_path):
    data = GOOD.encode().replace(b'"onnx.Relu"', b'"onnx.Rel\xc3u"')
    path = tmp_path / "bad.mlir"
    path.write_bytes(data)
    i = data.index(b"\xc3")
    line, col = data.count(b"\n", 0, i) + 1, i - data.rfind(b"\n", 0, i)
    assert_one_line_error(run_tool("tcc-opt", path), f"bad.mlir:{line}:{col}:", "invalid UTF-8")


def test_invalid_utf8_on_stdin():
    data = b"\xff" + GOOD.encode()
    r = subprocess.run([tool("tcc-opt"), "-"], input=data, capture_output=True, timeout=120)
    r.stderr = r.stderr.decode()
    r.stdout = r.stdout.decode()
    assert_one_line_error(r, "<stdin>:1:1:", "invalid UTF-8")


def test_verifier_error_carries_file_line_col(tmp_path):
    text = GOOD.replace('"onnx.Relu"(%arg0) : (tensor<8xf32>)',
                        '"onnx.Relu"(%arg0, %arg0) : (tensor<8xf32>, tensor<8xf32>)')
    path = tmp_path / "bad.mlir"
    path.write_text(text)
    line, col = _line_col(text, text.index('"onnx.Relu"'))
    assert_one_line_error(run_tool("tcc-opt", path), f"bad.mlir:{line}:{col}:", "'onnx.Relu'", "operands")


PRETTY = '''module {
  func.func @main_graph(%arg0: tensor<8xf32>) -> tensor<8xf32> {
    %0 = "onnx.Relu"(%arg0) : (tensor<8xf32>) -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}
'''


def test_pretty_form_parses_to_the_generic_form():
    ctx = default_context()
    want = print_module(parse_module(GOOD, "<generic>", ctx))
    assert print_module(parse_module(PRETTY, "<pretty>", ctx)) == want
    one_line = ('func.func @main_graph(%arg0: tensor<8xf32>) -> tensor<8xf32> { %0 = "onnx.Relu"(%arg0) : '
                '(tensor<8xf32>) -> tensor<8xf32> return %0 : tensor<8xf32> }')
    assert print_module(parse_module(one_line, "<pretty>", ctx)) == want


def test_pretty_form_with_attributes_matches_what_tcc_imports(tmp_path):
    # the importer's own output (arg/res attrs, module attrs) written back in
    # the pretty form parses to the very same IR
    r = run_tool("tcc", "--emit=onnx-ir", save(relu_model(), tmp_path / "m.onnx"))
    assert r.returncode == 0, r.stderr
    pretty = '''module attributes {onnx.graph_name = "relu", onnx.ir_version = 14 : i64, onnx.opset_import = {"" = 21 : i64}} {
  func.func @main_graph(%arg0: tensor<8xf32> {onnx.name = "x"}) -> (tensor<8xf32> {onnx.name = "y"}) {
    %0 = "onnx.Relu"(%arg0) : (tensor<8xf32>) -> tensor<8xf32> loc("y")
    func.return %0 : tensor<8xf32> loc("return")
  }
}
'''
    ctx = default_context()
    assert print_module(parse_module(pretty, "<pretty>", ctx)) == print_module(parse_module(r.stdout, "<g>", ctx))
    path = tmp_path / "p.mlir"
    path.write_text(pretty)
    r2 = run_tool("tcc-opt", path, "--pass", "canonicalize")
    assert r2.returncode == 0, r2.stderr
    assert r2.stdout.startswith('"builtin.module"()')  # the generic form stays the printed default


@pytest.mark.parametrize("text,needle", [
    ("func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> { return %b : tensor<2xf32> }", "'%b'"),
    ("func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> { return %a : tensor<3xf32> }", "listed type"),
    ("func.func @f(%a: tensor<2xf32>, %a: tensor<2xf32>) { return }", "redefinition of SSA value '%a'"),
    ("frobnicate @f", "found 'frobnicate"),
])
def test_pretty_form_errors(text, needle):
    with pytest.raises(ParseError, match="<t>:1:") as e:
        parse_module(text, "<t>", default_context())
    assert needle in str(e.value)
