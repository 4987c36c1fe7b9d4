"""Helpers the CLI tests share."""
import numpy as np
import onnxruntime as ort

import tcc


def check_artifact(path, model_path, rng):
    """The artifact's outputs on fresh random inputs match onnxruntime's for the model."""
    sess = tcc.load(str(path))
    feeds = {s["name"]: rng.standard_normal(s["shape"]).astype(np.float32) for s in sess.input_signature}
    want = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, w in zip(sess.run(feeds), want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
