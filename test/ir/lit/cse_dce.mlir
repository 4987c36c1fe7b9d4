// RUN: tcc-opt %s --pipeline cse,dce
// Two identical Exps merge; the unused Sigmoid goes.
// CHECK: %0 = "onnx.Exp"(%arg0)
// CHECK-NOT: onnx.Exp
// CHECK-NOT: onnx.Sigmoid
// CHECK: "onnx.Add"(%0, %0)
"builtin.module"() ({
  "func.func"() ({
  ^bb0(%arg0: tensor<4xf32>):
    %0 = "onnx.Exp"(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
    %1 = "onnx.Exp"(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
    %2 = "onnx.Sigmoid"(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
    %3 = "onnx.Add"(%0, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    "func.return"(%3) : (tensor<4xf32>) -> ()
  }) {function_type = (tensor<4xf32>) -> tensor<4xf32>, sym_name = "main_graph"} : () -> ()
}) {onnx.opset_import = {"" = 18 : i64}} : () -> ()
