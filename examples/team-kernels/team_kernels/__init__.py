"""A team's own Triton kernels (KernelWatch's worked example)."""
