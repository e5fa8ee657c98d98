"""Small helpers shared by every part of xpu-diag; no torch, no grpc."""
