"""What a benchmark ran on: the CPU, cores and GPU (:func:`machine`), with memory, platform,
load and package versions for a results folder (:func:`machine_info`).

The one place every benchmark and experiment asks; ``wfst-bench``, the comparison
experiments and the ``recipes/bench_*.py`` scripts print and store what it says.
"""
from __future__ import annotations

import datetime
import os
import platform

from wfst.config import usable_cores


def gpu_name() -> str | None:
    """The name of the CUDA GPU the decoder would use, or None (no GPU, no driver, no
    numba-cuda, or Numba's CUDA simulator)."""
    try:
        from numba import config, cuda

        if config.ENABLE_CUDASIM or not cuda.is_available():
            return None
        name = cuda.get_current_device().name
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # noqa: BLE001 - no driver or no numba-cuda: no GPU to name
        return None


def machine() -> dict:
    """``{"cpu": model name, "cores": n, "gpu": name or None}``."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu": cpu, "cores": usable_cores(), "gpu": gpu_name()}


def versions(*packages: str) -> dict[str, str | None]:
    """The installed version of each distribution (None where it is not installed)."""
    from importlib import metadata

    out = {}
    for p in packages:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = None
    return out


def machine_info() -> dict:
    """:func:`machine` plus memory (GiB), platform, Python, load average, the date and the
    versions of the decoders' packages: what a results folder records."""
    mem = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return {**machine(), "memory_gib": mem, "platform": platform.platform(), "python": platform.python_version(),
            "load_average": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "versions": versions("wfst-ctc", "numpy", "numba", "kaldi-decoder", "kaldifst", "flashlight-text",
                                 "kenlm")}
