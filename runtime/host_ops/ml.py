"""The ai.onnx.ml operators scikit-learn models convert to (skl2onnx), in
numpy over whole batches: a tree ensemble walks every (row, tree) pair one
level per step (depth steps of array gathers, never a Python loop per
sample or node), linear and SVM models are matrix products."""
from __future__ import annotations

from statistics import NormalDist

import numpy as np

from . import as_strings, kernel

POST = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")


def _floats(node, x):
    x = np.asarray(x)
    if x.dtype.kind not in "fiu":
        raise node.error(f"input has dtype {x.dtype}, expected numbers")
    return x


def _attr_array(node, name, dtype=np.float64):
    """A list attribute, or its `_as_tensor` form (doubles)."""
    v = node.get(name + "_as_tensor")
    if v is None:
        v = node.get(name)
    if v is None:
        return None
    if hasattr(v, "dims"):  # a TensorProto
        from onnx import numpy_helper
        v = numpy_helper.to_array(v)
    return np.asarray(v, dtype=dtype).reshape(-1)


_inv_cdf = np.vectorize(lambda p: NormalDist().inv_cdf(p) if 0 < p < 1 else (np.inf if p >= 1 else -np.inf),
                        otypes=[np.float64])


def post_transform(node, scores, how):
    if isinstance(how, int):
        how = POST[how] if 0 <= how < len(POST) else str(how)
    if how == "NONE":
        return scores
    if how == "LOGISTIC":
        return 1.0 / (1.0 + np.exp(-scores))
    if how in ("SOFTMAX", "SOFTMAX_ZERO"):
        m = scores.max(axis=1, keepdims=True) if scores.shape[1] else scores
        e = np.exp(scores - m)
        if how == "SOFTMAX_ZERO":  # zeros stay zero
            e = np.where(scores == 0, 0, e)
        s = e.sum(axis=1, keepdims=True)
        return np.divide(e, s, out=np.zeros_like(e), where=s != 0)
    if how == "PROBIT":
        return _inv_cdf(scores)  # sqrt(2) erfinv(2p - 1): the standard normal's quantile
    raise node.error(f"post_transform '{how}' is not one of {', '.join(POST)}")


def _labels(node):
    # TreeEnsembleClassifier says classlabels_int64s, LinearClassifier and SVMClassifier classlabels_ints
    strings = node.get("classlabels_strings")
    ints = node.get("classlabels_int64s") if node.get("classlabels_int64s") is not None else node.get("classlabels_ints")
    if strings:
        return np.array(strings, dtype=object)
    if ints is not None and len(ints):
        return np.array(ints, dtype=np.int64)
    raise node.error("class labels (classlabels_strings, classlabels_int64s or classlabels_ints) are required")


def _rows(node, x):
    x = _floats(node, x)
    return x.reshape(1, -1) if x.ndim == 1 else x.reshape(x.shape[0], -1)


# -- tree ensembles ----------------------------------------------------------------------------
MODES = {"BRANCH_LEQ": 0, "BRANCH_LT": 1, "BRANCH_GTE": 2, "BRANCH_GT": 3, "BRANCH_EQ": 4, "BRANCH_NEQ": 5,
         "BRANCH_MEMBER": 6, "LEAF": 7}
LEAF = 7


