"""Dialect conversions: graph-to-loop (host), loop-to-native."""
