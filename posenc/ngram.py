r"""Interpolated Witten–Bell byte n-grams: the floor every byte-level language model must clear.

For the byte w after a context h of k bytes (an (k+1)-gram), with h' = h without its oldest byte,

    P_k(w | h) = (c(h w) + u(h) · P_{k−1}(w | h')) / (c(h) + u(h))     if c(h) > 0,
    P_k(w | h) = P_{k−1}(w | h')                                      if c(h) = 0,
    P_{−1}(w)  = 1 / 256,

where c(h w) counts h followed by w in the training bytes, c(h) = Σ_w c(h w), and u(h) is the number of
distinct bytes seen after h (Witten & Bell 1991, "The zero-frequency problem"; the interpolated form is
Chen & Goodman 1998, "An empirical study of smoothing techniques for language modeling", §2.4: λ_h =
c(h) / (c(h) + u(h))). Every P_k(· | h) sums to 1 over the 256 bytes.

Contexts never reach across the start of what is scored: in a window the first target has one byte of
context, the second two, …, up to k — what a Transformer scoring the same window sees, so the two score the
same bytes from the same information. One fit at the largest context serves every smaller one (the tables
of k are those of every k' ≤ k); `select_context` picks k on validation bytes.
"""

from __future__ import annotations

import dataclasses
import pathlib

import numpy as np

VOCAB = 256
MAX_CONTEXT = 6  # 6 bytes of context (a 7-gram): the context code and the byte fit in 56 bits


def _context_codes(seq: np.ndarray, k: int) -> np.ndarray:
    """The code of the k bytes before each position of `seq` `[..., T]`, the newest byte least significant:
    Σ_{j=1..k} seq[t − j] · 256^(j−1) (positions t < k get garbage: callers mask them)."""
    seq = seq.astype(np.int64)
    code = np.zeros(seq.shape, np.int64)
    for j in range(1, k + 1):
        code[..., j:] += seq[..., :-j] << (8 * (j - 1))
    return code


@dataclasses.dataclass(frozen=True)
class Table:
    """Counts of one context length k: sorted context codes with c(h) and u(h), sorted (h, w) codes with
    c(h w)."""

    contexts: np.ndarray
    context_count: np.ndarray
    context_types: np.ndarray
    joint: np.ndarray
    joint_count: np.ndarray


def _lookup(keys: np.ndarray, values: np.ndarray, query: np.ndarray) -> np.ndarray:
    """values[keys == query] for each query (0 where the key is absent); `keys` sorted."""
    if keys.size == 0:
        return np.zeros(query.shape, values.dtype)
    idx = np.minimum(np.searchsorted(keys, query), keys.size - 1)
    return np.where(keys[idx] == query, values[idx], 0)