class Forest:
    """Every tree's nodes in flat arrays, one index space for nodes and
    leaves: a leaf is its own child both ways, so walking all (row, tree)
    pairs a fixed number of levels lands every one on its leaf. `weights`
    is [leaves, targets] (dense: a leaf's contributions per target)."""

    def __init__(self, node, feature, split, mode, true_next, false_next, missing_true, roots, leaf_of,
                 leaf_target, leaf_weight, n_targets, members=None):
        self.feature, self.split, self.mode = feature, split, mode
        self.true_next, self.false_next, self.missing_true, self.roots = true_next, false_next, missing_true, roots
        self.members = members or {}  # node index -> set of values (BRANCH_MEMBER)
        self.is_leaf = mode == LEAF
        if n_targets <= 0:
            raise node.error("n_targets must be positive")
        if len(leaf_target) and (leaf_target.min() < 0 or leaf_target.max() >= n_targets):
            raise node.error(f"a leaf's target id is outside [0, {n_targets})")
        self.weights = np.zeros((len(mode), n_targets))
        np.add.at(self.weights, (leaf_of, leaf_target), leaf_weight)
        inner = np.unique(mode[~self.is_leaf])
        # one comparison for every node (scikit-learn's trees: all BRANCH_LEQ): no per-mode select
        self.single_mode = int(inner[0]) if len(inner) == 1 and inner[0] < 6 else None
        self.depth = self._depth()
        self._kids = None  # leaves() derives its arrays on first use

    def _depth(self):
        idx, d = self.roots.copy(), 0
        while not self.is_leaf[idx].all():
            idx = np.unique(np.concatenate([self.true_next[idx], self.false_next[idx]]))
            d += 1
            if d > len(self.mode):
                raise ValueError("the trees have a cycle")
        return d

    def leaves(self, x):
        """[rows, trees] leaf index each row reaches in each tree."""
        n, width = x.shape
        if self._kids is None:
            # int32 indices and both children side by side (kids[2i] true, kids[2i + 1]
            # false): one gather fewer per level; thresholds in float32 where that is
            # exact (skl2onnx's are float32). A 100-tree RandomForest (depth 10, 50k
            # nodes) on 10k rows: 780 -> 477 ms, onnxruntime 344 ms (2 threads).
            self._kids = np.stack([self.true_next, self.false_next], axis=1).reshape(-1).astype(np.int32)
            self._feature = self.feature.astype(np.int32)
            s32 = self.split.astype(np.float32)
            self._split32 = s32 if np.array_equal(s32.astype(np.float64), self.split) else None
        kids, feature = self._kids, self._feature
        split = self._split32 if x.dtype == np.float32 and self._split32 is not None else self.split
        flat = np.ascontiguousarray(x).reshape(-1)
        base = (np.arange(n, dtype=np.int64) * width)[:, None]
        nan = x.dtype.kind == "f" and bool(np.isnan(flat).any())
        idx = np.broadcast_to(self.roots.astype(np.int32), (n, len(self.roots))).copy()
        m = self.single_mode
        ops = (np.less_equal, np.less, np.greater_equal, np.greater, np.equal, np.not_equal)
        for _ in range(self.depth):
            v = flat[base + feature[idx]]
            t = split[idx]
            if m is None:
                mode = self.mode[idx]
                cond = np.select([mode == k for k in range(6)], [op(v, t) for op in ops], False)
                for k, values in self.members.items():
                    hit = idx == k
                    if hit.any():
                        cond[hit] = np.isin(v[hit], values)
            else:
                cond = ops[m](v, t)
            if nan:
                cond = np.where(np.isnan(v), self.missing_true[idx], cond)
            idx = kids[2 * idx + ~cond]
        return idx

    def scores(self, x, aggregate):
        w = self.weights[self.leaves(x)]  # [rows, trees, targets]
        if aggregate == "SUM":
            return w.sum(axis=1)
        if aggregate == "AVERAGE":
            return w.sum(axis=1) / max(len(self.roots), 1)
        if aggregate == "MIN":
            return w.min(axis=1)
        if aggregate == "MAX":
            return w.max(axis=1)
        raise ValueError(aggregate)


