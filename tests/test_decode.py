"""Cached decoding equals the full forward pass for every encoding and static scaling; under a length-dependent
scaling it equals the per-prefix recompute in the first layer (one-layer models) and, deeper, a layer-by-layer
reference whose cached states come from each token's own step."""

import dataclasses
import functools

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import posenc
from posenc import decode
from posenc.model import ModelConfig, Transformer
from posenc.training_free import Method

TINY = dict(d_model=32, num_layers=2, num_heads=2, mlp_dim=64, max_len=16)
SHORT, LONG = np.ones(8), np.linspace(1.0, 6.0, 8)


def model_parts(posenc_name="rope", **kw):
    model = Transformer(ModelConfig(posenc=posenc_name, **{**TINY, **kw}), rngs=nnx.Rngs(0))
    for block in model.blocks:  # sharpen attention so that positions matter at init
        block.attn.qkv.kernel[...] = block.attn.qkv.kernel[...] * 8
    rng = np.random.default_rng(2)
    for param in jax.tree.leaves(nnx.state(model.encoding, nnx.Param), is_leaf=lambda v: isinstance(v, nnx.Variable)):
        if not np.any(param[...]):  # CoPE's e starts at 0, where CoPE is NoPE and its cases could not fail
            param[...] = jnp.asarray(rng.normal(size=param[...].shape), param[...].dtype)
    return nnx.split(model)


def tokens(t, b=2):
    return jnp.asarray(np.random.default_rng(1).integers(0, 256, size=(b, t)), jnp.int32)


DYNAMIC = posenc.RopeScaling("dynamic_ntk", 2.0, original_max_len=16)
ONE_LAYER = {"num_layers": 1}  # length-dependent scalings: exact in a layer whose inputs do not depend on the length
CASES = [
    ("none", {}, None),
    ("sinusoidal", {}, None),
    ("learned", {}, None),
    ("alibi", {}, None),
    ("t5", {}, None),
    ("kerple", {}, None),
    ("fire", {}, None),
    ("cope", {}, None),
    ("xpos", {}, None),
    ("p_rope", {}, None),
    ("p_rope", ONE_LAYER, DYNAMIC),
    ("local_global", {"encoding_options": (("window", 8),)}, None),
    ("local_global", {"encoding_options": (("window", 5),)}, posenc.RopeScaling("yarn", 4.0, original_max_len=16)),
    # the local layer first (no scaling): the global layer's inputs do not depend on the length, so it is exact
    ("local_global", {"encoding_options": (("pattern", "LG"), ("window", 5))}, DYNAMIC),
    ("rope", {}, None),
    ("rope", {"rope_layout": "interleaved", "rope_fraction": 0.5}, None),
    ("rope", {"rope_layout": "interleaved", **ONE_LAYER}, DYNAMIC),
    ("rope", {}, posenc.RopeScaling("yarn", 4.0, original_max_len=16)),
    ("rope", {}, posenc.RopeScaling("linear", 2.0)),
    ("rope", {}, posenc.RopeScaling("ntk", 3.0)),
    ("rope", {}, posenc.RopeScaling("llama3", 4.0, original_max_len=16)),
    ("rope", ONE_LAYER, DYNAMIC),
    ("rope", ONE_LAYER, posenc.RopeScaling("linear", original_max_len=16, dynamic=True)),
    ("rope", ONE_LAYER, posenc.RopeScaling("ntk", original_max_len=16, dynamic=True)),
    ("rope", ONE_LAYER, posenc.RopeScaling("yarn", original_max_len=16, dynamic=True)),
    ("rope", ONE_LAYER, posenc.RopeScaling("longrope", 3.0, original_max_len=16, short_factor=SHORT, long_factor=LONG)),
    ("rope", ONE_LAYER, posenc.RopeScaling("longrope", 3.0, original_max_len=16, short_factor=SHORT, long_factor=LONG,
                                           unscaled_positions=4)),
    ("rope", ONE_LAYER, posenc.RopeScaling("longrope", 3.0, original_max_len=16, short_factor=[SHORT * 1.3],
                                           long_factor=[LONG], unscaled_positions=4)),  # per-layer factors
]


def test_the_cases_cover_every_registered_encoding():
    assert {name for name, _, _ in CASES} == set(posenc.encodings.POSENCS)


