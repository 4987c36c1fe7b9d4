"""Tensor: data movement (views, Transpose, Concat, Slice, Gather...), Resize, scatters, sampling."""