def _old_forest(node, prefix, n_targets):
    """TreeEnsembleClassifier/Regressor's attributes (nodes keyed by tree
    and node id, leaves' weights listed by `prefix`: class_ or target_)."""
    tree = np.asarray(node.require("nodes_treeids"), np.int64)
    nid = np.asarray(node.require("nodes_nodeids"), np.int64)
    n = len(tree)
    modes = node.require("nodes_modes")
    try:
        mode = np.array([MODES[m] for m in modes], np.int64)
    except KeyError as e:
        raise node.error(f"nodes_modes has unknown mode {e.args[0]}") from None
    feature = np.asarray(node.get("nodes_featureids", [0] * n), np.int64)
    split = _attr_array(node, "nodes_values")
    tn = np.asarray(node.get("nodes_truenodeids", [0] * n), np.int64)
    fn = np.asarray(node.get("nodes_falsenodeids", [0] * n), np.int64)
    miss = np.asarray(node.get("nodes_missing_value_tracks_true") or [0] * n, bool)
    if not (len(nid) == len(mode) == len(feature) == len(split) == len(tn) == len(fn) == len(miss) == n):
        raise node.error("the nodes_* attributes have different lengths")
    pos = {(int(t), int(i)): k for k, (t, i) in enumerate(zip(tree, nid))}

    def find(t, i, what):
        try:
            return pos[(int(t), int(i))]
        except KeyError:
            raise node.error(f"{what} names node {int(i)} of tree {int(t)}, which does not exist") from None
    inner = mode != LEAF
    true_next, false_next = np.arange(n), np.arange(n)
    true_next[inner] = [find(t, i, "nodes_truenodeids") for t, i in zip(tree[inner], tn[inner])]
    false_next[inner] = [find(t, i, "nodes_falsenodeids") for t, i in zip(tree[inner], fn[inner])]
    feature = np.where(inner, feature, 0)
    trees = sorted(set(tree.tolist()))
    roots = np.array([find(t, min(nid[tree == t]), "tree") for t in trees], np.int64)
    lt = np.asarray(node.get(prefix + "treeids", []), np.int64)
    ln = np.asarray(node.get(prefix + "nodeids", []), np.int64)
    lid = np.asarray(node.get(prefix + "ids", []), np.int64)
    lw = _attr_array(node, prefix + "weights")
    lw = np.zeros(0) if lw is None else lw
    if not (len(lt) == len(ln) == len(lid) == len(lw)):
        raise node.error(f"the {prefix}* attributes have different lengths")
    leaf_of = np.array([find(t, i, prefix + "nodeids") for t, i in zip(lt, ln)], np.int64)
    return Forest(node, feature, split, mode, true_next, false_next, miss, roots, leaf_of, lid, lw, n_targets)


def _cached(node, build):
    f = node.cache.get("forest")
    if f is None:
        f = node.cache["forest"] = build()
    return f


@kernel("onnx.ml.TreeEnsembleRegressor")
def tree_ensemble_regressor(node, inputs):
    x = _rows(node, inputs[0])
    n_targets = int(node.get("n_targets", 1))
    forest = _cached(node, lambda: _old_forest(node, "target_", n_targets))
    agg = node.get("aggregate_function", "SUM")
    s = forest.scores(x.astype(np.float64) if x.dtype.kind != "f" else x, agg)
    base = _attr_array(node, "base_values")
    if base is not None and len(base):
        s = s + base
    return [post_transform(node, s, node.get("post_transform", "NONE")).astype(np.float32)]


@kernel("onnx.ml.TreeEnsembleClassifier")
def tree_ensemble_classifier(node, inputs):
    x = _rows(node, inputs[0])
    labels = _labels(node)
    forest = _cached(node, lambda: _old_forest(node, "class_", len(labels)))
    s = forest.scores(x.astype(np.float64) if x.dtype.kind != "f" else x, "SUM")
    base = _attr_array(node, "base_values")
    if base is not None and len(base) == s.shape[1]:
        s = s + base
    used = np.unique(np.asarray(node.get("class_ids", []), np.int64))
    how = node.get("post_transform", "NONE")
    if len(labels) == 2 and len(used) == 1:  # binary, scored for one class only
        pos = s[:, used[0]]
        weights = _attr_array(node, "class_weights")
        if how == "NONE" and weights is not None and (weights >= 0).all():
            s = np.stack([1 - pos, pos], axis=1)
            label = np.where(pos > 0.5, 1, 0)
        else:
            s = np.stack([-pos, pos], axis=1)
            label = np.where(pos > 0, 1, 0)
        s = post_transform(node, s, how)
    else:
        label = s.argmax(axis=1)
        s = post_transform(node, s, how)
    return [labels[label], s.astype(np.float32)]