@pytest.mark.parametrize("name,kw,scaling", CASES, ids=lambda c: str(getattr(c, "kind", c)))
def test_cached_decoding_equals_full_recompute(name, kw, scaling):
    graphdef, params = model_parts(name, **kw)
    t = 16 if name == "learned" else 40  # 40 > original_max_len / max_len = 16: past the training length
    x = tokens(t)
    cached = decode.teacher_forced_logits(graphdef, params, x, prefill_len=5, scaling=scaling)
    full = decode.recompute_logits(graphdef, params, x, scaling=scaling)
    assert cached.shape == full.shape == (2, t, 256)
    np.testing.assert_allclose(cached, full, atol=1e-5, rtol=1e-5)


def own_step_logits(graphdef, params, x, scaling, prefill_len):
    """What a KV cache computes under a length-dependent scaling, built layer by layer without one: the
    output of layer l at position j is that of layer l over the states of layer l − 1 (each from its own
    step) with the frequencies of step j (seq_len j + 1; the prefill's seq_len `prefill_len` for j below it)."""
    model = nnx.merge(graphdef, params)
    cfg = model.cfg
    t = x.shape[1]
    schedule = decode.rope_schedule(cfg, scaling, t)
    positions = jnp.arange(t)[None]

    @functools.partial(jax.jit, static_argnums=0)
    def layer_out(layer, h, rope):
        m = nnx.merge(graphdef, params)
        return m.blocks[layer](h, positions, m.encoding, m.encoding.context(positions, t, rope), layer)[0]

    h = model.embed(x)
    for layer in range(cfg.num_layers):
        h = jnp.stack([layer_out(layer, h, schedule.at(max(j, prefill_len - 1)))[:, j] for j in range(t)], axis=1)
    return model.head(model.final_norm(h))


def test_a_deeper_layer_s_cache_holds_each_token_s_own_step():
    """Under a length-dependent scaling the cache holds, in every layer past the first, keys and values of the
    states each token got at its own step: cached decoding equals that (`own_step_logits`), and differs from
    recomputing the prefix (every layer at the current frequencies) by a part of the scaling's own effect. A
    one-layer model is the recompute exactly (`test_cached_decoding_equals_full_recompute`)."""
    model = nnx.merge(*model_parts("rope"))
    for block in model.blocks:  # sharper still: the two definitions apart by far more than rounding
        block.attn.qkv.kernel[...] = block.attn.qkv.kernel[...] * 2
    graphdef, params = nnx.split(model)
    x = tokens(40)
    cached = decode.teacher_forced_logits(graphdef, params, x, prefill_len=5, scaling=DYNAMIC)
    np.testing.assert_allclose(cached, own_step_logits(graphdef, params, x, DYNAMIC, 5), atol=1e-5, rtol=1e-5)
    full = decode.recompute_logits(graphdef, params, x, scaling=DYNAMIC)
    unscaled = decode.recompute_logits(graphdef, params, x, scaling=posenc.RopeScaling())
    np.testing.assert_allclose(cached[:, :16], full[:, :16], atol=1e-5, rtol=1e-5)  # the factor is 1 up to L0
    gap, effect = np.abs(cached[:, 16:] - full[:, 16:]).max(), np.abs(unscaled[:, 16:] - full[:, 16:]).max()
    assert 2e-4 < gap < effect, (gap, effect)  # 9e-4 and 3e-2 here


