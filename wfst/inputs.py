"""Checks of decode inputs, shared by the backends, and NumPy views of any array library's data."""
from __future__ import annotations

import functools
import itertools
import operator
import sys
import warnings
from collections.abc import Sequence

import numpy as np

from .errors import DecodeInputError, LogProbsWarning, user_stacklevel


def check_batch(x, lengths, num_columns: int) -> np.ndarray:
    """Validate the shape and dtype of log_probs `x` (any array library) and `lengths`;
    returns lengths as int64 NumPy (all frames when None)."""
    if getattr(x, "ndim", None) != 3:
        shape = tuple(getattr(x, "shape", ()))
        raise DecodeInputError(f"log_probs must have shape (B, T, V); got shape {shape}"
                               + (" (add a batch axis for one utterance)" if len(shape) == 2 else ""))
    B, T, V_in = x.shape
    if str(x.dtype) != "float32" and not (isinstance(x.dtype, np.dtype) and x.dtype.newbyteorder("=") == _FLOAT32):
        raise DecodeInputError(f"log_probs must be float32 log-posteriors; got {x.dtype} "
                               f"(convert with .float() / .astype(np.float32))")
    if V_in != num_columns:
        raise DecodeInputError(f"log_probs has V={V_in} columns but the token table (tokens.txt) has "
                               f"{num_columns} (blank included); is it this model's?")
    return check_lengths(lengths, B, T)


def check_lengths(lengths, B: int, T: int, of: str = "log_probs", item: str = "utterance") -> np.ndarray:
    """lengths (any array library; None: all T) of the B items of `of` (B, T, V), checked:
    int64 NumPy."""
    if lengths is None:
        return np.full(B, T, np.int64)
    lengths = host_array(lengths, "lengths")
    given = lengths.shape
    if lengths.ndim == 0:  # one number: the lengths of a batch of one
        lengths = lengths.reshape(1)
    if lengths.ndim != 1 or lengths.shape[0] != B:
        raise DecodeInputError(f"lengths must have shape ({B},) to match {of}; got "
                               + (f"one number, {lengths.reshape(-1)[0]}" if given == () else f"{given}"))
    if not whole_numbers(lengths):
        raise DecodeInputError(f"lengths must be integers; got {lengths.dtype}")
    # (before the cast: a uint64 above 2**63, or 1e300, would wrap; min and max first: cheaper than the mask)
    if lengths.size and (lengths.min() < 0 or lengths.max() > T):
        bad = np.flatnonzero((lengths < 0) | (lengths > T))
        b = int(bad[0])
        shown = int(lengths[b]) if lengths.dtype.kind in "iu" else f"{lengths[b]:g}"
        raise DecodeInputError(f"{item} {b}: length {shown} outside [0, T={T}]")
    return lengths.astype(np.int64)


def whole_numbers(a: np.ndarray) -> bool:
    """Whether the host array a holds integers (of an integer dtype, or floats without a
    fraction: lengths as a float tensor)."""
    return a.dtype.kind in "iu" or (a.dtype.kind == "f" and bool(np.all(np.floor(a) == a)))


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


# float32 log_softmax can round the log-prob of a near-certain token a little above 0
LOG_PROB_SLACK = 1e-3
_in_range = None  # kernels.cpu.log_probs_in_range, once first needed


def _range_check():
    global _in_range
    if _in_range is None:  # (imported here: importing wfst compiles nothing)
        from wfst.kernels.cpu import log_probs_in_range as _in_range
    return _in_range