@kernel("onnx.ml.TreeEnsemble")
def tree_ensemble(node, inputs):
    x = _rows(node, inputs[0])
    forest = _cached(node, lambda: _new_forest(node))
    agg = {0: "AVERAGE", 1: "SUM", 2: "MIN", 3: "MAX"}.get(int(node.get("aggregate_function", 1)))
    if agg is None:
        raise node.error(f"aggregate_function {node.get('aggregate_function')} is not 0-3")
    s = forest.scores(x, agg)
    return [post_transform(node, s, int(node.get("post_transform", 0))).astype(np.asarray(inputs[0]).dtype)]


def _tensor(node, name, dtype=None):
    from onnx import numpy_helper
    v = node.get(name)
    if v is None:
        raise node.error(f"attribute '{name}' is required")
    a = numpy_helper.to_array(v).reshape(-1)
    return a.astype(dtype) if dtype is not None else a


def _new_forest(node):
    """TreeEnsemble (ai.onnx.ml 5): nodes 0..n-1 and leaves n..n+L-1."""
    feature = np.asarray(node.require("nodes_featureids"), np.int64)
    n = len(feature)
    split = _tensor(node, "nodes_splits", np.float64)
    mode = _tensor(node, "nodes_modes", np.int64)
    tn = np.asarray(node.require("nodes_truenodeids"), np.int64)
    fn = np.asarray(node.require("nodes_falsenodeids"), np.int64)
    tl = np.asarray(node.get("nodes_trueleafs", [0] * n), bool)
    fl = np.asarray(node.get("nodes_falseleafs", [0] * n), bool)
    miss = np.asarray(node.get("nodes_missing_value_tracks_true") or [0] * n, bool)
    lw = _tensor(node, "leaf_weights", np.float64)
    lt = np.asarray(node.require("leaf_targetids"), np.int64)
    nl = len(lw)
    if not (len(split) == len(mode) == len(tn) == len(fn) == len(tl) == len(fl) == len(miss) == n) or len(lt) != nl:
        raise node.error("the nodes_* (or leaf_*) attributes have different lengths")
    if ((mode < 0) | (mode > 6)).any():
        raise node.error("nodes_modes has a mode outside 0-6")
    true_next = np.where(tl, n + tn, tn)
    false_next = np.where(fl, n + fn, fn)
    total = n + nl
    if ((true_next < 0) | (true_next >= total) | (false_next < 0) | (false_next >= total)).any():
        raise node.error("a node's child index is out of range")
    members = {}
    if (mode == 6).any():
        mv = _tensor(node, "membership_values", np.float64)
        sets = np.split(mv, np.nonzero(np.isnan(mv))[0])
        sets = [s[~np.isnan(s)] for s in sets]
        for k, i in enumerate(np.nonzero(mode == 6)[0]):
            if k >= len(sets):
                raise node.error("membership_values has fewer sets than BRANCH_MEMBER nodes")
            members[int(i)] = sets[k]
    all_mode = np.concatenate([mode, np.full(nl, LEAF)])
    return Forest(node, np.concatenate([feature, np.zeros(nl, np.int64)]), np.concatenate([split, np.zeros(nl)]),
                  all_mode, np.concatenate([true_next, n + np.arange(nl)]),
                  np.concatenate([false_next, n + np.arange(nl)]), np.concatenate([miss, np.zeros(nl, bool)]),
                  np.asarray(node.require("tree_roots"), np.int64), n + np.arange(nl), lt, lw,
                  int(node.get("n_targets", 1)), members)


