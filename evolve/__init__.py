"""The search: islands of kernels per task, bred by operators and judged by fitness/."""