@dataclasses.dataclass(frozen=True)
class NGram:
    """An interpolated Witten–Bell byte model with contexts of 0 … `context` bytes."""

    context: int
    tables: tuple[Table, ...]  # tables[k] for contexts of k bytes
    train_bytes: int

    @classmethod
    def fit(cls, data: np.ndarray, context: int = MAX_CONTEXT) -> NGram:
        """Counts every (h, w) with |h| ≤ `context` in `data` (uint8 bytes, one stream).

        Raises:
          ValueError: `context` outside 0 … MAX_CONTEXT, or `data` not bytes or shorter than context + 1.
        """
        if not (isinstance(context, int) and 0 <= context <= MAX_CONTEXT):
            raise ValueError(f"ngram context must be an integer in 0 … {MAX_CONTEXT} (bytes), got {context!r}")
        data = np.asarray(data)
        if data.ndim != 1 or data.size <= context or (data.size and (data.min() < 0 or data.max() >= VOCAB)):
            raise ValueError(f"ngram data must be one stream of more than {context} bytes (values 0 … 255), "
                             f"got shape {data.shape}")
        data = data.astype(np.int64)
        tables = []
        for k in range(context + 1):
            h = _context_codes(data, k)[k:]
            joint, joint_count = np.unique((h << 8) | data[k:], return_counts=True)
            contexts, first, context_types = np.unique(joint >> 8, return_index=True, return_counts=True)
            context_count = np.add.reduceat(joint_count, first)
            tables.append(Table(contexts, context_count, context_types, joint, joint_count))
        return cls(context, tuple(tables), int(data.size))

    def probs(self, seq: np.ndarray, context: int | None = None, start: int = 1) -> np.ndarray:
        """P(seq[..., t] | the up-to-`context` bytes before it within `seq`), for t ≥ `start`: `[..., T − start]`
        (float64). The byte at position t has min(t, context) bytes of context."""
        return self.probs_by_context(seq, context, start)[-1]

    def probs_by_context(self, seq: np.ndarray, context: int | None = None, start: int = 1) -> list[np.ndarray]:
        """`probs` at every context 0 … `context` from one pass (P_k is computed from P_{k−1})."""
        k_max = self.context if context is None else context
        if not (isinstance(k_max, int) and 0 <= k_max <= self.context):
            raise ValueError(f"ngram context must be an integer in 0 … {self.context} (the fitted context), "
                             f"got {context!r}")
        seq = np.asarray(seq).astype(np.int64)
        t = np.arange(seq.shape[-1])
        p = np.full(seq.shape, 1.0 / VOCAB)
        out = []
        for k in range(k_max + 1):
            tab = self.tables[k]
            h = _context_codes(seq, k)
            c_h = _lookup(tab.contexts, tab.context_count, h).astype(np.float64)
            u_h = _lookup(tab.contexts, tab.context_types, h).astype(np.float64)
            c_hw = _lookup(tab.joint, tab.joint_count, (h << 8) | seq).astype(np.float64)
            mixed = (c_hw + u_h * p) / np.maximum(c_h + u_h, 1.0)
            p = np.where((c_h > 0) & (t >= k), mixed, p)
            out.append(p[..., start:])
        return out

    def bits(self, inputs: np.ndarray, targets: np.ndarray, context: int | None = None) -> np.ndarray:
        """−log2 P of each target of evaluation windows (`posenc.data.eval_windows`: `targets[:, t]` follows
        `inputs[:, t]`), `[n, L]`, each window scored on its own (the first target has one byte of context)."""
        inputs, targets = np.asarray(inputs), np.asarray(targets)
        if inputs.shape != targets.shape or inputs.ndim != 2:
            raise ValueError(f"inputs and targets must both be [n, L], got {inputs.shape} and {targets.shape}")
        seq = np.concatenate([inputs[:, :1], targets], axis=1)
        return -np.log2(self.probs(seq, context))


def fit_version() -> str:
    """16 hex digits of the source of what builds the counts a saved model holds (`NGram.fit` and the context
    codes): a cache of counts is keyed by it, so counts made by other code are never read."""
    import hashlib  # noqa: PLC0415
    import inspect  # noqa: PLC0415

    code = inspect.getsource(NGram.fit) + inspect.getsource(_context_codes) + repr((VOCAB, MAX_CONTEXT))
    return hashlib.sha256(code.encode()).hexdigest()[:16]


def save(model: NGram, path) -> None:
    """Writes the counts to `path` (.npz), atomically (`jobs.write_bytes_atomic`: a temporary file of a name no
    other writer has, then a rename)."""
    import io  # noqa: PLC0415

    from posenc import jobs  # noqa: PLC0415

    arrays = {f"{name}_{k}": getattr(tab, name) for k, tab in enumerate(model.tables)
              for name in ("contexts", "context_count", "context_types", "joint", "joint_count")}
    buffer = io.BytesIO()
    np.savez(buffer, context=model.context, train_bytes=model.train_bytes, **arrays)
    jobs.write_bytes_atomic(pathlib.Path(path), buffer.getbuffer())


def load(path) -> NGram:
    """The model `save` wrote."""
    with np.load(path) as z:
        context = int(z["context"])
        tables = tuple(Table(*(z[f"{name}_{k}"] for name in ("contexts", "context_count", "context_types", "joint",
                                                                "joint_count"))) for k in range(context + 1))
        return NGram(context, tables, int(z["train_bytes"]))


def select_context(model: NGram, validation: np.ndarray, length: int = 1024) -> tuple[int, dict[int, float]]:
    """The context (0 … model.context bytes) with the lowest bits per byte on `validation`, scored in
    non-overlapping windows of `length` (as the evaluation does); and every context's bits per byte."""
    n = (len(validation) - 1) // length
    if n < 1:
        raise ValueError(f"validation has {len(validation)} bytes: fewer than one window of {length} + 1")
    idx = np.arange(n)[:, None] * length + np.arange(length + 1)
    seq = np.asarray(validation)[idx]
    scores = {k: float(-np.log2(p).mean()) for k, p in enumerate(model.probs_by_context(seq))}
    return min(scores, key=scores.get), scores
