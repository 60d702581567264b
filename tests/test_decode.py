"""Cached decoding equals the full forward pass for every encoding, static and dynamic scalings included."""

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import posenc
from posenc import decode
from posenc.model import ModelConfig, Transformer

TINY = dict(d_model=32, num_layers=2, num_heads=2, mlp_dim=64, max_len=16)
SHORT, LONG = np.ones(8), np.linspace(1.0, 6.0, 8)


def model_parts(posenc_name="rope", **kw):
    model = Transformer(ModelConfig(posenc=posenc_name, **{**TINY, **kw}), rngs=nnx.Rngs(0))
    for block in model.blocks:  # sharpen attention so that positions matter at init
        block.attn.qkv.kernel[...] = block.attn.qkv.kernel[...] * 8
    return nnx.split(model)


def tokens(t, b=2):
    return jnp.asarray(np.random.default_rng(1).integers(0, 256, size=(b, t)), jnp.int32)


CASES = [
    ("none", {}, None),
    ("sinusoidal", {}, None),
    ("learned", {}, None),
    ("alibi", {}, None),
    ("t5", {}, None),
    ("kerple", {}, None),
    ("fire", {}, None),
    ("xpos", {}, None),
    ("p_rope", {}, None),
    ("local_global", {"encoding_options": (("window", 8),)}, None),
    ("local_global", {"encoding_options": (("pattern", "LLG"), ("window", 5))},
     posenc.RopeScaling("dynamic_ntk", 2.0, original_max_len=16)),
    ("rope", {}, None),
    ("rope", {"rope_layout": "interleaved", "rope_fraction": 0.5}, None),
    ("rope", {}, posenc.RopeScaling("yarn", 4.0, original_max_len=16)),
    ("rope", {}, posenc.RopeScaling("linear", 2.0)),
    ("rope", {}, posenc.RopeScaling("dynamic_ntk", 2.0, original_max_len=16)),
    ("rope", {}, posenc.RopeScaling("yarn", original_max_len=16, dynamic=True)),
    ("rope", {}, posenc.RopeScaling("longrope", 3.0, original_max_len=16, short_factor=SHORT, long_factor=LONG)),
    ("rope", {}, posenc.RopeScaling("longrope", 3.0, original_max_len=16, short_factor=SHORT, long_factor=LONG,
                                    unscaled_positions=4)),
]


@pytest.mark.parametrize("name,kw,scaling", CASES, ids=lambda c: str(getattr(c, "kind", c)))
def test_cached_decoding_equals_full_recompute(name, kw, scaling):
    graphdef, params = model_parts(name, **kw)
    t = 16 if name == "learned" else 40  # 40 > original_max_len / max_len = 16: past the training length
    x = tokens(t)
    cached = decode.teacher_forced_logits(graphdef, params, x, prefill_len=5, scaling=scaling)
    full = decode.recompute_logits(graphdef, params, x, scaling=scaling)
    assert cached.shape == full.shape == (2, t, 256)
    np.testing.assert_allclose(cached, full, atol=2e-4, rtol=1e-4)


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
    """Caching keys rotated at the step they were computed (HF's behaviour) is not the recompute: the test
    above can tell the two apart."""
    scaling = posenc.RopeScaling("dynamic_ntk", 2.0, original_max_len=16)
    graphdef, params = model_parts("rope")
    x = tokens(40)
    full = decode.recompute_logits(graphdef, params, x, scaling=scaling)
    model = nnx.merge(graphdef, params)
    schedule = decode.rope_schedule(model.cfg, scaling, 40)
    cache = model.init_cache(2, 40, rotate_at_use=False)  # keys frozen with the frequencies of their step
    call = jax.jit(lambda x, pos, rope, cache: nnx.merge(graphdef, params)(x, pos, seq_len=40, rope=rope, cache=cache))
    logits, cache = call(x[:, :5], jnp.arange(5)[None], schedule.at(4, 0), cache)
    outs = [logits]
    for p in range(5, 40):  # one compile for the steps: the position, its frequencies and the cache are traced
        step, cache = call(x[:, p:p + 1], jnp.array([[p]]), schedule.at(p, 0), cache)
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
    with pytest.raises(ValueError, match=r"top_k must be in \[0, vocab_size=256\]"):
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
                                  jnp.int32(0), seq_len=64)
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
        return nnx.merge(graphdef, params)(token, jnp.array([[5]]), seq_len=64, rope=schedule.at(5, 0), cache=cache)

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
