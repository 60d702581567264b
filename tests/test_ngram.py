"""The Witten–Bell byte n-gram (posenc/ngram.py) against a dictionary-counting float64 oracle."""

from collections import Counter

import numpy as np
import pytest

from posenc import data, jobs
from posenc.ngram import MAX_CONTEXT, NGram, select_context

TEXT = np.frombuffer(b"the cat sat on the mat; the bat ate the rat. " * 7 + b"a zebra!", np.uint8)


def oracle(train: bytes, context: bytes, w: int, k: int) -> float:
    """P_k(w | the last k bytes of `context`) by the defining recursion, with Counter counts."""
    if k < 0:
        return 1.0 / 256
    lower = oracle(train, context, w, k - 1)
    if len(context) < k:
        return lower
    h = context[len(context) - k:] if k else b""
    joint = Counter(train[i - k:i + 1] for i in range(k, len(train)))
    c_h = sum(c for g, c in joint.items() if g[:k] == h)
    if c_h == 0:
        return lower
    u_h = sum(1 for g in joint if g[:k] == h)
    return (joint.get(h + bytes([w]), 0) + u_h * lower) / (c_h + u_h)


@pytest.mark.parametrize("k", [0, 1, 2, 4])
def test_probabilities_equal_the_oracle(k):
    model = NGram.fit(TEXT, context=4)
    test = np.frombuffer(b"the zebra sat; a cat ate the mat?", np.uint8)
    got = model.probs(test[None], context=k)[0]
    want = [oracle(TEXT.tobytes(), test[:t].tobytes(), int(test[t]), k) for t in range(1, len(test))]
    np.testing.assert_allclose(got, want, rtol=1e-13)


def test_each_context_sums_to_one_over_the_bytes():
    """For seen, unseen and partly seen contexts, Σ_w P(w | h) = 1 (the interpolation weights add up)."""
    model = NGram.fit(TEXT, context=3)
    for h in (b"the", b"at ", b"zq", b"\x00\x01\x02", b" "):
        seq = np.stack([np.frombuffer(h + bytes([w]), np.uint8) for w in range(256)])
        p = model.probs(seq, start=len(h))[:, 0]
        assert p.min() > 0
        np.testing.assert_allclose(p.sum(), 1.0, rtol=1e-12)


def test_windows_are_scored_on_their_own():
    """A window's first target has one byte of context: the same bits as the window scored alone, and not
    those of the stream (where it would see the previous window's bytes)."""
    model = NGram.fit(TEXT, context=4)
    x, y = data.eval_windows(TEXT, length=16, num_bytes=48)
    bits = model.bits(x, y)
    alone = -np.log2(model.probs(np.concatenate([x[1, :1], y[1]])[None]))[0]
    np.testing.assert_allclose(bits[1], alone, rtol=1e-13)
    stream = -np.log2(model.probs(TEXT[None, :49]))[0]
    np.testing.assert_allclose(bits[0], stream[:16], rtol=1e-13)  # the first window is the stream's start
    assert not np.allclose(bits[1, :4], stream[16:20])


def test_longer_contexts_fit_the_training_bytes_better_and_selection_takes_the_best_on_the_bytes_given():
    model = NGram.fit(TEXT, context=4)
    seq = TEXT[None]
    train_bits = [-np.log2(model.probs(seq, k)).mean() for k in range(5)]
    assert all(a > b for a, b in zip(train_bits, train_bits[1:]))  # seen text: more context, fewer bits
    k, scores = select_context(model, TEXT, length=64)
    assert k == 4 and scores[4] == min(scores.values())
    held_out = np.frombuffer(b"zyxwvu tsrqpo nmlkji hgfedc " * 4, np.uint8)  # nothing like the training bytes
    k_out, scores_out = select_context(model, held_out, length=32)
    assert set(scores_out) == set(range(5)) and k_out < k  # unseen contexts: the long ones stop paying


@pytest.mark.parametrize("bad", [-1, MAX_CONTEXT + 1, 2.0])
def test_bad_context_is_refused_naming_the_range(bad):
    with pytest.raises(ValueError, match="ngram context"):
        NGram.fit(TEXT, context=bad)
    with pytest.raises(ValueError, match="ngram context"):
        NGram.fit(TEXT, context=2).probs(TEXT[None], context=3 if bad != 2.0 else bad)


def test_one_pass_gives_every_context_and_a_saved_model_loads_the_same(tmp_path):
    from posenc import ngram

    model = NGram.fit(TEXT, context=3)
    test = np.frombuffer(b"the zebra sat on a rat", np.uint8)[None]
    for k, p in enumerate(model.probs_by_context(test)):
        np.testing.assert_array_equal(p, model.probs(test, k))
    ngram.save(model, tmp_path / "m.npz")
    again = ngram.load(tmp_path / "m.npz")
    assert again.context == 3 and again.train_bytes == model.train_bytes
    np.testing.assert_array_equal(again.probs(test), model.probs(test))


def test_save_writes_the_file_atomically_with_a_plain_mode(tmp_path):
    """ngram.save goes through `jobs.write_bytes_atomic` (tests/test_jobs.py): the file loads, no temporary file
    is left, and its mode is a plain open's (not mkstemp's 0600)."""
    from posenc import ngram  # noqa: PLC0415

    model = NGram.fit(TEXT, context=2)
    ngram.save(model, tmp_path / "m.npz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.npz"]
    assert (tmp_path / "m.npz").stat().st_mode & 0o777 == 0o666 & ~jobs._UMASK
    np.testing.assert_array_equal(ngram.load(tmp_path / "m.npz").probs(TEXT[None]), model.probs(TEXT[None]))
