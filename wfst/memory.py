"""This process's memory, read from Linux's /proc: resident size, its peak, and what the
host has available.  Elsewhere every reading is None (and the checks that use it pass).
(benchmarks/pyctcdecode_worker.py has its own copy of rss_mb: it runs in another environment.)"""
from __future__ import annotations

USABLE_SHARE = 0.8  # of what is free, a search's estimated memory may take: estimates leave out small arrays,
# and allocators fragment


def available_host_bytes() -> int | None:
    """MemAvailable: what the host can still give without swapping, bytes."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def rss_mb(field: str = "VmRSS:") -> float | None:
    """This process's resident memory (VmRSS) or its peak since the last reset (VmHWM), MiB."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


_child_peak_mb = [0.0]  # the largest peak of the child processes reported since take_child_peak


def note_child_peak(mb: float) -> None:
    """A child process's peak resident memory (MiB), for the stage that ran it (the kernel's
    RUSAGE_CHILDREN keeps the largest of every child ever: a later stage would inherit it)."""
    _child_peak_mb[0] = max(_child_peak_mb[0], mb)


def take_child_peak() -> float:
    """The largest child peak noted since the last call (0.0: none)."""
    peak, _child_peak_mb[0] = _child_peak_mb[0], 0.0
    return peak


def reset_peak_rss() -> bool:
    """Reset VmHWM, the peak resident memory, to the current RSS (Linux >= 4.0); False where
    that cannot be done (the peak then counts from the process start)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


_MALLOC_SET = False


def _release_free_memory() -> None:
    """Give freed heap memory back to the OS (glibc), so that RSS follows what is in use.

    The first call also fixes glibc's mmap threshold at 128 KiB: by default it grows after a
    large block is freed, and later large arrays then come from the heap, whose freed pages
    stay resident and would hide what a later allocation costs."""
    global _MALLOC_SET
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        if not _MALLOC_SET:
            libc.mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD
            _MALLOC_SET = True
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass


class PeakMemory:
    """``with PeakMemory() as m: ...``; then ``m.mb``: peak RSS during the block above the RSS at its start.

    Linux only (VmHWM, reset through /proc/self/clear_refs); ``m.mb`` is None elsewhere."""

    def __enter__(self):
        import gc

        gc.collect()
        _release_free_memory()
        self.start = rss_mb("VmRSS:")
        reset_peak_rss()
        self.mb = None
        return self

    def __exit__(self, *exc):
        peak = rss_mb("VmHWM:")
        if peak is not None and self.start is not None:
            self.mb = max(peak - self.start, 0.0)
        return False
