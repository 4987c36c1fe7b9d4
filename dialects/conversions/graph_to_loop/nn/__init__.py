"""NN: convolutions, pooling, normalizations, attention, losses, rotary embedding."""