# -- linear models, scalers, encoders ------------------------------------------------------------
@kernel("onnx.ml.LinearRegressor")
def linear_regressor(node, inputs):
    x = _rows(node, inputs[0]).astype(np.float32)
    t = int(node.get("targets", 1))
    coef = np.asarray(node.get("coefficients", []), np.float32)
    if coef.size != t * x.shape[1]:
        raise node.error(f"{coef.size} coefficients for {t} targets of {x.shape[1]} features")
    y = x @ coef.reshape(t, -1).T
    b = node.get("intercepts")
    if b:
        y = y + np.asarray(b, np.float32)
    return [post_transform(node, y, node.get("post_transform", "NONE")).astype(np.float32)]


@kernel("onnx.ml.LinearClassifier")
def linear_classifier(node, inputs):
    x = _rows(node, inputs[0]).astype(np.float32)
    labels = _labels(node)
    coef = np.asarray(node.require("coefficients"), np.float32)
    if coef.size % x.shape[1]:
        raise node.error(f"{coef.size} coefficients do not divide into rows of {x.shape[1]} features")
    s = x @ coef.reshape(-1, x.shape[1]).T
    b = node.get("intercepts")
    if b:
        s = s + np.asarray(b, np.float32)
    how = node.get("post_transform", "NONE")
    if s.shape[1] == 1 and len(labels) == 2:  # binary: one score, for the second class
        label = np.where(s[:, 0] > 0, 1, 0)
        if how == "NONE":
            s = np.concatenate([-s, s], axis=1)
        else:
            p = post_transform(node, s, how)
            s = np.concatenate([1 - p, p], axis=1) if how == "LOGISTIC" else np.concatenate([-p, p], axis=1)
        return [labels[label], s.astype(np.float32)]
    label = s.argmax(axis=1)
    return [labels[label], post_transform(node, s, how).astype(np.float32)]


@kernel("onnx.ml.Scaler")
def scaler(node, inputs):
    x = _rows(node, inputs[0]).astype(np.float32)
    off = np.asarray(node.get("offset", [0.0]), np.float32)
    sc = np.asarray(node.get("scale", [1.0]), np.float32)
    for name, v in (("offset", off), ("scale", sc)):
        if v.size not in (1, x.shape[1]):
            raise node.error(f"{name} has {v.size} values for {x.shape[1]} features")
    return [((x - off) * sc).reshape(np.asarray(inputs[0]).shape).astype(np.float32)]


@kernel("onnx.ml.Normalizer")
def normalizer(node, inputs):
    x = _rows(node, inputs[0]).astype(np.float32)
    norm = node.get("norm", "MAX")
    if norm == "MAX":
        d = np.abs(x).max(axis=1, keepdims=True)
    elif norm == "L1":
        d = np.abs(x).sum(axis=1, keepdims=True)
    elif norm == "L2":
        d = np.sqrt((x * x).sum(axis=1, keepdims=True))
    else:
        raise node.error(f"norm '{norm}' is not one of MAX, L1, L2")
    return [np.divide(x, d, out=np.zeros_like(x), where=d != 0).reshape(np.asarray(inputs[0]).shape)]


@kernel("onnx.ml.Binarizer")
def binarizer(node, inputs):
    x = _floats(node, inputs[0])
    return [(x > node.get("threshold", 0.0)).astype(x.dtype)]


@kernel("onnx.ml.ArrayFeatureExtractor")
def array_feature_extractor(node, inputs):
    x, idx = np.asarray(inputs[0]), np.asarray(inputs[1]).reshape(-1).astype(np.int64)
    last = x.shape[-1] if x.ndim else 0
    if ((idx < 0) | (idx >= last)).any():
        raise node.error(f"an index in {idx.tolist()} is outside the last axis [0, {last})")
    out = x[..., idx]
    return [out.reshape(1, -1) if x.ndim == 1 else out]


