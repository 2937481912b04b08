"""The search's kernels: the CPU search (`cpu`), the CUDA kernels and their launcher
(`cuda`), the per-arc and per-token logic both share (`common`, `select`), the argument
groups they take (`groups`) and the numbers they agree on (`constants`).  Kernels only;
the runtime (wfst) orchestrates.  docs/design.md tells how they fit together.
"""
