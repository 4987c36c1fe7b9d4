// RUN: tcc-opt %s --pass canonicalize
// Transpose pairs cancel, Identity folds away, Shape of a static tensor is a constant.
// CHECK: "func.func"
// CHECK-NOT: onnx.Transpose
// CHECK-NOT: onnx.Identity
// CHECK: "onnx.Constant"() {value = dense<[2, 3]> : tensor<2xi64>}
// CHECK: "onnx.Relu"(%arg0)
// CHECK-NEXT: "func.return"
"builtin.module"() ({
  "func.func"() ({
  ^bb0(%arg0: tensor<2x3xf32>):
    %0 = "onnx.Transpose"(%arg0) {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
    %1 = "onnx.Transpose"(%0) {perm = array<i64: 1, 0>} : (tensor<3x2xf32>) -> tensor<2x3xf32>
    %2 = "onnx.Identity"(%1) : (tensor<2x3xf32>) -> tensor<2x3xf32>
    %3 = "onnx.Shape"(%2) : (tensor<2x3xf32>) -> tensor<2xi64>
    %4 = "onnx.Relu"(%2) : (tensor<2x3xf32>) -> tensor<2x3xf32>
    "func.return"(%4, %3) : (tensor<2x3xf32>, tensor<2xi64>) -> ()
  }) {function_type = (tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2xi64>), sym_name = "main_graph"} : () -> ()
}) {onnx.opset_import = {"" = 18 : i64}} : () -> ()
