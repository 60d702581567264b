"""Training-free methods (posenc/training_free.py): float64 brute-force oracles, reductions, cached decoding.

The oracle builds each [T, T] score matrix the slow way, from the method's definition — which keys a query
sees and at which relative distance (or at which pair of positions, for a bias) — for one layer of the
model, with q and k in float64 NumPy from the model's own weights, and compares the logits.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from posenc import decode, training_free
from posenc.alibi import alibi_slopes
from posenc.model import ModelConfig, Transformer
from posenc.rope_scaling import RopeScaling
from posenc.sinusoidal import sinusoidal_encoding
from posenc.training_free import Method

T = 40


def _rms(x, scale, eps=1e-6):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * scale


def _gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def _rotate(x, angle):
    """Half-layout RoPE of x [..., H] by angles [..., H/2] (float64)."""
    r = x.shape[-1] // 2
    a, b = x[..., :r], x[..., r:]
    c, s = np.cos(angle), np.sin(angle)
    return np.concatenate([a * c - b * s, b * c + a * s], -1)


def rule(spec: Method, i: int, j: int):
    """The method's definition for query i, key j ≤ i: (visible, (q position, k position)) — the pair of
    positions whose rotation (or bias) scores it. Written from the papers, not from posenc's code."""
    m = spec.method
    if m == "none":
        return True, (i, j)
    if m == "self_extend":
        w, g = spec.window, spec.group
        if i - j < w:
            return True, (i, j)
        return True, (i // g + w - w / g, j // g)
    if m == "rerope":
        return True, (i, j) if i - j < spec.window else (spec.window, 0)
    if m == "leaky_rerope":
        w, k = spec.window, spec.leak
        return True, (i, j) if i - j < w else (w + (i - j - w) / k, 0)  # distance w + (d − w)/k
    if m == "lm_infinite":
        if i - j < spec.window:
            return True, (i, j)
        return j < spec.n_global, (spec.window, 0)
    if m == "sinks":
        s, r = spec.num_sinks, spec.window
        if i - j <= r:
            return True, (i, j)
        return j < s, (min(i, s + r), j)
    raise AssertionError(m)


def oracle_logits(model, tokens, spec: Method):
    """Float64 logits of a one-layer model under `spec`, the slow way (a Python loop over (i, j))."""
    cfg = model.cfg
    assert cfg.num_layers == 1
    p = lambda x: np.asarray(x[...], np.float64)  # noqa: E731
    kind = cfg.encoding.position_kind
    t = tokens.shape[0]
    n, h = cfg.num_heads, cfg.head_dim
    x = p(model.embed.embedding)[tokens]
    if kind == "absolute":
        pos = np.array([min(i, spec.num_sinks + spec.window) if spec.method == "sinks" else i for i in range(t)])
        if cfg.posenc == "learned":
            x = x + p(model.encoding.table)[pos]
        else:
            x = x + np.asarray(sinusoidal_encoding(jnp.asarray(pos), cfg.d_model, cfg.sinusoidal_base), np.float64)
    blk = model.blocks[0]
    qkv = _rms(x, p(blk.norm1.scale)) @ p(blk.attn.qkv.kernel)
    q, k, v = np.split(qkv.reshape(t, 3 * n, h), 3, axis=1)
    if spec.logn:
        q = q * np.maximum(1.0, np.log(np.arange(t) + 1.0) / np.log(spec.logn))[:, None, None]
    theta = cfg.rope_base ** (-np.arange(0, h, 2) / h)
    slopes = np.asarray(alibi_slopes(n), np.float64)
    scores = np.full((n, t, t), -np.inf)
    for i in range(t):
        for j in range(i + 1):
            seen, (pi, pj) = rule(spec, i, j)
            if not seen:
                continue
            if kind == "rotary":
                s = np.einsum("nh,nh->n", _rotate(q[i], (pi - pj) * theta), k[j]) / math.sqrt(h)
            else:
                s = np.einsum("nh,nh->n", q[i], k[j]) / math.sqrt(h)
            if kind == "bias":
                s = s - slopes * (pi - pj)
            scores[:, i, j] = s
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    y = np.einsum("nqk,knh->qnh", probs, v).reshape(t, cfg.d_model) @ p(blk.attn.out.kernel)
    x = x + y
    x = x + _gelu(_rms(x, p(blk.norm2.scale)) @ p(blk.fc.kernel)) @ p(blk.proj.kernel)
    return _rms(x, p(model.final_norm.scale)) @ p(model.head.kernel)


def _model(posenc="rope", layers=1, seed=0, **kw):
    cfg = ModelConfig(d_model=32, num_layers=layers, num_heads=2, mlp_dim=64, posenc=posenc, max_len=64, **kw)
    model = Transformer(cfg, rngs=nnx.Rngs(seed))
    # sharper attention than at init, so that a wrong distance shows in the logits
    for blk in model.blocks:
        blk.attn.qkv.kernel[...] = blk.attn.qkv.kernel[...] * 12.0
    return model


def _tokens(t=T, b=1, seed=1):
    return jnp.asarray(np.random.RandomState(seed).randint(0, 256, (b, t)), jnp.int32)


SPECS = [
    Method("none", logn=8),
    Method("self_extend", window=8, group=3),
    Method("self_extend", window=6, group=4, logn=16),
    Method("rerope", window=7),
    Method("leaky_rerope", window=7, leak=3.0),
    Method("lm_infinite", window=9, n_global=3),
    Method("sinks", window=10, num_sinks=2),
]


@pytest.mark.parametrize("spec,chunk,key_block", [(s, c, kb) for s in SPECS for c, kb in ((0, 0), (16, 8))]
                         + [(s, 16, 0) for s in SPECS if s.method in ("self_extend", "sinks")],  # chunks, whole rows
                         ids=lambda v: v.label if isinstance(v, Method) else str(v))
def test_rotary_methods_match_the_float64_oracle(spec, chunk, key_block):
    model = _model(attn_chunk=chunk, attn_key_block=key_block)
    x = _tokens()
    got = model(x, method=spec.args(model.cfg.encoding))[0]
    want = oracle_logits(model, np.asarray(x[0]), spec)
    np.testing.assert_allclose(np.asarray(got), want, atol=2e-4, rtol=1e-4)
    plain = oracle_logits(model, np.asarray(x[0]), Method())
    assert np.abs(want - plain).max() > 1e-2  # the method changes something: the oracle can tell


@pytest.mark.parametrize("posenc", ["alibi", "sinusoidal"])
@pytest.mark.parametrize("spec", [s for s in SPECS if s.method in ("none", "lm_infinite", "sinks")],
                         ids=lambda s: s.label)
def test_bias_and_absolute_encodings_match_the_oracle(posenc, spec):
    model = _model(posenc, attn_chunk=16, attn_key_block=8)
    x = _tokens()
    got = model(x, method=spec.args(model.cfg.encoding))[0]
    np.testing.assert_allclose(np.asarray(got), oracle_logits(model, np.asarray(x[0]), spec), atol=2e-4, rtol=1e-4)


@pytest.mark.parametrize("spec", [
    Method("self_extend", window=5, group=1),  # G = 1
    Method("rerope", window=T),  # w ≥ T
    Method("leaky_rerope", window=5, leak=1.0),  # slope 1
    Method("lm_infinite", window=T, n_global=2),  # window covers the sequence
    Method("sinks", window=T, num_sinks=2),
    Method("none", logn=T),  # L0 ≥ every n
], ids=lambda s: s.label)
def test_each_method_reduces_to_plain_attention(spec):
    model = _model(layers=2)
    x = _tokens(b=2)
    np.testing.assert_allclose(np.asarray(model(x, method=spec.args(model.cfg.encoding))), np.asarray(model(x)),
                               atol=2e-5, rtol=1e-5)


BOUNDED_SPECS = [s for s in SPECS if s.method in ("lm_infinite", "sinks")]
CACHED_CASES = ([("rope", s) for s in SPECS[1:]] + [(p, s) for p in ("alibi", "learned", "cope") for s in BOUNDED_SPECS]
                + [("xpos", SPECS[1]), ("xpos", SPECS[-1]), ("local_global", SPECS[3])])


@pytest.mark.parametrize("posenc,spec", CACHED_CASES, ids=lambda c: c if isinstance(c, str) else c.label)
def test_cached_decoding_equals_the_parallel_forward(posenc, spec):
    """Prefill 13 tokens, then one at a time: a bounded cache (S + R slots) wraps several times. Every
    method on RoPE, the bounded ones on a bias, an absolute and a contextual encoding, and xPos and the
    local/global layers (their own ring caches) with a two-branch method."""
    kw = {"encoding_options": (("pattern", "LG"), ("window", 6))} if posenc == "local_global" else {}
    model = _model(posenc, layers=2, **kw)
    spec.check(model.cfg.encoding, model.cfg)
    x = _tokens(b=2)
    graphdef, params = nnx.split(model)
    want = model(x, method=spec.args(model.cfg.encoding))
    layout = spec.cache_layout()
    size = sum(layout) if layout else None
    got = decode.teacher_forced_logits(graphdef, params, x, prefill_len=13, method=spec, cache_size=size)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("scaling", [None, RopeScaling("dynamic_ntk", 2.0, original_max_len=8)],
                         ids=["static", "dynamic_ntk"])
def test_sinks_cache_equals_recomputing_sinks_and_window_reindexed_from_zero(scaling):
    """StreamingLLM's claim, for one layer (where a cached key is what recomputation gives): the logits of
    the last token equal a fresh forward over [first S tokens ‖ last R + 1 tokens] at positions 0 … S + R —
    with a length-dependent scaling too, evaluated at that length S + R + 1 (the rotary table StreamingLLM
    computes at the cache's length), not at the absolute position."""
    model = _model(**({"rope_scaling": scaling} if scaling else {}))
    s, r = 3, 9
    x = _tokens(t=T)
    graphdef, params = nnx.split(model)
    got = decode.teacher_forced_logits(graphdef, params, x, prefill_len=5, method=Method("sinks", window=r, num_sinks=s),
                                       cache_size=s + r)
    for t in (20, T - 1):
        short = jnp.concatenate([x[:, :s], x[:, t - r:t + 1]], axis=1)
        np.testing.assert_allclose(np.asarray(got[:, t]), np.asarray(model(short)[:, -1]), atol=1e-4, rtol=1e-4)


def test_sinks_generation_past_its_cache_equals_the_parallel_forward():
    model = _model(layers=2)
    graphdef, params = nnx.split(model)
    spec = Method("sinks", window=6, num_sinks=2)
    assert decode._cache_size(spec, None, 65) == 8  # S + R slots, whatever the length generated
    out = decode.generate(graphdef, params, np.asarray(_tokens(t=5)), 60, temperature=0.0, method=spec)
    assert out.shape == (1, 65)
    # greedy generation with the bounded cache = greedy argmax of the parallel sinks forward, token by token
    logits = model(jnp.asarray(out[:, :-1]), method=spec.args(model.cfg.encoding))
    np.testing.assert_array_equal(np.asarray(jnp.argmax(logits[:, 4:], -1)), out[:, 5:])
    with pytest.raises(ValueError, match="cache_size"):
        decode.generate(graphdef, params, np.asarray(_tokens(t=5)), 10, method=spec, cache_size=100)


def test_sinks_on_an_absolute_encoding_stay_inside_the_learned_table():
    model = _model("learned")
    x = _tokens(t=100)  # past max_len = 64
    with pytest.raises(ValueError, match="undefined past its table"):
        model(x)
    spec = Method("sinks", window=20, num_sinks=4)
    out = model(x, method=spec.args(model.cfg.encoding))
    np.testing.assert_allclose(np.asarray(out[0]), oracle_logits(model, np.asarray(x[0]), spec), atol=2e-4, rtol=1e-4)
    # the largest position the forward embedded is S + R: a window of any length needs S + R + 1 of the table
    learned, rope = model.cfg.encoding, _model("rope").cfg.encoding
    assert [spec.positions_embedded(learned, n) for n in (10, 24, 25, 100)] == [10, 24, 25, 25]
    assert spec.positions_embedded(rope, 100) == 100  # a rotary encoding is bounded by no table
    assert Method("lm_infinite", window=20, n_global=4).positions_embedded(learned, 100) == 100


def test_invalid_specs_and_combinations_name_the_field():
    with pytest.raises(ValueError, match="method must be one of"):
        Method("streaming")
    with pytest.raises(ValueError, match="takes \\['window', 'group', 'logn'\\]"):
        Method("self_extend", leak=2.0)
    with pytest.raises(ValueError, match="group must be an integer >= 1"):
        Method("self_extend", group=0)
    with pytest.raises(ValueError, match="leak .* >= 1"):
        Method("leaky_rerope", leak=0.5)
    with pytest.raises(ValueError, match="leak .* >= 1"):
        Method("leaky_rerope", leak=float("inf"))
    with pytest.raises(ValueError, match="window is given twice"):
        Method.parse("rerope,window=3,window=4")
    with pytest.raises(ValueError, match="logn must be an integer >= 2"):
        Method("none", logn=1)
    with pytest.raises(ValueError, match="not a number"):
        Method.parse("rerope,window=abc")
    with pytest.raises(ValueError, match="field=value"):
        Method.parse("rerope,size=3")
    cfg = ModelConfig(posenc="alibi")
    with pytest.raises(ValueError, match="rotary encodings only; posenc='alibi'"):
        Method("rerope", window=4).check(cfg.encoding, cfg)
    cfg = ModelConfig(posenc="fire")
    with pytest.raises(ValueError, match="depends on the query's own position"):
        Method("sinks").check(cfg.encoding, cfg)
    cfg = ModelConfig(posenc="local_global")
    with pytest.raises(ValueError, match="sliding windows of their own"):
        Method("sinks").check(cfg.encoding, cfg)
    Method("rerope").check(cfg.encoding, cfg)  # defined: the window ANDs with the layer's


def test_parse_label_and_defaults():
    m = Method.parse("self_extend:window=64:group=4")
    assert m == Method("self_extend", window=64, group=4) == Method.parse(m.label.replace("(", ",").rstrip(")"))
    assert Method.parse("none,logn=256").label == "none+logn(256)"
    assert Method("self_extend").resolve(256, 1024) == Method("self_extend", window=64, group=5)
    assert Method("leaky_rerope").resolve(256, 1024).leak == pytest.approx((1024 - 64) / (256 - 64))
    assert Method("sinks").resolve(256, 4096) == Method("sinks", window=251, num_sinks=4)
    assert Method("lm_infinite").resolve(256, 4096) == Method("lm_infinite", window=256, n_global=10)
    # the grouped positions of the default self_extend stay inside L0
    m = Method("self_extend").resolve(256, 4096)
    i = 4095
    assert i // m.group + m.window - m.window / m.group < 256


def test_parameters_are_traced_one_compile_for_many_values():
    model = _model()
    graphdef, params = nnx.split(model)
    traces = []

    @jax.jit
    def f(params, x, a):
        traces.append(1)
        return nnx.merge(graphdef, params)(x, method=a)

    x = _tokens()
    outs = [f(params, x, Method("self_extend", window=w, group=g).args(model.cfg.encoding))
            for w, g in ((4, 2), (8, 3), (6, 5))]
    assert len(traces) == 1
    assert not np.allclose(np.asarray(outs[0]), np.asarray(outs[1]))


def test_logn_scale_formula():
    p = jnp.arange(10)[None]
    want = np.maximum(1.0, np.log(np.arange(10) + 1.0) / np.log(4.0))
    np.testing.assert_allclose(np.asarray(training_free.logn_scale(p, 4))[0], want, rtol=1e-6)


def _script(*args):
    import pathlib
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parent.parent
    return subprocess.run([sys.executable, *args], cwd=root, capture_output=True, text=True, timeout=300)


def test_generate_and_eval_scripts_take_methods(trained_run, tmp_path):
    out = _script("scripts/generate.py", f"--workdir={trained_run}", "--prompt=ROMEO.", "--max_new_tokens=90",
                  "--temperature=0", "--method=sinks,num_sinks=2")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("ROMEO.") and len(out.stdout.rstrip("\n")) >= 6 + 50
    bad = _script("scripts/generate.py", f"--workdir={trained_run}", "--method=self_extend,leak=2")
    assert bad.returncode != 0 and "takes ['window', 'group', 'logn']" in bad.stderr
    ev = _script("scripts/eval_extrapolation.py", f"--workdir={trained_run}", "--lengths=32,64", "--num_bytes=128",
                 "--scalings=none,yarn", "--method=none", "--method=rerope", "--method=sinks", f"--out={tmp_path}")
    assert ev.returncode == 0, ev.stderr[-2000:]
    assert "| rope | yarn | rerope |" in ev.stdout  # the run's directory is named rope
    assert "streaming 128" in ev.stdout


def test_labels_are_exact_and_keep_their_usual_form():
    """Labels name rows and key results (`run|scaling|label`), so two different methods never share one:
    integers in full and floats exactly where `:g` would round; common values read as they always have."""
    assert Method("lm_infinite", window=1234567, n_global=10).label != Method("lm_infinite", window=1234568,
                                                                            n_global=10).label
    assert Method("lm_infinite", window=1234567, n_global=10).label == "lm_infinite(window=1234567,n_global=10)"
    assert Method("leaky_rerope", window=8, leak=2.0000004).label == "leaky_rerope(window=8,leak=2.0000004)"
    assert Method("leaky_rerope", window=8, leak=2.0000004).label != Method("leaky_rerope", window=8, leak=2.0).label
    assert Method("leaky_rerope", window=64, leak=2.0).label == "leaky_rerope(window=64,leak=2)"
    assert Method("leaky_rerope", window=7, leak=2.5, logn=256).label == "leaky_rerope(window=7,leak=2.5)+logn(256)"
    leak = (1024 - 64) / (200 - 64)  # a resolved default: every digit kept, and parsed back to the same method
    m = Method("leaky_rerope", window=64, leak=leak)
    assert Method.parse(m.label.replace("(", ",").rstrip(")")) == m
