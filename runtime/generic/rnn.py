"""LSTM and GRU with ONNX's default activations (sigmoid, tanh). float32
with the cpu accelerator's library built: its tcc_cpu_rnn (kernels/rnn.c,
the kernel the compiled path runs; it takes T and the batch at run time),
where the final cell state Y_c is not read (the kernel writes Y; Y_h is
Y's last step per direction). Else numpy: the input projection of every
time step is one GEMM, then one small product with R per step and
direction. Other activations, clip, input_forget, and sequence_lens shorter
than the sequence run the reference's op. Measured (rnn_tagger_dynamo,
generic warm, the best of 20 per step, a loaded 2-core Zen 2): its LSTM
step 496 -> 63 us, its GRU 316 -> 43 us, the whole call 0.89 -> 0.15 ms
(rnn_tagger_torchscript 0.44 -> 0.16)."""
from __future__ import annotations

import ctypes

import numpy as np

from .toolkit import RnnParams, c_kernels, f32, kernel, ptr

from .elementwise import sigmoid as _sigmoid

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
        native = _native(node, short, gates, hidden, layout, dirs)

        def run(x, w, r, b=None, lens=None, *init):
            if native is not None and x.dtype == np.float32 and x.ndim == 3 and x.shape[1 - layout] and \
                    x.shape[layout] and (lens is None or np.all(lens == x.shape[layout])):
                return native(x, w, r, b, *init)
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
        run.tape_native = native  # tape.py's record: its constant weights and parameters
        return run
    return make


def _native(node, short, gates, hidden, layout, dirs):
    """fn(x, w, r, b, *init) through tcc_cpu_rnn, or None where the library
    is not built or Y_c is read. The weights are transposed and the biases
    folded as the cpu accelerator's lowering does (once, where they are
    constants, as the exporters write them)."""
    lib = c_kernels()
    lstm = short == "LSTM"
    if lib is None or (lstm and len(node.used) > 2 and node.used[2]):
        return None
    lbr = not lstm and bool(node.get("linear_before_reset", 0))
    nd = len(dirs)

    def weights(w, r, b):
        wt = f32(np.transpose(w, (0, 2, 1)))
        rt = f32(np.transpose(r, (0, 2, 1)))
        gh = gates * hidden
        if b is None:
            return wt, rt, np.zeros((nd, gh), np.float32), None
        b = np.asarray(b, np.float64)
        rb = b[:, gh:].copy()
        rbh = None
        if lbr:  # Rb_h sits inside r * (H Rh^T + Rb_h): not foldable
            rbh = f32(rb[:, 2 * hidden:])
            rb[:, 2 * hidden:] = 0.0
        return wt, rt, f32(b[:, :gh] + rb), rbh
    c, given = node.consts + [None] * 4, node.present + [False] * 4
    fixed = weights(*c[1:4]) if c[1] is not None and c[2] is not None and (c[3] is not None or not given[3]) \
        else None

    def run(x, w, r, b, h0=None, c0=None, p=None):
        wt, rt, bias, rbh = fixed if fixed is not None else weights(w, r, b)
        x = f32(x)
        seq, batch = (x.shape[1], x.shape[0]) if layout else (x.shape[0], x.shape[1])
        prm = RnnParams(0 if lstm else 1, nd, int(dirs == ["reverse"]), layout, int(lbr), 0, 0, 0.0,
                        seq, batch, x.shape[2], hidden)
        scratch = np.empty(max(int(lib.tcc_cpu_rnn_scratch(ctypes.byref(prm))), 1), np.float32)
        y = np.empty((batch, seq, nd, hidden) if layout else (seq, nd, batch, hidden), np.float32)
        h0, c0, p = (None if v is None else f32(v) for v in (h0, c0 if lstm else None, p if lstm else None))
        lib.tcc_cpu_rnn(ctypes.byref(prm), ptr(x), ptr(wt), ptr(rt), ptr(bias), None if rbh is None else ptr(rbh),
                        None if p is None else ptr(p), None, None if h0 is None else ptr(h0),
                        None if c0 is None else ptr(c0), ptr(y), ptr(scratch))
        if node.n_results == 1:
            return y
        # Y_h: each direction's last step (time T-1 forward, 0 in reverse)
        last = [0 if name == "reverse" else seq - 1 for name in dirs]
        if layout:
            yh = np.stack([y[:, t, d] for d, t in enumerate(last)], axis=1)
        else:
            yh = np.stack([y[t, d] for d, t in enumerate(last)], axis=0)
        return (y, yh, None)[:node.n_results]
    run.fixed, run.lstm, run.lbr, run.nd, run.dirs, run.layout, run.hidden = fixed, lstm, lbr, nd, dirs, layout, hidden
    return run


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