@kernel("onnx.ml.OneHotEncoder")
def one_hot_encoder(node, inputs):
    x = np.asarray(inputs[0])
    cats = node.get("cats_strings") or node.get("cats_int64s")
    if not cats:
        raise node.error("cats_strings or cats_int64s is required")
    index = {c: i for i, c in enumerate(cats)}
    strings = node.get("cats_strings") is not None and len(node.get("cats_strings"))
    flat = as_strings(node, x).reshape(-1) if strings else x.reshape(-1).astype(np.int64)
    pos = np.array([index.get(v if strings else int(v), -1) for v in flat], np.int64)
    if (pos < 0).any() and int(node.get("zeros", 1)) == 0:
        bad = flat[np.argmax(pos < 0)]
        raise node.error(f"value {bad!r} is not a category (and zeros=0)")
    out = np.zeros((flat.size, len(cats)), np.float32)
    hit = pos >= 0
    out[np.nonzero(hit)[0], pos[hit]] = 1
    return [out.reshape(*x.shape, len(cats))]


@kernel("onnx.ml.LabelEncoder")
def label_encoder(node, inputs):
    x = np.asarray(inputs[0])

    def pick(side):
        for suffix, kind in (("strings", object), ("int64s", np.int64), ("floats", np.float32)):
            v = node.get(f"{side}_{suffix}")
            if v is not None and len(v):
                return np.array(v, dtype=kind)
        t = node.get(f"{side}_tensor")
        if t is not None:
            from onnx import numpy_helper
            a = numpy_helper.to_array(t).reshape(-1)
            return a.astype(object) if a.dtype.kind in "OUS" else a
        return None
    keys, values = pick("keys"), pick("values")
    if keys is None or values is None or len(keys) != len(values):
        raise node.error("keys_* and values_* must both be given, of the same length")
    dflt = node.get("default_tensor")
    if dflt is not None:
        from onnx import numpy_helper
        d = numpy_helper.to_array(dflt).reshape(-1)[0]
    elif values.dtype == object:
        d = node.get("default_string", "_Unused")
    elif values.dtype.kind == "f":
        d = node.get("default_float", -0.0)
    else:
        d = node.get("default_int64", -1)
    if x.dtype.kind == "U":
        x = x.astype(object)
    if keys.dtype.kind == "f":  # NaN keys match NaN
        table = {(float("nan") if k != k else float(k)): v for k, v in zip(keys.tolist(), values.tolist())}
        nan = next((v for k, v in zip(keys.tolist(), values.tolist()) if k != k), None)
        out = [nan if (k != k and nan is not None) else table.get(float(k), d) for k in x.reshape(-1).tolist()]
    else:
        table = dict(zip(keys.tolist(), values.tolist()))
        out = [table.get(k, d) for k in x.reshape(-1).tolist()]
    return [np.array(out, dtype=values.dtype).reshape(x.shape)]


# -- SVMs ---------------------------------------------------------------------------------------------
def _kernel_matrix(node, x, sv):
    kind = node.get("kernel_type", "LINEAR")
    p = list(node.get("kernel_params", [])) + [0.0, 0.0, 0.0]
    gamma, coef0, degree = p[0], p[1], p[2]
    if kind == "LINEAR":
        return x @ sv.T
    if kind == "POLY":
        return (gamma * (x @ sv.T) + coef0) ** degree
    if kind == "RBF":
        d = (x * x).sum(1)[:, None] + (sv * sv).sum(1)[None, :] - 2 * x @ sv.T
        return np.exp(-gamma * np.maximum(d, 0))
    if kind == "SIGMOID":
        return np.tanh(gamma * (x @ sv.T) + coef0)
    raise node.error(f"kernel_type '{kind}' is not one of LINEAR, POLY, RBF, SIGMOID")


