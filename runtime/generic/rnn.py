"""LSTM and GRU with ONNX's default activations (sigmoid, tanh): the input
projection of every time step is one GEMM, then one small product with R
per step and direction. Other activations, clip, input_forget, and
sequence_lens shorter than the sequence run the reference's op."""
from __future__ import annotations

import numpy as np

from .toolkit import kernel

try:
    from scipy.special import expit as _sigmoid
except ImportError:  # pragma: no cover - depends on the environment
    def _sigmoid(x):
        e = np.exp(-np.abs(x))
        return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)

_DEFAULT = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"]}


def _plain(node, short):
    acts = node.get("activations")
    n_dir = 2 if node.get("direction", "forward") == "bidirectional" else 1
    return (acts is None or list(acts) == _DEFAULT[short] * n_dir) and node.get("clip") is None and \
        not node.get("input_forget", 0) and node.get("activation_alpha") is None


def _recurrent(short, gates, step):
    def make(node):
        if not _plain(node, short):
            return None
        hidden, layout = node.get("hidden_size"), node.get("layout", 0)
        direction = node.get("direction", "forward")
        dirs = ["forward", "reverse"] if direction == "bidirectional" else [direction]
        n_state = 2 if short == "LSTM" else 1

        def run(x, w, r, b=None, lens=None, *init):
            if layout:
                x = np.swapaxes(x, 0, 1)
            seq, batch = x.shape[0], x.shape[1]
            if lens is not None and np.any(lens != seq):
                return node.reference(x if not layout else np.swapaxes(x, 0, 1), w, r, b, lens, *init)
            states = [None if k >= len(init) or init[k] is None else (np.swapaxes(init[k], 0, 1) if layout else init[k])
                      for k in range(n_state)]
            peep = init[2] if short == "LSTM" and len(init) > 2 else None
            y = np.empty((seq, len(dirs), batch, hidden), x.dtype)
            finals = [np.empty((len(dirs), batch, hidden), x.dtype) for _ in range(n_state)]
            for d, name in enumerate(dirs):
                wb = b[d, :gates * hidden] if b is not None else 0
                rb = b[d, gates * hidden:] if b is not None else np.zeros(gates * hidden, x.dtype)
                proj = (x.reshape(seq * batch, -1) @ w[d].T + wb).reshape(seq, batch, gates * hidden)
                st = [np.zeros((batch, hidden), x.dtype) if s is None else s[d] for s in states]
                rt = r[d].T
                for t in (range(seq) if name == "forward" else range(seq - 1, -1, -1)):
                    st = step(proj[t], st, rt, rb, hidden, node, None if peep is None else peep[d])
                    y[t, d] = st[0]
                for k in range(n_state):
                    finals[k][d] = st[k]
            if layout:
                y = np.transpose(y, (2, 0, 1, 3))
                finals = [np.swapaxes(f, 0, 1) for f in finals]
            outs = (y,) + tuple(finals)
            return outs[:node.n_results] if node.n_results > 1 else outs[0]
        return run
    return make


def _lstm_step(p, state, rt, rb, n, node, peep):
    h, c = state
    g = p + h @ rt + rb  # gates i, o, f, c
    i, o, f, cc = g[:, :n], g[:, n:2 * n], g[:, 2 * n:3 * n], g[:, 3 * n:]
    if peep is not None:
        i = i + peep[:n] * c
        f = f + peep[2 * n:] * c
    c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(cc)
    if peep is not None:
        o = o + peep[n:2 * n] * c
    return [_sigmoid(o) * np.tanh(c), c]


def _gru_step(p, state, rt, rb, n, node, peep):
    (h,) = state
    hr = h @ rt[:, :2 * n] + rb[:2 * n]
    z = _sigmoid(p[:, :n] + hr[:, :n])
    r = _sigmoid(p[:, n:2 * n] + hr[:, n:])
    if node.get("linear_before_reset", 0):
        hh = np.tanh(p[:, 2 * n:] + r * (h @ rt[:, 2 * n:] + rb[2 * n:]))
    else:
        hh = np.tanh(p[:, 2 * n:] + (r * h) @ rt[:, 2 * n:] + rb[2 * n:])
    return [(1 - z) * hh + z * h]


kernel("LSTM")(_recurrent("LSTM", 4, _lstm_step))
kernel("GRU")(_recurrent("GRU", 3, _gru_step))
