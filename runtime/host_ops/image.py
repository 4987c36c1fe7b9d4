"""ImageDecoder through Pillow (the optional extra `tcc[image]`): decoding
is a library's job (JPEG, PNG, BMP, PNM, TIFF, WebP, JPEG 2000), not code
to compile."""
from __future__ import annotations

import io

import numpy as np

from . import kernel


@kernel("onnx.ImageDecoder")
def image_decoder(node, inputs):
    try:
        from PIL import Image
    except ImportError:
        raise node.error("decoding images needs Pillow: pip install 'tcc[image]'") from None
    data = np.asarray(inputs[0])
    if data.dtype != np.uint8 or data.ndim != 1:
        raise node.error(f"encoded_stream has dtype {data.dtype} and shape {list(data.shape)}, expected 1-D uint8")
    fmt = node.get("pixel_format", "RGB")
    if fmt not in ("RGB", "BGR", "Grayscale"):
        raise node.error(f"pixel_format '{fmt}' is not one of RGB, BGR, Grayscale")
    try:
        img = Image.open(io.BytesIO(data.tobytes()))
        img.load()
    except Exception as e:  # Pillow raises several kinds for undecodable bytes
        raise node.error(f"cannot decode the image ({type(e).__name__}: {e})") from None
    if fmt == "Grayscale":
        return [np.asarray(img.convert("L"), np.uint8)[:, :, None]]
    rgb = np.asarray(img.convert("RGB"), np.uint8)
    return [np.ascontiguousarray(rgb[:, :, ::-1]) if fmt == "BGR" else rgb]