@kernel("onnx.ml.SVMRegressor")
def svm_regressor(node, inputs):
    x = _rows(node, inputs[0]).astype(np.float64)
    coef = np.asarray(node.get("coefficients", []), np.float64)
    rho = np.asarray(node.get("rho", [0.0]), np.float64)
    n_sv = int(node.get("n_supports", 0))
    if n_sv > 0:
        sv = np.asarray(node.require("support_vectors"), np.float64).reshape(n_sv, -1)
        s = _kernel_matrix(node, x, sv) @ coef[:n_sv] + rho[0]
    else:  # linear: coefficients are the weights
        s = x @ coef + rho[0]
    if int(node.get("one_class", 0)):
        s = np.where(s > 0, 1.0, -1.0)
    s = s.reshape(-1, 1)
    return [post_transform(node, s, node.get("post_transform", "NONE")).astype(np.float32)]


@kernel("onnx.ml.SVMClassifier")
def svm_classifier(node, inputs):
    x = _rows(node, inputs[0]).astype(np.float64)
    labels = _labels(node)
    nc = len(labels)
    coef = np.asarray(node.require("coefficients"), np.float64)
    rho = np.asarray(node.get("rho", []), np.float64)
    counts = np.asarray(node.get("vectors_per_class", []), np.int64)
    how = node.get("post_transform", "NONE")
    if len(counts) == 0:  # linear SVM: one weight row per class
        s = x @ coef.reshape(nc if coef.size % nc == 0 and coef.size // nc == x.shape[1] else -1, x.shape[1]).T
        s = s + rho[:s.shape[1]] if len(rho) else s
        if s.shape[1] == 1 and nc == 2:
            label = np.where(s[:, 0] > 0, 1, 0)
            s = np.concatenate([-s, s], axis=1)
        else:
            label = s.argmax(axis=1)
        return [labels[label], post_transform(node, s, how).astype(np.float32)]
    sv = np.asarray(node.require("support_vectors"), np.float64).reshape(int(counts.sum()), -1)
    k = _kernel_matrix(node, x, sv)  # [rows, vectors]
    starts = np.concatenate([[0], np.cumsum(counts)])
    coef = coef.reshape(nc - 1, -1)
    votes = np.zeros((x.shape[0], nc))
    dec = []
    pair = 0
    for i in range(nc):  # one-vs-one, libsvm's order
        for j in range(i + 1, nc):
            si, sj = slice(starts[i], starts[i + 1]), slice(starts[j], starts[j + 1])
            d = k[:, si] @ coef[j - 1, si] + k[:, sj] @ coef[i, sj] + rho[pair]
            dec.append(d)
            votes[:, i] += d > 0
            votes[:, j] += d <= 0
            pair += 1
    dec = np.stack(dec, axis=1)
    probA, probB = node.get("prob_a"), node.get("prob_b")
    if probA and probB:
        raise node.error("probability estimates (prob_a, prob_b) are not supported here")
    if nc == 2:
        label = np.where(dec[:, 0] > 0, 0, 1)
        s = np.concatenate([-dec, dec], axis=1) if how == "NONE" else dec
    else:
        label = votes.argmax(axis=1)
        s = dec
    return [labels[label], post_transform(node, s, how).astype(np.float32)]


@kernel("onnx.ml.ZipMap")
def zip_map(node, inputs):
    """A list of {label: probability} dicts, one per row, at the graph
    boundary (sequences of maps are not IR types: see the README)."""
    x = np.asarray(inputs[0], np.float32)
    labels = node.get("classlabels_strings") or node.get("classlabels_int64s")
    if not labels or x.ndim != 2 or x.shape[1] != len(labels):
        raise node.error(f"input of shape {list(x.shape)} does not match {len(labels or [])} class labels")
    return [[dict(zip(labels, row.tolist())) for row in x]]
