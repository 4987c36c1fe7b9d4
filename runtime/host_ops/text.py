"""TfIdfVectorizer: counting n-grams (with skips) of integer or string
tokens against a pool is dictionary look-ups, not arithmetic to compile."""
from __future__ import annotations

import numpy as np

from . import as_strings, kernel


def _pool(node):
    """{n-gram tuple: output column}."""
    counts = list(node.require("ngram_counts"))
    idx = list(node.require("ngram_indexes"))
    pool = node.get("pool_strings") or node.get("pool_int64s")
    if not pool:
        raise node.error("pool_strings or pool_int64s is required")
    table, k = {}, 0
    bounds = counts + [len(pool)]
    for n in range(1, len(counts) + 1):
        lo, hi = bounds[n - 1], bounds[n]
        if lo > hi or (hi - lo) % n:
            raise node.error(f"ngram_counts {counts} do not split a pool of {len(pool)} into {n}-grams")
        for i in range(lo, hi, n):
            if k >= len(idx):
                raise node.error(f"ngram_indexes has {len(idx)} entries, fewer than the pool's n-grams")
            table[tuple(pool[i:i + n])] = idx[k]
            k += 1
    return table


@kernel("onnx.TfIdfVectorizer")
def tfidf_vectorizer(node, inputs):
    x = np.asarray(inputs[0])
    if x.ndim not in (1, 2):
        raise node.error(f"input has shape {list(x.shape)}, expected [C] or [N, C]")
    table = node.cache.get("pool")
    if table is None:
        table = node.cache["pool"] = _pool(node)
    lo, hi = int(node.require("min_gram_length")), int(node.require("max_gram_length"))
    skips = int(node.require("max_skip_count"))
    mode = node.require("mode")
    if mode not in ("TF", "IDF", "TFIDF") or not 1 <= lo <= hi:
        raise node.error(f"mode '{mode}' / gram lengths {lo}..{hi} are not valid")
    width = max(node.get("ngram_indexes")) + 1
    weights = np.asarray(node.get("weights") or [1.0] * width, np.float32)
    rows = x.reshape(1, -1) if x.ndim == 1 else x
    tokens = as_strings(node, rows).tolist() if node.get("pool_strings") else rows.astype(np.int64).tolist()
    out = np.zeros((len(tokens), width), np.float32)
    for r, row in enumerate(tokens):
        for n in range(lo, hi + 1):
            for s in range(skips + 1 if n > 1 else 1):  # a unigram is the same for every skip
                step = s + 1
                for i in range(len(row) - (n - 1) * step):
                    col = table.get(tuple(row[i:i + (n - 1) * step + 1:step]))
                    if col is not None:
                        out[r, col] += 1
    if mode == "IDF":
        out = np.where(out > 0, weights[:width], 0).astype(np.float32)
    elif mode == "TFIDF":
        out = out * weights[:width]
    return [out.reshape(-1) if x.ndim == 1 else out]
