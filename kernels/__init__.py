"""Decoding kernels (Numba-CUDA / CuPy) and their CPU twins.  Kernels only; no orchestration.

Empty until the decoder lands; kept so that ``wfst.kernels`` is part of the package layout.
"""
