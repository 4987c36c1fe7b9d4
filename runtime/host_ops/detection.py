"""NonMaxSuppression: the greedy per-class selection runs in the runtime
library (runtime/native/nms.c, float arithmetic as onnxruntime's), called
once for every batch and class; its output length depends on the values,
so it runs between two compiled stages (runtime/staged.py)."""
from __future__ import annotations

import ctypes

import numpy as np

from . import kernel

_fn = None


def _nms():
    global _fn
    if _fn is None:
        from tcc.runtime import native
        lib = ctypes.CDLL(native.load())
        f = lib.tcc_nms_f32
        i64, p = ctypes.c_int64, ctypes.c_void_p
        f.argtypes = [p, p, i64, i64, i64, i64, ctypes.c_float, ctypes.c_int, ctypes.c_float, ctypes.c_int, p]
        f.restype = i64
        _fn = f
    return _fn


def _ptr(a):
    """The address of an array's data: ctypes.c_char.from_buffer is ~3x
    cheaper than a.ctypes.data (3 of them were a third of this kernel's
    time), but refuses read-only arrays."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(a))
    except (TypeError, ValueError):
        return a.ctypes.data


def _scalar(node, x, what, dtype):
    """An optional scalar input (shape [] or [1]) as a Python number, or None when absent or empty."""
    if x is None or x.size == 0:
        return None
    if x.size != 1:
        raise node.error(f"{what} has shape {list(x.shape)}, expected a scalar")
    return dtype(x.reshape(-1)[0])


@kernel("onnx.NonMaxSuppression")
def non_max_suppression(node, inputs):
    boxes, scores = (np.asarray(v) for v in inputs[:2])
    extra = list(inputs[2:]) + [None] * (5 - len(inputs))
    if boxes.ndim != 3 or boxes.shape[2] != 4:
        raise node.error(f"boxes has shape {list(boxes.shape)}, expected [batches, boxes, 4]")
    if scores.ndim != 3 or scores.shape[0] != boxes.shape[0] or scores.shape[2] != boxes.shape[1]:
        raise node.error(f"scores has shape {list(scores.shape)}, expected [{boxes.shape[0]}, classes, "
                         f"{boxes.shape[1]}] for boxes {list(boxes.shape)}")
    center = int(node.get("center_point_box", 0))
    if center not in (0, 1):
        raise node.error(f"center_point_box is {center}, expected 0 or 1")
    max_out = _scalar(node, extra[0], "max_output_boxes_per_class", int) or 0
    iou = _scalar(node, extra[1], "iou_threshold", float)
    score_thr = _scalar(node, extra[2], "score_threshold", float)
    nb, n = boxes.shape[:2]
    nc = scores.shape[1]
    boxes = np.ascontiguousarray(boxes, np.float32)
    scores = np.ascontiguousarray(scores, np.float32)
    out = np.empty((nb * nc * max(0, min(max_out, n)), 3), np.int64)
    count = _nms()(_ptr(boxes), _ptr(scores), nb, nc, n, max_out, 0.0 if iou is None else iou,
                   score_thr is not None, 0.0 if score_thr is None else score_thr, center, _ptr(out))
    if count < 0:
        raise MemoryError(f"node '{node.name}' (NonMaxSuppression): out of memory")
    return [out[:count]]
