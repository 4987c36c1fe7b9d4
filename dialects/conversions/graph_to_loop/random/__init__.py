"""Lowerings of the random ops (Random*, Bernoulli, training-mode Dropout)."""
