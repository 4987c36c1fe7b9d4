// RUN: tcc-opt %s --pipeline fold-constants,dce
// (2 + 3) * 4 is evaluated at compile time.
// CHECK: "onnx.Constant"() {value = dense<[20.0, 24.0]> : tensor<2xf32>}
// CHECK-NOT: onnx.Mul
// CHECK: "onnx.Add"(%arg0, %0)
"builtin.module"() ({
  "func.func"() ({
  ^bb0(%arg0: tensor<2xf32>):
    %0 = "onnx.Constant"() {value = dense<[2.0, 3.0]> : tensor<2xf32>} : () -> tensor<2xf32>
    %1 = "onnx.Constant"() {value = dense<[3.0, 3.0]> : tensor<2xf32>} : () -> tensor<2xf32>
    %2 = "onnx.Add"(%0, %1) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    %3 = "onnx.Constant"() {value = dense<4.0> : tensor<f32>} : () -> tensor<f32>
    %4 = "onnx.Mul"(%2, %3) : (tensor<2xf32>, tensor<f32>) -> tensor<2xf32>
    %5 = "onnx.Add"(%arg0, %4) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    "func.return"(%5) : (tensor<2xf32>) -> ()
  }) {function_type = (tensor<2xf32>) -> tensor<2xf32>, sym_name = "main_graph"} : () -> ()
}) {onnx.opset_import = {"" = 18 : i64}} : () -> ()
