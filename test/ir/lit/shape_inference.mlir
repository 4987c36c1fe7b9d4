// RUN: tcc-opt %s --pass shape-inference
// Unranked results regain static shapes; the function type follows.
// CHECK: "onnx.MatMul"(%arg0, %arg1) : (tensor<2x3xf32>, tensor<3x5xf32>) -> tensor<2x5xf32>
// CHECK: "onnx.Reshape"(%0, %1) : (tensor<2x5xf32>, tensor<2xi64>) -> tensor<5x2xf32>
// CHECK: function_type = (tensor<2x3xf32>, tensor<3x5xf32>) -> tensor<5x2xf32>
"builtin.module"() ({
  "func.func"() ({
  ^bb0(%arg0: tensor<2x3xf32>, %arg1: tensor<3x5xf32>):
    %0 = "onnx.MatMul"(%arg0, %arg1) : (tensor<2x3xf32>, tensor<3x5xf32>) -> tensor<*xf32>
    %1 = "onnx.Constant"() {value = dense<[5, 2]> : tensor<2xi64>} : () -> tensor<2xi64>
    %2 = "onnx.Reshape"(%0, %1) : (tensor<*xf32>, tensor<2xi64>) -> tensor<*xf32>
    "func.return"(%2) : (tensor<*xf32>) -> ()
  }) {function_type = (tensor<2x3xf32>, tensor<3x5xf32>) -> tensor<*xf32>, sym_name = "main_graph"} : () -> ()
}) {onnx.opset_import = {"" = 18 : i64}} : () -> ()
