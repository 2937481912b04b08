"""Device arrays for the CUDA backend: CuPy arrays on a real GPU, handed to kernels as
Numba device-array views; plain NumPy arrays in Numba's CUDA simulator
(NUMBA_ENABLE_CUDASIM=1, CI has no GPU), where `xp` is NumPy and views are the arrays."""
from __future__ import annotations

import numpy as np
from numba import config as numba_config
from numba import cuda

SIMULATOR = bool(numba_config.ENABLE_CUDASIM)


def array_module():
    if SIMULATOR:
        return np
    import cupy

    return cupy


def on_device(a):
    """A Numba device-array view of a CuPy array (no copy): kernels take these, with far less
    per-launch work than objects exporting __cuda_array_interface__."""
    return a if SIMULATOR else cuda.as_cuda_array(a)


def device_views(tree):
    """A tuple tree of xp arrays (a Workspace, ...) with every array as its Numba device view
    (None stays None)."""
    if tree is None or isinstance(tree, np.generic):  # (a group's scalars stay as they are)
        return tree
    if isinstance(tree, tuple):
        parts = [device_views(x) for x in tree]
        return type(tree)(*parts) if hasattr(tree, "_fields") else tuple(parts)
    return on_device(tree)


def to_host(a) -> np.ndarray:
    if hasattr(a, "copy_to_host"):  # a Numba device array
        return a.copy_to_host()
    return a.get() if hasattr(a, "get") else np.asarray(a)
