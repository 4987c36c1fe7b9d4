"""The host's lowerings, family by family: the one explicit list (as
onnx-mlir's populate...Pattern calls)."""
from __future__ import annotations

from .control_flow import scan_loop
from .math import cumulative, det, dft, einsum, elementwise, fused, matmul, reduce
from .nn import (attention, col2im, conv, conv_transpose, deform_conv, loss, max_unpool, pool, rms_lp_lrn, roi_align, rotary,
                 softmax_normalization)
from .quantization import quantize, quantized_linear
from .registry import lowerings_in
from .rnn import recurrent
from .random import random_ops
from .training import optimizers
from .tensor import (affine_grid, center_crop_pad, data_movement, gridsample, onehot, resize, scatter,
                     tensor_scatter, upsample)

FAMILIES = {
    "math": (elementwise, fused, matmul, einsum, reduce, cumulative, det, dft),
    "nn": (conv, conv_transpose, pool, max_unpool, col2im, softmax_normalization, rms_lp_lrn, attention, loss,
           rotary, roi_align, deform_conv),
    "tensor": (data_movement, resize, upsample, scatter, tensor_scatter, gridsample, affine_grid, onehot,
               center_crop_pad),
    "rnn": (recurrent,),
    "quantization": (quantize, quantized_linear),
    "control_flow": (scan_loop,),
    "training": (optimizers,),
    "random": (random_ops,),
}


def populate_host_lowerings(table: dict) -> dict:
    """Adds every in-tree host lowering to `table` (op name -> fn)."""
    for modules in FAMILIES.values():
        for m in modules:
            table.update(lowerings_in(m))
    return table