METHOD_CASES = [  # (posenc, model kw, scaling, method): length-dependent scalings on one layer (see above)
    ("rope", ONE_LAYER, DYNAMIC, Method("self_extend", window=6, group=3)),
    ("rope", ONE_LAYER, posenc.RopeScaling("longrope", 3.0, original_max_len=16, short_factor=SHORT, long_factor=LONG,
                                           unscaled_positions=4), Method("rerope", window=7)),
    ("rope", ONE_LAYER, posenc.RopeScaling("yarn", original_max_len=16, dynamic=True),
     Method("leaky_rerope", window=6, leak=2.5)),
    ("rope", ONE_LAYER, DYNAMIC, Method("lm_infinite", window=9, n_global=2)),
    ("rope", ONE_LAYER, DYNAMIC, Method("sinks", window=9, num_sinks=2)),
    # n̂ within the span (S + R + 1 = 24 > L0 = 16): the cache is not re-indexed
    ("rope", ONE_LAYER, posenc.RopeScaling("longrope", 3.0, original_max_len=16, short_factor=SHORT, long_factor=LONG,
                                           unscaled_positions=4), Method("sinks", window=21, num_sinks=2)),
    ("rope", ONE_LAYER, DYNAMIC, Method("none", logn=16)),
    ("p_rope", {}, None, Method("self_extend", window=6, group=3)),
    ("t5", {}, None, Method("sinks", window=9, num_sinks=2)),
    ("kerple", {}, None, Method("lm_infinite", window=9, n_global=2)),
    ("fire", {}, None, Method("none", logn=16)),
    ("sinusoidal", {}, None, Method("sinks", window=9, num_sinks=2)),
    ("none", {}, None, Method("lm_infinite", window=9, n_global=2)),
]


@pytest.mark.parametrize("name,kw,scaling,method", METHOD_CASES,
                         ids=lambda c: c.label if isinstance(c, Method) else str(getattr(c, "kind", "")))
def test_cached_decoding_with_a_method_equals_the_forward_over_every_prefix(name, kw, scaling, method):
    """A training-free method through the cache (bounded: S + R slots, wrapping) equals the method's forward
    pass over each prefix 0…p, with the frequencies of the scaling at `Method.scaling_length(p + 1)`."""
    graphdef, params = model_parts(name, **kw)
    cfg = nnx.merge(graphdef, params).cfg
    x = tokens(40)
    layout = method.cache_layout()
    cached = decode.teacher_forced_logits(graphdef, params, x, prefill_len=5, scaling=scaling, method=method,
                                          cache_size=sum(layout) if layout else None)
    scaling = cfg.rope_scaling if scaling is None else scaling
    forward = jax.jit(lambda prm, rope: nnx.merge(graphdef, prm)(x, rope=rope, method=method.args(cfg.encoding)))

    def rope(p):
        length = method.scaling_length(p + 1)
        return posenc.rope_inputs(cfg.rotary_dim, cfg.rope_base, scaling, length) if cfg.encoding.takes_rope_scaling \
            else None

    want = jnp.stack([forward(params, rope(p))[:, p] for p in range(40)], axis=1)
    np.testing.assert_allclose(cached, want, atol=1e-5, rtol=1e-5)


