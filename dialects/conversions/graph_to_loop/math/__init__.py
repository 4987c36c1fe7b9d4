"""Math: elementwise ops, fused groups, MatMul/Gemm, Einsum, reductions, scans, Det, DFT."""
