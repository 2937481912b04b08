"""Device arrays for the CUDA backend: CuPy arrays on a real GPU, handed to kernels as
Numba device-array views; plain NumPy arrays in Numba's CUDA simulator
(NUMBA_ENABLE_CUDASIM=1, CI has no GPU), where `xp` is NumPy and views are the arrays."""
from __future__ import annotations

import numpy as np
from numba import config as numba_config
from numba import cuda

SIMULATOR = bool(numba_config.ENABLE_CUDASIM)


class SimulatedDeviceArray(np.ndarray):
    """(Simulator) A NumPy array that stands for device memory: what the simulator's `xp`
    makes, so that on_device refuses a host array there as a real GPU does."""


class _SimulatedXp:
    """(Simulator) NumPy whose functions return SimulatedDeviceArray where NumPy returns an
    ndarray."""

    def __getattr__(self, name):
        f = getattr(np, name)
        if not callable(f) or isinstance(f, type):
            return f

        def made_on_device(*args, **kwargs):
            out = f(*args, **kwargs)
            return out.view(SimulatedDeviceArray) if type(out) is np.ndarray else out

        setattr(self, name, made_on_device)
        return made_on_device


_SIMULATED_XP = _SimulatedXp()


def array_module():
    if SIMULATOR:
        return _SIMULATED_XP
    import cupy

    return cupy


def on_device(a):
    """A Numba device-array view of a CuPy array (no copy): kernels take these, with far less
    per-launch work than objects exporting __cuda_array_interface__."""
    if not SIMULATOR:
        return cuda.as_cuda_array(a)
    if isinstance(a, np.ndarray) and not isinstance(a, SimulatedDeviceArray):
        raise AssertionError(f"a host array (NumPy, {a.dtype} {a.shape}) where device memory belongs: "
                             "copy it to the device (the backend's xp.asarray) first")  # (a bug: a GPU fails)
    return a


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
    """A host copy of a device array, never a view of it (the simulator's arrays are host
    memory: a view of a workspace reused by the next group of a batch was overwritten
    under the results read from it, which a GPU's copy never is)."""
    if hasattr(a, "copy_to_host"):  # a Numba device array
        return a.copy_to_host()
    return a.get() if hasattr(a, "get") else np.array(a)


class SearchStream:
    """A search's own CUDA stream, made on first use.  run(search, cuda_graphs) calls
    search(stream, capture) after the work queued on the default stream (the arrays the
    search reads), waits for it and adds its GPU time (CUDA events, first kernel to last)
    to `seconds`; `capture` turns a function that launches kernels into a replayable CUDA
    graph (None without cuda_graphs).  The simulator calls search(0, capture) with a
    capture that keeps the launches themselves, to be run again on the same arrays as a
    replayed graph would (cuda_graphs is off there unless a test turns it on)."""

    def __init__(self):
        self.stream = None  # the CuPy stream
        self.seconds = 0.0

    def run(self, search, cuda_graphs: bool):
        if SIMULATOR:
            return search(0, (lambda launches: launches) if cuda_graphs else None)
        xp = array_module()
        if self.stream is None:
            self.stream = xp.cuda.Stream(non_blocking=True)
        s = self.stream
        s.wait_event(xp.cuda.Stream.null.record())
        start = s.record()

        def capture(launches):
            nonlocal start
            s.begin_capture()
            try:
                launches()
            finally:
                graph = s.end_capture()
            start = s.record()  # the GPU idled while the host captured
            return lambda: graph.launch(s)

        result = search(cuda.external_stream(s.ptr), capture if cuda_graphs else None)
        end = s.record()
        end.synchronize()
        self.seconds += xp.cuda.get_elapsed_time(start, end) / 1000
        return result