def test_longrope_n_hat_applies_in_decoding_past_the_original_length_only():
    """Decoding reproduces the forward pass over each prefix (seq_len p + 1) for LongRoPE with n̂: at prefixes up
    to original_max_len the short factors apply without n̂ (`rope_inputs`), past it the long factors with n̂."""
    sc = posenc.RopeScaling("longrope", 3.0, original_max_len=16, short_factor=SHORT * 1.5, long_factor=LONG,
                            unscaled_positions=4)
    graphdef, params = model_parts("rope", **ONE_LAYER)
    x = tokens(24)
    cfg = nnx.merge(graphdef, params).cfg
    # the forward pass over each prefix alone (one compile per length: jitted, as eager NNX takes minutes here)
    forward = jax.jit(lambda prm, x, rope: nnx.merge(graphdef, prm)(x, rope=rope))
    want = np.stack([np.asarray(forward(params, x[:, :p + 1], posenc.rope_inputs(cfg.rotary_dim, cfg.rope_base, sc,
                                                                                p + 1)))[:, p] for p in range(24)], axis=1)
    np.testing.assert_allclose(decode.recompute_logits(graphdef, params, x, scaling=sc), want, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(decode.teacher_forced_logits(graphdef, params, x, prefill_len=3, scaling=sc), want,
                               atol=1e-5, rtol=1e-5)


def test_sinks_re_index_the_cache_unless_longrope_s_n_hat_applies_within_their_span():
    """StreamingLLM re-indexes positions inside the cache; with LongRoPE's n̂ the frequencies depend on the absolute
    position, but n̂ applies with the long factors only (past original_max_len = 16): a span of 8 re-indexes, one
    of 24 does not, and neither does any span without n̂ fail to."""
    from posenc.training_free import Method  # noqa: PLC0415

    graphdef, params = model_parts("rope")
    cfg = nnx.merge(graphdef, params).cfg
    with_n_hat = posenc.RopeScaling("longrope", 3.0, original_max_len=16, short_factor=SHORT, long_factor=LONG,
                                    unscaled_positions=4)
    without = dataclasses.replace(with_n_hat, unscaled_positions=0)
    for window, scaling, reindex in ((6, with_n_hat, True), (22, with_n_hat, False), (22, without, True)):
        args = decode._method_args(cfg, Method("sinks", window=window, num_sinks=2), scaling, 40)
        assert args.reindex is reindex, (window, scaling.unscaled_positions)


def test_a_windowed_cache_keeps_each_row_s_own_keys():
    """Rows with different positions (randomized positions): each row's ring slots follow its own positions, so
    cached decoding equals the full forward for every row, not only for the first."""
    graphdef, params = model_parts("local_global", encoding_options=(("pattern", "LG"), ("window", 4)), max_len=64)
    t = 8
    x = tokens(t)
    positions = jnp.stack([jnp.arange(t) * 4, jnp.arange(t)])  # row 0 every 4th position, row 1 every position
    call = jax.jit(lambda x, pos, cache=None: nnx.merge(graphdef, params)(x, pos, seq_len=4 * t, cache=cache))
    full = call(x, positions)
    cache = nnx.merge(graphdef, params).init_cache(2, t)
    logits, cache = call(x[:, :3], positions[:, :3], cache)
    outs = [logits]
    for i in range(3, t):  # one compile for the steps: the positions and the cache are traced
        step, cache = call(x[:, i:i + 1], positions[:, i:i + 1], cache)
        outs.append(step)
    np.testing.assert_allclose(jnp.concatenate(outs, axis=1), full, atol=2e-4, rtol=1e-4)


def test_dynamic_scaling_with_hf_style_cache_would_differ():
    """Caching keys rotated at the step they were computed (HF's behaviour) is not the recompute, in the first
    layer already: the test above can tell the two apart."""
    scaling = posenc.RopeScaling("dynamic_ntk", 2.0, original_max_len=16)
    graphdef, params = model_parts("rope", **ONE_LAYER)
    x = tokens(40)
    full = decode.recompute_logits(graphdef, params, x, scaling=scaling)
    model = nnx.merge(graphdef, params)
    schedule = decode.rope_schedule(model.cfg, scaling, 40)
    cache = model.init_cache(2, 40, rotate_at_use=False)  # keys frozen with the frequencies of their step
    call = jax.jit(lambda x, pos, rope, cache: nnx.merge(graphdef, params)(x, pos, seq_len=40, rope=rope, cache=cache))
    logits, cache = call(x[:, :5], jnp.arange(5)[None], schedule.at(4), cache)
    outs = [logits]
    for p in range(5, 40):  # one compile for the steps: the position, its frequencies and the cache are traced
        step, cache = call(x[:, p:p + 1], jnp.array([[p]]), schedule.at(p), cache)
        outs.append(step)
    stale = jnp.concatenate(outs, axis=1)
    np.testing.assert_allclose(stale[:, :16], full[:, :16], atol=1e-5)  # identical while the factor is 1
    exact = decode.teacher_forced_logits(graphdef, params, x, prefill_len=5, scaling=scaling)
    exact_err = np.abs(exact[:, 20:] - full[:, 20:]).max()
    stale_err = np.abs(stale[:, 20:] - full[:, 20:]).max()
    assert stale_err > 1e-4 and stale_err > 20 * exact_err, (stale_err, exact_err)  # then it drifts


def test_sampling_is_reproducible_and_greedy_is_deterministic():
    graphdef, params = model_parts("rope")
    prompt = tokens(4)
    a = decode.generate(graphdef, params, prompt, 12, temperature=1.0, top_k=20, seed=3)
    b = decode.generate(graphdef, params, prompt, 12, temperature=1.0, top_k=20, seed=3)
    c = decode.generate(graphdef, params, prompt, 12, temperature=1.0, top_k=20, seed=4)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (2, 16) and not np.array_equal(a, c)
    np.testing.assert_array_equal(a[:, :4], prompt)
    greedy = decode.generate(graphdef, params, prompt, 6, temperature=0.0)
    full = decode.recompute_logits(graphdef, params, jnp.asarray(greedy))
    np.testing.assert_array_equal(greedy[:, 4:], np.argmax(full[:, 3:-1], axis=-1))  # each token = argmax


def test_top_k_restricts_the_support():
    logits = jnp.array([[0.0, 1.0, 2.0, 3.0]])
    draws = {int(decode.sample(logits, jax.random.key(i), 1.0, 2)[0]) for i in range(200)}
    assert draws == {2, 3}


def test_errors():
    graphdef, params = model_parts("learned")
    with pytest.raises(ValueError, match=r"longer than posenc='learned' is defined for \(16 positions: a learned "
                                         r"table of max_len=16; learned_beyond='interpolate' resamples it\)"):
        decode.generate(graphdef, params, tokens(10), 10)
    with pytest.raises(ValueError, match="prompt is empty"):
        decode.generate(graphdef, params, tokens(0), 3)
    graphdef, params = model_parts("rope")
    with pytest.raises(ValueError, match="cache_size=8 is smaller than the request"):
        decode.generate(graphdef, params, tokens(4), 10, cache_size=8)


def test_cache_flag_is_static():
    model = Transformer(ModelConfig(**TINY), rngs=nnx.Rngs(0))
    cache = model.init_cache(1, 8, rotate_at_use=True)
    assert len(jax.tree.leaves(cache)) == 3 * TINY["num_layers"]  # k, v, positions per layer; not the flag
    assert jax.tree.map(lambda a: a, cache).rotate_at_use is True


def test_bad_sampling_and_cache_requests_are_clear_errors():
    graphdef, params = model_parts()
    prompt = tokens(4, b=1)
    with pytest.raises(ValueError, match=r"top_k must be an integer in \[0, vocab_size=256\]"):
        decode.generate(graphdef, params, prompt, 2, top_k=300)
    with pytest.raises(ValueError, match="cache_size must be a positive number of slots"):
        decode.generate(graphdef, params, prompt, 2, cache_size=0)
    cfg = ModelConfig(**TINY)  # model_parts' model
    need = 2 * 10**9 * cfg.num_layers * cfg.num_heads * cfg.head_dim * 4 / 2**30  # k and v, float32, every layer
    with pytest.raises(MemoryError, match=rf"cache_size=1000000000: the KV cache needs {need:.2f} GiB.*the device has "
                                          r".*lower --cache_size"):
        decode.generate(graphdef, params, prompt, 2, cache_size=10**9)


def test_device_memory_is_an_accelerator_s_limit_else_the_host_s_memory(monkeypatch):
    """The memory a KV cache is checked against: an accelerator reports `bytes_limit` in its memory stats; a CPU
    device reports none (None or no limit), and the host's physical memory is taken."""
    import os  # noqa: PLC0415

    class Device:
        def __init__(self, stats):
            self.stats = stats

        def memory_stats(self):
            return self.stats

    host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for stats, want in (({"bytes_limit": 80 << 30, "bytes_in_use": 1}, 80 << 30), (None, host), ({}, host)):
        monkeypatch.setattr(jax, "local_devices", lambda stats=stats: [Device(stats)])
        assert decode.device_memory_bytes() == want, stats


def test_rotate_at_use_step_computes_its_sines_once_for_all_layers():
    """A decoding step whose cache holds unrotated keys tabulates RoPE's sin/cos once (`Rope.tabulate`): the
    traced step's sine count does not grow with the layers, the batch or the cache."""
    scaling = posenc.RopeScaling("dynamic_ntk", 2.0, original_max_len=16)

    def sines(num_layers, batch, size):
        graphdef, params = model_parts(num_layers=num_layers)
        model = nnx.merge(graphdef, params)
        schedule = decode.rope_schedule(model.cfg, scaling, 64)
        cache = model.init_cache(batch, size, rotate_at_use=True)
        step = decode._step.lower(graphdef, params, cache, jnp.zeros((batch, 1), jnp.int32), jnp.int32(7), schedule,
                                  seq_len=64)
        return step.as_text().count("stablehlo.sine")

    assert sines(1, 1, 16) == sines(4, 4, 64) >= 1


@pytest.mark.parametrize("rotate_at_use", [False, True])
def test_a_decoding_step_never_transposes_the_cache(rotate_at_use):
    """The KV cache is kept head-major `[B, N, S, H]`, attention's layout: a decoding step writes the new key
    and value into it and attends over it without a transpose of anything of the cache's size (only the
    step's own key, query and output are transposed)."""
    graphdef, params = model_parts("rope")
    model = nnx.merge(graphdef, params)
    cache = model.init_cache(2, 64, rotate_at_use=rotate_at_use)
    schedule = decode.rope_schedule(model.cfg, posenc.RopeScaling(), 64)

    def step(params, cache, token):
        return nnx.merge(graphdef, params)(token, jnp.array([[5]]), seq_len=64, rope=schedule.at(5), cache=cache)

    eqns = []

    def walk(jaxpr):
        for e in jaxpr.eqns:
            eqns.append(e)
            for sub in jax.extend.core.jaxprs_in_params(e.params):
                walk(sub)

    walk(jax.make_jaxpr(step)(params, cache, tokens(1)).jaxpr)
    transposed = [tuple(e.invars[0].aval.shape) for e in eqns if e.primitive.name == "transpose"]
    assert transposed and all(64 not in shape for shape in transposed), transposed
    assert any(e.primitive.name == "dynamic_update_slice" for e in eqns)  # written in place, head-major


def _shapes_of(closed_jaxpr) -> set:
    """The shape of every input, constant and intermediate of a jaxpr, sub-jaxprs included."""
    shapes = set()

    def walk(jaxpr):
        for v in list(jaxpr.invars) + list(jaxpr.constvars):
            shapes.add(tuple(v.aval.shape))
        for e in jaxpr.eqns:
            shapes.update(tuple(getattr(v.aval, "shape", ())) for v in e.outvars)
            for sub in jax.extend.core.jaxprs_in_params(e.params):
                walk(sub)

    walk(closed_jaxpr.jaxpr)
    return shapes


@pytest.mark.parametrize("method", [Method("sinks", window=6, num_sinks=2),
                                    Method("lm_infinite", window=6, n_global=2)], ids=lambda m: m.method)
@pytest.mark.parametrize("scaling", [posenc.RopeScaling(), posenc.RopeScaling("dynamic_ntk", 2.0, original_max_len=16)],
                         ids=["static", "dynamic_ntk"])
def test_a_bounded_method_s_decoding_step_does_not_grow_with_the_length(method, scaling):
    """Under sinks / lm_infinite (keys rotated at use in S + R slots) a decoding step's arrays — its inputs, the
    RoPE schedule among them, and every intermediate — have the same shapes whether 100 or 50,000 tokens are
    decoded: the rotations are computed for the positions the cache holds, not gathered from a table of every
    position, and the schedule stops at the method's span (`rope_schedule`)."""
    graphdef, params = model_parts(rope_scaling=scaling)
    cfg = nnx.merge(graphdef, params).cfg
    args = decode._method_args(cfg, method, scaling, 50_000)
    rotate = decode._rotate_at_use(cfg, scaling, method)
    assert rotate

    def shapes(total):
        cache = nnx.merge(graphdef, params).init_cache(1, decode._cache_size(method, None, total), rotate)
        schedule = decode.rope_schedule(cfg, scaling, total, decode._span(method))
        step = jax.make_jaxpr(lambda p, c, s, a: decode._step.__wrapped__(
            graphdef, p, c, jnp.zeros((1, 1), jnp.int32), jnp.int32(total - 1), s, a, seq_len=total))
        return _shapes_of(step(params, cache, schedule, args))

    short, long = shapes(100), shapes(50_000)
    assert short == long, (long - short, short - long)
    assert max(max(s, default=1) for s in long) <= cfg.vocab_size  # nothing longer than the logits' vocabulary


def test_a_bounded_method_s_schedule_stops_at_its_span():
    """`rope_schedule` with a span holds min(length, span) rows; the steps past them take the last row, equal
    to the row the full-length schedule has there (the scaling at min(t + 1, span))."""
    scaling = posenc.RopeScaling("dynamic_ntk", 2.0, original_max_len=8)
    cfg = nnx.merge(*model_parts(rope_scaling=scaling)).cfg
    span = 12
    short = decode.rope_schedule(cfg, scaling, 1000, span)
    assert all(a.shape[0] == span for a in short)
    assert decode.rope_schedule(cfg, scaling, 5, span).inv_freq.shape[0] == 5
    want = posenc.rope_inputs(cfg.rotary_dim, cfg.rope_base, scaling, span)
    for t in (span - 1, span, 999):
        inv, af, _, lo = short.at(jnp.int32(t))
        np.testing.assert_array_equal(inv, np.float32(want[0]))
        np.testing.assert_array_equal(af, np.float32(want[1]))
        np.testing.assert_array_equal(lo, np.float32(want[3]))
    inv3 = short.at(jnp.int32(3))[0]
    np.testing.assert_array_equal(inv3, np.float32(posenc.rope_inputs(cfg.rotary_dim, cfg.rope_base, scaling, 4)[0]))
    assert not np.array_equal(inv3, short.at(jnp.int32(span))[0])  # the rows do change below the span


def test_decoding_inputs_are_checked_naming_the_field():
    """Bad sampling and decoding arguments are ValueErrors naming the field, never truncated, clamped or
    turned into NaN logits."""
    graphdef, params = model_parts()
    prompt = tokens(4, b=1)
    for temperature in (float("nan"), float("inf"), -1.0, True, "1"):
        with pytest.raises(ValueError, match="temperature must be a finite number >= 0"):
            decode.generate(graphdef, params, prompt, 2, temperature=temperature)
    for top_k in (2.5, True, -1):
        with pytest.raises(ValueError, match=r"top_k must be an integer in \[0, vocab_size=256\]"):
            decode.generate(graphdef, params, prompt, 2, top_k=top_k)
    for n in (2.5, True, 0):
        with pytest.raises(ValueError, match="max_new_tokens must be an integer >= 1"):
            decode.generate(graphdef, params, prompt, n)
    with pytest.raises(ValueError, match="cache_size must be a positive number of slots"):
        decode.generate(graphdef, params, prompt, 2, cache_size=10.5)
    for bad in (300, -1):
        with pytest.raises(ValueError, match=rf"prompt must be token ids in \[0, vocab_size=256\).*such as {bad}"):
            decode.generate(graphdef, params, prompt.at[0, 2].set(bad), 2)
    with pytest.raises(ValueError, match="prompt must be integer token ids"):
        decode.generate(graphdef, params, np.full((1, 3), 1.5), 2)
    x = tokens(6)
    for prefill_len in (0, 7, 2.5, True):
        with pytest.raises(ValueError, match=r"prefill_len must be an integer in \[1, T=6\]"):
            decode.teacher_forced_logits(graphdef, params, x, prefill_len=prefill_len)
    with pytest.raises(ValueError, match=r"tokens must be token ids in \[0, vocab_size=256\)"):
        decode.teacher_forced_logits(graphdef, params, x.at[1, 4].set(256), prefill_len=2)
    answer = np.zeros((2, 6), bool)
    answer[:, 4:] = True
    with pytest.raises(ValueError, match=r"tokens must be token ids in \[0, vocab_size=256\)"):
        decode.greedy_answers(graphdef, params, np.asarray(x.at[0, 1].set(999)), answer)
    # the boundaries are accepted
    decode.generate(graphdef, params, prompt.at[0, 0].set(255), 1, temperature=0, top_k=256)
    decode.teacher_forced_logits(graphdef, params, x, prefill_len=6)
    decode.generate(graphdef, params, prompt, np.int64(1), temperature=np.float32(0.5), top_k=np.int32(3))


def test_a_small_temperature_samples_the_argmax_and_greedy_ties_take_the_lowest_id():
    """logits / temperature past float32's range is inf for several tokens, and the draw among them is not the
    argmax; `sample` shifts the logits by their maximum first. A temperature that float32 flushes to zero is
    refused. Greedy decoding breaks ties by the lowest token id; top-k keeps every token tied with the k-th."""
    logits = jnp.array([[0.0, 100.0, 200.0, 150.0]])
    assert {int(decode.sample(logits, jax.random.key(i), 1e-37, 0)[0]) for i in range(20)} == {2}
    assert {int(decode.sample(logits, jax.random.key(i), 1e-37, 2)[0]) for i in range(20)} == {2}
    assert int(decode.sample(jnp.array([[1.0, 3.0, 3.0, 0.0]]), jax.random.key(0), 0.0, 0)[0]) == 1
    tied = {int(decode.sample(jnp.array([[0.0, 1.0, 1.0, 1.0]]), jax.random.key(i), 1.0, 2)[0]) for i in range(200)}
    assert tied == {1, 2, 3}
    graphdef, params = model_parts()
    with pytest.raises(ValueError, match=r"temperature must be 0 \(greedy\) or at least 1.18e-38"):
        decode.generate(graphdef, params, tokens(4, b=1), 2, temperature=1e-39)


def test_decoding_arguments_of_the_wrong_kind_are_errors_naming_them():
    """A seed that is not an integer, prompts of different lengths, a cache size or a scaling or method that is
    not one, and a RoPE scaling for an encoding that takes none (in every entry point, not only `generate`)."""
    graphdef, params = model_parts()
    prompt = tokens(4, b=1)
    for seed in (2.5, True, "1"):
        with pytest.raises(ValueError, match="seed must be an integer"):
            decode.generate(graphdef, params, prompt, 2, seed=seed)
    with pytest.raises(ValueError, match="prompt must be .* every row of the same length"):
        decode.generate(graphdef, params, [[1, 2, 3], [4, 5]], 2)
    with pytest.raises(ValueError, match="scaling must be a posenc.RopeScaling"):
        decode.generate(graphdef, params, prompt, 2, scaling="yarn")
    for size in (0, -3, 10.5, 50.5, True):
        with pytest.raises(ValueError, match="cache_size must be a positive number of slots"):
            decode.teacher_forced_logits(graphdef, params, tokens(6), prefill_len=2, cache_size=size)
    with pytest.raises(ValueError, match="method must be a posenc.training_free.Method"):
        decode.teacher_forced_logits(graphdef, params, tokens(6), prefill_len=2, method="sinks")
    graphdef, params = model_parts("alibi")
    linear = posenc.RopeScaling("linear", 2.0)
    answer = np.zeros((2, 6), bool)
    answer[:, 4:] = True
    for call in (lambda: decode.generate(graphdef, params, prompt, 2, scaling=linear),
                 lambda: decode.teacher_forced_logits(graphdef, params, tokens(6), prefill_len=2, scaling=linear),
                 lambda: decode.recompute_logits(graphdef, params, tokens(6), scaling=linear),
                 lambda: decode.greedy_answers(graphdef, params, np.asarray(tokens(6)), answer, scaling=linear)):
        with pytest.raises(ValueError, match="a RoPE scaling does not apply to posenc='alibi'"):
            call()
    np.testing.assert_array_equal(decode.generate(graphdef, params, prompt, 3, seed=np.int64(7)),
                                  decode.generate(graphdef, params, prompt, 3, seed=7))


def test_greedy_generation_under_a_dynamic_scaling_is_the_recompute_s_argmax_chain():
    """One layer (where the cache is the recompute exactly): each greedy token under dynamic NTK, past L0, is
    the argmax of the recompute over its prefix; a larger cache than the request changes nothing."""
    graphdef, params = model_parts(**ONE_LAYER)
    prompt = tokens(5)
    out = decode.generate(graphdef, params, prompt, 30, temperature=0.0, scaling=DYNAMIC)
    full = decode.recompute_logits(graphdef, params, jnp.asarray(out), scaling=DYNAMIC)
    np.testing.assert_array_equal(out[:, 5:], np.argmax(full[:, 4:-1], axis=-1))
    np.testing.assert_array_equal(decode.generate(graphdef, params, prompt, 30, temperature=0.0, scaling=DYNAMIC,
                                                  cache_size=100), out)


@pytest.mark.parametrize("scaling", [None, DYNAMIC], ids=["static", "dynamic"])
def test_recompute_at_given_positions_is_the_full_recompute_there(scaling):
    graphdef, params = model_parts("rope")
    x = tokens(24)
    full = decode.recompute_logits(graphdef, params, x, scaling=scaling)
    at = [0, 15, 16, 23]
    np.testing.assert_array_equal(decode.recompute_logits(graphdef, params, x, scaling=scaling, positions=at),
                                  full[:, jnp.asarray(at)])
    with pytest.raises(ValueError, match=r"positions must lie in \[0, 24\)"):
        decode.recompute_logits(graphdef, params, x, scaling=scaling, positions=[24])
