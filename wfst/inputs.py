"""Checks of decode inputs, shared by the backends, and NumPy views of any array library's data."""
from __future__ import annotations

import numpy as np

from .errors import DecodeInputError


def check_batch(x, lengths, num_columns: int) -> np.ndarray:
    """Validate the shape and dtype of log_probs `x` (any array library) and `lengths`;
    returns lengths as int64 NumPy (all frames when None)."""
    if getattr(x, "ndim", None) != 3:
        shape = tuple(getattr(x, "shape", ()))
        raise DecodeInputError(f"log_probs must have shape (B, T, V); got shape {shape}"
                               + (" (add a batch axis for one utterance)" if len(shape) == 2 else ""))
    B, T, V_in = x.shape
    if str(x.dtype) != "float32":
        raise DecodeInputError(f"log_probs must be float32 log-posteriors; got {x.dtype} "
                               f"(convert with .float() / .astype(np.float32))")
    if V_in != num_columns:
        raise DecodeInputError(f"log_probs has V={V_in} columns but the graph's tokens.txt has "
                               f"{num_columns} (blank included); is it the graph of this model?")
    if lengths is None:
        return np.full(B, T, np.int64)
    lengths = host_array(lengths)
    if lengths.ndim != 1 or lengths.shape[0] != B:
        raise DecodeInputError(f"lengths must have shape ({B},) to match log_probs; got {lengths.shape}")
    if lengths.dtype.kind not in "iu":
        if lengths.dtype.kind == "f" and np.all(np.floor(lengths) == lengths):
            lengths = lengths.astype(np.int64)
        else:
            raise DecodeInputError(f"lengths must be integers; got {lengths.dtype}")
    bad = np.flatnonzero((lengths < 0) | (lengths > T))  # before the cast: a uint64 above 2**63 would wrap
    if bad.size:
        b = int(bad[0])
        raise DecodeInputError(f"utterance {b}: length {int(lengths[b])} outside [0, T={T}]")
    return lengths.astype(np.int64)


def frame_fault(x: np.ndarray) -> tuple[int, str] | None:
    """(frame, what it has) of the first frame of x (T, V), host log-probs, that no search
    can read: NaN or +inf in a column, or -inf in every column (no token has a nonzero
    probability there, so no path passes it); None if every frame is fine."""
    top = x.max(axis=1)  # NaN where a column is NaN
    bad = np.flatnonzero(~np.isfinite(top))
    if not bad.size:
        return None
    t = int(bad[0])
    if top[t] == -np.inf:
        return t, "has -inf in every column (no token has a nonzero probability there, so no path passes it)"
    return t, "has NaN or +inf"


def check_finite(bad_rows: np.ndarray, x, lengths: np.ndarray) -> None:
    """Raise for the first utterance of x (B, T, V) with a frame within its length that no
    search can read (frame_fault); bad_rows: bool (B,), nonfinite_rows."""
    bad = np.flatnonzero(bad_rows)
    if bad.size:
        b = int(bad[0])
        t, what = frame_fault(host_array(x[b, :int(lengths[b])]))
        raise DecodeInputError(f"utterance {b}: log_probs at frame {t} {what} ({bad.size} utterance(s) affected)")


def nonfinite_rows(xp, x, lengths: np.ndarray):
    """bool (B,): the utterances with a frame within their length whose largest log-prob is
    not finite: a NaN or +inf column, or -inf in every column (x on xp's device)."""
    if bool(xp.isfinite(x).all()):  # the usual case, in a tenth of the time of the rows' maxima
        return xp.zeros(x.shape[0], bool)
    valid = xp.asarray(np.arange(x.shape[1])[None, :] < lengths[:, None])
    return (~xp.isfinite(x.max(axis=2)) & valid).any(axis=1)


def first_nonfinite_chunk(chunks) -> tuple[int, int, str] | None:
    """(chunk, frame, what it has) of the first chunk of a list of (T_i, V) chunks of one array
    library with a frame that no search can read (frame_fault), or None.  GPU chunks are
    reduced on the device and read back in one transfer, not one per chunk."""
    live = [i for i, x in enumerate(chunks) if len(x)]
    if not live:
        return None
    if type(chunks[live[0]]).__module__.split(".")[0] == "cupy":
        import cupy

        faulty = cupy.stack([~cupy.isfinite(chunks[i].max(axis=1)).all() for i in live]).get()
        live = [i for i, f in zip(live, faulty) if f]
    else:  # one reduction over all of them (each (T_i, V): the caller checked their shapes)
        whole = chunks[live[0]] if len(live) == 1 else np.concatenate([chunks[i] for i in live])
        if np.isfinite(whole).all():  # the usual case (-inf columns are looked at closely below)
            return None
    for i in live:
        fault = frame_fault(host_array(chunks[i]))
        if fault is not None:
            return i, *fault
    return None


def host_array(x) -> np.ndarray:
    """A C-contiguous NumPy view or copy of NumPy / torch / CuPy / DLPack input (GPU data is copied)."""
    if isinstance(x, np.ndarray):
        return np.ascontiguousarray(x)
    module = type(x).__module__.split(".")[0]
    if module == "torch":
        return np.ascontiguousarray(x.detach().cpu().numpy())
    if module == "cupy":
        return np.ascontiguousarray(x.get())
    if hasattr(x, "__dlpack__"):
        device_type = x.__dlpack_device__()[0] if hasattr(x, "__dlpack_device__") else 1
        if device_type == 1:  # kDLCPU
            return np.ascontiguousarray(np.from_dlpack(x))
        raise DecodeInputError("log_probs lives on a GPU and is neither torch nor CuPy; "
                               "copy it to the host or decode with device='cuda'")
    return np.ascontiguousarray(np.asarray(x))
