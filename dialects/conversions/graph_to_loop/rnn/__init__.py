"""RNN: LSTM, GRU, RNN."""