def _end_to_end(x: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    from wfst.kernels.cpu import end_to_end  # (as _range_check)

    return end_to_end(x, lengths)


def input_faults(xp, x, lengths: np.ndarray) -> tuple[np.ndarray, tuple[int, int, float] | None]:
    """What check_log_probs judges, of x (B, T, V) on xp's device: bool (B,) host, the
    utterances with a frame within their length whose largest log-prob is not finite (a NaN
    or +inf column, or -inf in every column); and (utterance, frame, value) of the first
    value above 0 within the lengths (no log-probability), or None."""
    if not x.size:
        return np.zeros(x.shape[0], bool), None
    finite = bool(xp.isfinite(x).all())
    if finite:  # the usual case, in a tenth of the time of the rows' maxima
        bad = np.zeros(x.shape[0], bool)
    else:
        valid = xp.asarray(np.arange(x.shape[1])[None, :] < lengths[:, None])
        bad = host_array((~xp.isfinite(x.max(axis=2)) & valid).any(axis=1))
    above = None
    # (NaN, as in padding, is no maximum: it hid the values above 0 of the frames within the lengths)
    largest = x.max() if finite else xp.where(xp.isnan(x), -xp.inf, x).max()
    if float(largest) > LOG_PROB_SLACK:  # then find where, within the lengths
        top = host_array(x.max(axis=2))
        top[np.arange(x.shape[1])[None, :] >= lengths[:, None]] = -np.inf
        hits = np.argwhere(np.nan_to_num(top, nan=-np.inf) > LOG_PROB_SLACK)
        if len(hits):
            b, t = (int(v) for v in hits[0])
            above = b, t, float(top[b, t])
    return bad, above


def check_log_probs(faults, x, lengths: np.ndarray) -> None:
    """Raise for the first utterance of x (B, T, V) with a frame within its length that no
    search can read (frame_fault); warn when a value is above 0 (faults: input_faults)."""
    bad_rows, above = faults
    bad = np.flatnonzero(bad_rows)
    if bad.size:
        b = int(bad[0])
        t, what = frame_fault(host_array(x[b, :int(lengths[b])]))
        raise DecodeInputError(f"utterance {b}: log_probs at frame {t} {what} ({bad.size} utterance(s) affected)")
    if above is not None:
        warn_not_log_probs(f"utterance {above[0]}, frame {above[1]}", above[2])


def warn_not_log_probs(where: str, value: float) -> None:
    """Probabilities or raw logits decode without an error, to words the LM weight no longer
    balances: say so (a log-probability is at most 0)."""
    warnings.warn(f"log_probs are not log-probabilities: {where} has {value:.4g} > 0 (probabilities, or "
                  "logits before log_softmax?); decoding them as they are", LogProbsWarning,
                  stacklevel=user_stacklevel())


_DTYPE = operator.attrgetter("dtype")
_FLOAT32 = np.dtype(np.float32)


class JoinedChunks(Sequence):
    """A call's chunks end to end, as the usual call brings them (NumPy float32 (T_i, V)
    arrays with every value in range): chunk i is x[offsets[i]:offsets[i + 1]], a view.  The
    CPU search reads x and the lengths as they are; other code sees a list of chunks."""

    def __init__(self, x: np.ndarray, lengths: list[int]):
        self.x, self.lengths = x, lengths

    @functools.cached_property
    def offsets(self) -> list[int]:  # (only where a chunk is read alone: not on the usual call's way)
        return [0, *itertools.accumulate(self.lengths)]

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        k = range(len(self))[i]  # (negative i as a list's; out of range, a list's IndexError)
        return self.x[self.offsets[k]:self.offsets[k + 1]]

    def __iter__(self):
        return map(self.x.__getitem__, itertools.starmap(slice, zip(self.offsets, self.offsets[1:])))


def chunk_lengths(chunks) -> list[int]:
    """The frames of each chunk (of a list, or of JoinedChunks without a view each)."""
    return chunks.lengths if isinstance(chunks, JoinedChunks) else list(map(len, chunks))


def joined_chunks(chunks: list, num_columns: int) -> JoinedChunks | None:
    """The chunks joined when each is a NumPy float32 (T_i, num_columns) array and every
    value v has -inf < v <= LOG_PROB_SLACK, else None (chunk_faults then names what is
    not so).  One copy and one compiled pass over all of them: with a hundred streams,
    checking chunk by chunk cost ~0.6 µs each in calls, and the CPU search joins them
    anyway.  A chunk alone (a stream advanced by itself) is not copied."""
    if len(chunks) == 1:
        x = chunks[0]
        if type(x) is not np.ndarray or x.dtype != _FLOAT32 or not x.flags.c_contiguous or not x.flags.writeable:
            return None
    elif not chunks or set(map(type, chunks)) != {np.ndarray} or set(map(_DTYPE, chunks)) != {_FLOAT32}:
        return None
    else:
        try:
            x = np.concatenate(chunks)
        except ValueError:  # (shapes that do not line up: said chunk by chunk)
            return None
    if x.ndim != 2 or x.shape[1] != num_columns:
        return None
    if not _range_check()(x, LOG_PROB_SLACK):
        return None
    return JoinedChunks(x, list(map(len, chunks)))


def batched_chunks(x, lengths, num_columns: int, streams: int):
    """The chunks of one (N, T, V) array, as a batched model gives a call's frames (any array
    library; lengths (N,): the frames of each chunk, all T when None), its shape, dtype and
    lengths checked: one transfer of GPU data, then JoinedChunks where every value within
    the lengths is in range (no copy where the lengths are all T and x is C-contiguous),
    else the list of their (T_i, V) views, for chunk_faults to name the fault."""
    shape = tuple(x.shape)
    if len(shape) != 3 or shape[0] != streams or shape[2] != num_columns:
        raise DecodeInputError(f"advance() got {streams} streams and chunks of shape {shape}: one array of chunks "
                               f"must have shape (N={streams}, T, V={num_columns}) (V: the graph's tokens, blank "
                               f"included)")
    if x.dtype != _FLOAT32 and str(x.dtype).removeprefix("torch.") != "float32":  # (str(): ~1 µs, 20+ cold)
        raise DecodeInputError(f"chunks must be float32 log-posteriors; got {str(x.dtype).removeprefix('torch.')}")
    N, T, V = shape
    if lengths is not None:
        lengths = check_lengths(lengths, N, T, "chunks", "stream")
    frames = [T] * N if lengths is None else lengths.tolist()
    x = host_array(x, "chunks")
    flat = x.reshape(N * T, V) if min(frames, default=T) == T else _end_to_end(x, lengths)
    if _range_check()(flat, LOG_PROB_SLACK):
        return JoinedChunks(flat, frames)
    return [x[k, :n] for k, n in enumerate(frames)]


def chunk_faults(chunks) -> tuple[tuple[int, int, str] | None, tuple[int, int, float] | None]:
    """Of a list of (T_i, V) chunks of one array library: (chunk, frame, what it has) of the
    first frame no search can read (frame_fault), and (chunk, frame, value) of the first
    value above 0 (no log-probability: warn_not_log_probs); each None when there is none.
    Host chunks are read once each by a compiled loop (a stream's chunk of 8 frames
    searches in tens of µs); GPU chunks are reduced on the device, all of them at once."""
    host = set(map(type, chunks)) <= {np.ndarray}  # (map: no Python frame a chunk)
    if host:  # the usual case, chunk by chunk (NaN fails)
        if all(map(_range_check(), chunks, itertools.repeat(LOG_PROB_SLACK, len(chunks)))):
            return None, None
    live = [i for i, x in enumerate(chunks) if len(x)]
    if not live:
        return None, None
    if host:
        xp = np
    elif {type(chunks[i]).__module__.split(".")[0] for i in live} == {"cupy"}:
        import cupy as xp
    else:  # (a call mixing GPU and host chunks is checked on the host)
        xp = np
        chunks = [host_array(x) for x in chunks]
    # (each (T_i, V): the caller checked their shapes)
    whole = chunks[live[0]] if len(live) == 1 else xp.concatenate([chunks[i] for i in live])
    if xp is not np and float(whole.min()) > -np.inf and float(whole.max()) <= LOG_PROB_SLACK:
        return None, None
    faulty = [] if bool(xp.isfinite(whole).all()) else live  # (-inf columns are looked at closely below)
    top = float(whole.max())
    fault = next(((i, *f) for i in faulty if (f := frame_fault(host_array(chunks[i]))) is not None), None)
    above = None
    if top > LOG_PROB_SLACK:  # (NaN is not)
        for i in live:
            frames = host_array(chunks[i].max(axis=1))
            hits = np.flatnonzero(frames > LOG_PROB_SLACK)
            if hits.size:
                above = i, int(hits[0]), float(frames[hits[0]])
                break
    return fault, above


def host_array(x, what: str = "log_probs") -> np.ndarray:
    """A C-contiguous NumPy view or copy of NumPy / torch / CuPy / DLPack input (GPU data is
    copied); what: the argument's name, for the error when x holds no numbers NumPy can hold."""
    if isinstance(x, np.ndarray):
        if not x.flags.writeable or not x.dtype.isnative:  # (copied: the compiled search takes writable native
            return np.array(x, dtype=x.dtype.newbyteorder("="), order="C")  # arrays; another type compiles it anew)
        return np.asarray(x, order="C")  # (np.ascontiguousarray makes a 0-d array 1-d)
    if is_torch(x):
        return _torch_to_host(x, what)
    if type(x).__module__.split(".")[0] == "cupy":
        return np.asarray(x.get(), order="C")
    if hasattr(x, "__dlpack__"):
        device_type = x.__dlpack_device__()[0] if hasattr(x, "__dlpack_device__") else 1
        if device_type != 1:  # kDLCPU
            raise DecodeInputError(f"{what} lives on a GPU and is neither torch nor CuPy; "
                                   f"copy it to the host or decode with device='cuda'")
        try:
            return np.asarray(np.from_dlpack(x), order="C")
        except (BufferError, RuntimeError, TypeError, ValueError) as e:  # (a dtype NumPy has not, a gradient)
            raise DecodeInputError(f"{what}: NumPy cannot read this {type(x).__name__} through DLPack ({e}); "
                                   f"give float32 data") from None
    if isinstance(x, (list, tuple)) and any(is_torch(i) or hasattr(i, "__dlpack__") for i in x):
        items = [host_array(i, what) for i in x]  # (np.asarray would call each tensor's __array__: raw errors)
        try:
            return np.stack(items)
        except ValueError:
            raise DecodeInputError(f"{what}: its arrays' shapes differ ({', '.join(str(i.shape) for i in items[:3])}"
                                   f"{', ...' if len(items) > 3 else ''}); pad them and give lengths") from None
    try:
        a = np.asarray(x)
    except (ValueError, TypeError):  # (nested lists of unequal lengths)
        raise DecodeInputError(f"{what} must be an array of numbers; NumPy cannot read this {type(x).__name__} as "
                               f"one (lists of unequal lengths? pad them and give lengths)") from None
    if a.dtype == object or a.dtype.kind in "USV":  # (None, a generator, strings: no shape to check)
        raise DecodeInputError(f"{what} must be an array of numbers (NumPy, torch, CuPy or nested lists); got "
                               f"{type(x).__name__}")
    return np.asarray(a, order="C")


def is_torch(x) -> bool:
    """Whether x is a torch tensor, a subclass's too (without importing torch: a program that
    has not imported it holds none)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _torch_to_host(x, what: str) -> np.ndarray:
    """A torch tensor's data as NumPy (a view where it is on the host, strided and of a dtype
    NumPy has), or a DecodeInputError that says why not."""
    if x.is_meta:
        raise DecodeInputError(f"{what} is a torch tensor on the 'meta' device: it holds no data")
    if x.is_nested or x.layout != sys.modules["torch"].strided:
        raise DecodeInputError(f"{what} must be a dense torch tensor; got a {'nested' if x.is_nested else x.layout} "
                               f"one (.to_dense() / pad it)")
    if x.is_quantized:
        raise DecodeInputError(f"{what} is a quantized torch tensor; dequantize it (.dequantize())")
    x = x.detach()
    if x.is_neg():  # (a lazily negated view: NumPy would refuse it)
        x = x.resolve_neg()
    if x.is_conj():
        x = x.resolve_conj()
    try:
        return np.asarray(x.cpu().numpy(), order="C")
    except (TypeError, RuntimeError):  # (a dtype NumPy has not: bfloat16, float8, complex32, ...)
        convert = ".long()" if what == "lengths" else ".float()"
        raise DecodeInputError(f"{what} has torch dtype {str(x.dtype).removeprefix('torch.')}, which NumPy cannot "
                               f"hold; convert it ({convert})") from None
