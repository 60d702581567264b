"""The Transformer: every posenc runs, is causal, and treats positions as its encoding says."""

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import posenc
from posenc.encodings import POSENCS
from posenc.learned import interpolate_table
from posenc.model import ModelConfig, Transformer

TINY = dict(d_model=32, num_layers=2, num_heads=2, mlp_dim=64, max_len=16)


def make(posenc_name, **kw):
    return Transformer(ModelConfig(posenc=posenc_name, **{**TINY, **kw}), rngs=nnx.Rngs(0))


def tokens(b=2, t=16, seed=0):
    return jnp.asarray(np.random.default_rng(seed).integers(0, 256, size=(b, t)))


@pytest.mark.parametrize("name", POSENCS)
def test_forward_shapes_and_causality(name):
    model = make(name)
    x = tokens()
    logits = model(x)
    assert logits.shape == (2, 16, 256) and logits.dtype == jnp.float32
    assert np.all(np.isfinite(logits))
    changed = x.at[:, 10].set((x[:, 10] + 1) % 256)
    np.testing.assert_allclose(model(changed)[:, :10], logits[:, :10], atol=1e-5)  # the past ignores the future
    assert not np.allclose(model(changed)[:, 10:], logits[:, 10:])


@pytest.mark.parametrize("name,invariant", [("none", True), ("rope", True), ("alibi", True), ("sinusoidal", False),
                                            ("learned", False)])
def test_relative_encodings_are_translation_invariant(name, invariant):
    """Shifting every position by 5 changes nothing for relative encodings (RoPE, ALiBi, NoPE) — the
    seeds' ⟨f(q,m), f(k,n)⟩ = g(q, k, m−n) at model level — and changes absolute ones."""
    model = sharpen(make(name, max_len=32))
    x = tokens()
    base = model(x, jnp.arange(16)[None])
    shifted = model(x, jnp.arange(5, 21)[None])
    assert np.allclose(base, shifted, atol=1e-4) == invariant


@pytest.mark.parametrize("shape", [(16,), (1, 12), (3, 16), (1, 1, 16)])
def test_positions_of_another_shape_than_the_tokens_raise(shape):
    """positions are [B|1, T] for tokens [B, T]: a bare arange(T), another length or batch is named as such."""
    with pytest.raises(ValueError, match=rf"positions must be \[B\|1, T\] for tokens of shape \(2, 16\).*"
                                         rf"got shape {re.escape(str(shape))}"):
        make("alibi")(tokens(), jnp.zeros(shape, jnp.int32))


def test_learned_beyond_table_raises():
    model = make("learned")
    with pytest.raises(ValueError, match=r"undefined past its table.*max_len=16.*interpolate"):
        model(tokens(t=17))
    with pytest.raises(ValueError, match="max_len=16"):
        model(tokens(t=4), np.arange(14, 18)[None])  # concrete positions past the table


def test_learned_never_clamps_silently_under_jit():
    """JAX clamps out-of-range gathers; the table lookup fills NaN instead, so misuse cannot pass unseen."""
    model = make("learned")
    graphdef, state = nnx.split(model)
    f = jax.jit(lambda s, x, p: nnx.merge(graphdef, s)(x, p, seq_len=16))
    assert np.all(np.isfinite(f(state, tokens(t=4), jnp.arange(12, 16)[None])))
    out = f(state, tokens(t=4), jnp.arange(14, 18)[None])  # 16, 17 are past the table: NaN, not row 15
    assert np.all(np.isnan(out[:, 2:]))


def test_learned_interpolate_extension():
    model = make("learned", learned_beyond="interpolate")
    assert np.all(np.isfinite(model(tokens(t=40))))
    table = jnp.asarray(np.random.default_rng(0).normal(size=(16, 4)), jnp.float32)
    big = interpolate_table(table, 31)  # 15 gaps -> 30 gaps: every other row is an original row
    np.testing.assert_allclose(big[::2], table, atol=1e-6)
    np.testing.assert_allclose(big[1::2], (table[:-1] + table[1:]) / 2, atol=1e-6)


def sharpen(model, scale=30.0):
    """At init q·k is tiny and positions barely matter; scale the q/k/v kernels up so they do."""
    for block in model.blocks:
        block.attn.qkv.kernel[...] = block.attn.qkv.kernel[...] * scale
    return model


def test_rope_override_equals_configured_scaling():
    scaling = posenc.RopeScaling("yarn", 4.0, original_max_len=8)
    model = sharpen(make("rope", rope_scaling=scaling))
    inv, af = posenc.rope_frequencies(16, scaling=scaling)
    plain = sharpen(make("rope"))
    x = tokens()
    np.testing.assert_allclose(plain(x, rope=(jnp.asarray(inv, jnp.float32), af)), model(x), atol=1e-5)
    np.testing.assert_allclose(plain(x, rope=(jnp.asarray(inv, jnp.float32), af, 0)), model(x), atol=1e-5)  # with n̂
    assert np.abs(plain(x) - model(x)).max() > 1e-3 * np.abs(model(x)).max()


def test_per_layer_longrope_factors_reach_each_layer():
    factors = np.stack([np.ones(8), np.linspace(1, 4, 8)])
    sc = posenc.RopeScaling("longrope", 4.0, original_max_len=8, short_factor=np.ones((2, 8)), long_factor=factors)
    model = sharpen(make("rope", rope_scaling=sc))
    x = tokens(t=16)
    out = model(x)
    assert np.all(np.isfinite(out))
    for row in factors:  # either layer's factors on both layers gives another output: each layer takes its own row
        both = dataclasses.replace(sc, short_factor=np.ones(8), long_factor=row)
        assert np.abs(sharpen(make("rope", rope_scaling=both))(x) - out).max() > 1e-3 * np.abs(out).max()
    with pytest.raises(ValueError, match="num_layers"):
        make("rope", rope_scaling=dataclasses.replace(sc, short_factor=np.ones((3, 8)), long_factor=np.ones((3, 8))))


def test_chunked_and_block_causal_model_equal_plain():
    for name in ("rope", "alibi"):
        x = tokens(t=16)
        np.testing.assert_allclose(make(name, attn_chunk=5)(x), make(name)(x), atol=1e-5)
        np.testing.assert_allclose(make(name, attn_block=4)(x), make(name)(x), atol=1e-5)


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(posenc="cubic"), r"model.posenc must be one of \('none', 'sinusoidal'"),
        (dict(posenc="rope", d_model=30, num_heads=2), "rotary dimension"),  # head_dim 15: odd
        (dict(posenc="rope", rope_fraction=0.3), "rotary dimension"),
        (dict(posenc="rope", rope_layout="neox"), "layout must be one of"),
        (dict(d_model=30, num_heads=4), "divisible"),
        (dict(max_len=0), "max_len must be a positive"),
        (dict(learned_beyond="extrapolate"), "learned_beyond must be one of"),
        (dict(dtype="float16"), "dtype must be one of"),
        (dict(norm_eps=float("inf")), "norm_eps must be a finite number > 0, got inf"),  # would zero every norm
        (dict(norm_eps="1e-5"), "norm_eps must be a finite number > 0"),
        (dict(tie_embeddings="no"), "model.tie_embeddings must be True or False, got 'no'"),  # a truthy string
        (dict(qk_norm=1), "model.qk_norm must be True or False"),
        (dict(parallel_residual=None), "model.parallel_residual must be True or False"),
        (dict(posenc="alibi", rope_scaling=posenc.RopeScaling("linear", 2.0)),
         r"rope_scaling \(kind 'linear'\) does not apply to posenc='alibi'"),  # would be ignored
    ],
)
def test_bad_config_raises(kw, match):
    with pytest.raises(ValueError, match=match):
        ModelConfig(**{**TINY, **kw})


def test_a_rotary_fraction_of_a_hugging_face_head_comes_back_whole():
    """posenc.hf passes rotary_dim / head_dim: 14 / 100 * 100 is 14.000000000000002 in floating point."""
    assert ModelConfig(**{**TINY, "d_model": 200, "num_heads": 2, "rope_fraction": 14 / 100}).rotary_dim == 14
    assert ModelConfig(**{**TINY, "d_model": 200, "num_heads": 2, "rope_fraction": 28 / 100}).rotary_dim == 28


def test_dense_gradients_equal_float64_oracle():
    """`dense` (the layers' product with an XLA:CPU-friendly backward) has the gradients of x @ W:
    dx = dy Wᵀ and dW = Σ_tokens xᵀ dy, checked in float64 numpy for a batched input."""
    rng = np.random.default_rng(0)
    x, w, dy = rng.normal(size=(2, 5, 3)), rng.normal(size=(3, 4)), rng.normal(size=(2, 5, 4))
    with jax.enable_x64(True):
        y, vjp = jax.vjp(posenc.model.dense, jnp.asarray(x), jnp.asarray(w))
        dx, dw = vjp(jnp.asarray(dy))
    np.testing.assert_allclose(y, x @ w, rtol=1e-12)
    np.testing.assert_allclose(dx, dy @ w.T, rtol=1e-12)
    np.testing.assert_allclose(dw, np.einsum("btk,btn->kn", x, dy), rtol=1e-12)


def test_model_gradients_match_plain_dot():
    """The whole model's gradients with `dense` equal those of nnx.Linear's plain product (float32)."""
    model = make("rope")
    x = tokens()

    def loss(m):
        return jnp.mean(m(x) ** 2)

    grads = nnx.grad(loss)(model)
    plain = make("rope")
    for _, layer in nnx.iter_modules(plain):
        if isinstance(layer, nnx.Linear):
            layer.dot_general = jax.lax.dot_general
    plain_grads = nnx.grad(loss)(plain)
    for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(plain_grads), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def _compiled_dot_operands(hlo: str) -> list[tuple[str, ...]]:
    """The operand types of every `dot` in an optimised HLO module's text (fusion parameters included)."""

    types = {m.group(1): m.group(2) for m in re.finditer(r"%([\w.\-]+) = (\w+)\[", hlo)}
    types.update((m.group(1), m.group(2)) for m in re.finditer(r"%?([\w.\-]+): (\w+)\[", hlo))
    return [tuple(types[name] for name in m.groups())
            for m in re.finditer(r" dot\(%([\w.\-]+), %([\w.\-]+)\)", hlo)]


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA:CPU's choice of bf16 kernels is what is checked")
@pytest.mark.parametrize("tie", [False, True])
def test_bfloat16_training_step_compiles_to_bf16_products_on_cpu(tie):
    """XLA:CPU multiplies bf16 natively (AMX) only with a float32 result and the contraction of the left
    operand last; otherwise it upcasts both operands to float32. Every product of a bf16 training step —
    forward, weight gradients (xᵀ·dy) and attention's backward (dSᵀ·Q) included — keeps bf16 operands."""
    import optax

    cfg = ModelConfig(d_model=32, num_layers=1, num_heads=2, mlp_dim=64, dtype="bfloat16", attn_block=16,
                      tie_embeddings=tie)
    graphdef, params = nnx.split(Transformer(cfg, rngs=nnx.Rngs(0)))
    x = jnp.asarray(np.random.RandomState(0).randint(0, 256, (2, 64)))

    def loss(p):
        return optax.softmax_cross_entropy_with_integer_labels(nnx.merge(graphdef, p)(x), x).mean()

    operands = _compiled_dot_operands(jax.jit(jax.grad(loss)).lower(params).compile().as_text())
    assert len(operands) > 10
    assert [o for o in operands if o != ("bf16", "bf16")] == [("f32", "f32")]  # RoPE's exact 2×2 identity


def test_activation_dtype_resolves_auto_by_backend_and_rejects_narrowing():
    from posenc.model import activation_dtype

    cfg = ModelConfig(d_model=32, num_layers=1, num_heads=2, mlp_dim=64, dtype="bfloat16")
    assert activation_dtype(cfg, backend="gpu") == jnp.bfloat16 and activation_dtype(cfg, backend="cpu") == jnp.float32
    assert activation_dtype(dataclasses.replace(cfg, act_dtype="float32"), backend="gpu") == jnp.float32
    assert activation_dtype(dataclasses.replace(cfg, act_dtype="bfloat16"), backend="cpu") == jnp.bfloat16
    assert activation_dtype(dataclasses.replace(cfg, dtype="float32"), backend="gpu") == jnp.float32
    with pytest.raises(ValueError, match=r"model.act_dtype must be one of \['auto', 'float32'\] with model.dtype='float32'"):
        ModelConfig(d_model=32, num_layers=1, num_heads=2, mlp_dim=64, act_dtype="bfloat16")
    with pytest.raises(ValueError, match="model.act_dtype must be one of"):
        dataclasses.replace(cfg, act_dtype="float16")


@pytest.mark.parametrize("field", ["attn_chunk", "attn_block", "attn_key_block"])
@pytest.mark.parametrize("value", [True, 2.5, -1])
def test_attention_tiling_fields_take_integers_only(field, value):
    """A bool is not a size (True would tile one query or key at a time), nor is a fraction or a negative."""
    cfg = ModelConfig(d_model=32, num_layers=1, num_heads=2, mlp_dim=64)
    assert dataclasses.replace(cfg, **{field: np.int64(4)}).__getattribute__(field) == 4
    with pytest.raises(ValueError, match=rf"model.{field} must be an integer >= 0 \(0 = .*\), got {value!r}"):
        dataclasses.replace(cfg, **{field: value})


@pytest.mark.parametrize("kw", [{}, {"mlp_act": "swiglu", "parallel_residual": True}])
def test_bf16_activations_keep_the_residual_stream_in_bf16_close_to_float32(kw):
    """act_dtype=bfloat16 (what `auto` gives on a GPU): every block's output, so the residual stream, is bf16;
    the logits stay float32 and close to the float32-activation model's; gradients are float32 and finite.
    On a CPU, `auto` is float32 activations: the same numbers as act_dtype=float32."""
    import optax

    cfg = ModelConfig(d_model=32, num_layers=2, num_heads=2, mlp_dim=64, dtype="bfloat16", **kw)
    x = jnp.asarray(np.random.RandomState(0).randint(0, 256, (2, 32)))
    models = {a: Transformer(dataclasses.replace(cfg, act_dtype=a), rngs=nnx.Rngs(0)) for a in
              ("auto", "float32", "bfloat16")}
    block_out = models["bfloat16"].blocks[0](jnp.ones((2, 32, 32), jnp.bfloat16), jnp.arange(32)[None],
                                             models["bfloat16"].encoding, models["bfloat16"].encoding.context(
                                                 jnp.arange(32)[None], 32, None), 0)[0]
    assert block_out.dtype == jnp.bfloat16
    logits = {a: nnx.jit(lambda m: m(x))(m) for a, m in models.items()}
    assert all(v.dtype == jnp.float32 for v in logits.values())
    if jax.default_backend() == "cpu":
        np.testing.assert_array_equal(logits["auto"], logits["float32"])
    err = float(jnp.abs(logits["bfloat16"] - logits["float32"]).max())
    assert 0 < err < 0.05 * float(jnp.abs(logits["float32"]).max())  # rounded, and only by bf16's precision

    def loss(model):
        return optax.softmax_cross_entropy_with_integer_labels(model(x), x).mean()

    value_and_grad = nnx.jit(nnx.value_and_grad(loss))
    (losses, grads) = zip(*(value_and_grad(models[a]) for a in ("bfloat16", "float32")))
    assert all(g.dtype == jnp.float32 and jnp.isfinite(g).all() for g in jax.tree.leaves(nnx.state(grads[0], nnx.Param)))
    flat = [np.concatenate([np.ravel(g) for g in jax.tree.leaves(nnx.state(g, nnx.Param))]) for g in grads]
    cosine = flat[0] @ flat[1] / np.linalg.norm(flat[0]) / np.linalg.norm(flat[1])
    assert 0.99 < cosine < 1 - 1e-9  # the same direction, bf16-rounded
    assert abs(float(losses[0]) - float(losses[1])) < 0.02 * float(losses[1])


@pytest.mark.parametrize("kw", [{}, {"tie_embeddings": True, "norm": "layer", "qk_norm": True},
                                {"posenc": "alibi"}, {"posenc": "sinusoidal"}], ids=str)
def test_bf16_activations_run_every_path_within_bf16_of_float32_activations(kw):
    """act_dtype=bfloat16 through the full pass, cached decoding (a prefill, then one token at a time) and a
    training-free method (RoPE: Self-Extend): each within bf16's precision of the same path with float32
    activations, and cached decoding as close to the full pass."""
    from posenc import decode
    from posenc.training_free import Method

    cfg = ModelConfig(d_model=32, num_layers=2, num_heads=2, mlp_dim=64, dtype="bfloat16", max_len=16, **kw)
    x = jnp.asarray(np.random.RandomState(1).randint(0, 256, (2, 24)), jnp.int32)
    paths = {}
    for act in ("float32", "bfloat16"):
        model = Transformer(dataclasses.replace(cfg, act_dtype=act), rngs=nnx.Rngs(0))
        graphdef, params = nnx.split(model)
        paths[act] = {"full": decode.recompute_logits(graphdef, params, x),
                      "cached": decode.teacher_forced_logits(graphdef, params, x, prefill_len=5)}
        if cfg.posenc == "rope":
            paths[act]["self_extend"] = model(x, method=Method("self_extend", window=8, group=3).args(cfg.encoding))
    scale = float(jnp.abs(paths["float32"]["full"]).max())
    for path, ref in paths["float32"].items():
        err = float(jnp.abs(paths["bfloat16"][path] - ref).max())
        assert 0 < err < 0.05 * scale, (path, err, scale)
    assert float(jnp.abs(paths["bfloat16"]["cached"] - paths["bfloat16"]["full"]).max()) < 0.05 * scale


def test_dense_dot_general_rejects_other_products():
    with pytest.raises(NotImplementedError, match="plain"):
        posenc.model.dense_dot_general(jnp.ones((2, 3)), jnp.ones((2, 4)), (((0,), (0,)), ((), ())))


def test_bfloat16_is_mixed_precision_float32_parameters_bf16_products():
    """model.dtype=bfloat16: parameters (and so their gradients and the optimizer state) stay float32, every
    product runs on bf16 operands, and the loss is float32 and close to the float32 model's."""
    import optax

    cfg32 = ModelConfig(d_model=32, num_layers=1, num_heads=2, mlp_dim=64)
    cfg16 = dataclasses.replace(cfg32, dtype="bfloat16")
    m32, m16 = Transformer(cfg32, rngs=nnx.Rngs(0)), Transformer(cfg16, rngs=nnx.Rngs(0))
    x = jnp.asarray(np.random.RandomState(0).randint(0, 256, (2, 32)))

    def loss(model):
        return optax.softmax_cross_entropy_with_integer_labels(model(x), x).mean()

    assert all(p.dtype == jnp.float32 for p in jax.tree.leaves(nnx.state(m16, nnx.Param)))

    def dots(jaxpr):  # the operand avals of every dot_general, nested jaxprs (custom VJPs, pjit) included
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "dot_general":
                yield [v.aval for v in eqn.invars]
            for value in eqn.params.values():
                for sub in value if isinstance(value, (tuple, list)) else (value,):
                    inner = getattr(sub, "jaxpr", sub)
                    if hasattr(inner, "eqns"):
                        yield from dots(inner)

    graphdef, params = nnx.split(m16)
    found = list(dots(jax.make_jaxpr(jax.grad(lambda p: loss(nnx.merge(graphdef, p))))(params).jaxpr))
    f32 = [a for a in found if any(v.dtype == jnp.float32 for v in a)]
    assert len(found) > 10 and len(found) - len(f32) > 10
    assert all(any(v.shape == (2, 2) for v in a) for a in f32), f32  # only RoPE's exact 2×2 identity (_materialize)
    grads = nnx.grad(loss)(m16)
    assert all(g.dtype == jnp.float32 and jnp.isfinite(g).all() for g in jax.tree.leaves(nnx.state(grads, nnx.Param)))
    l16, l32 = float(loss(m16)), float(loss(m32))
    assert jnp.asarray(loss(m16)).dtype == jnp.float32 and abs(l16 - l32) < 0.02 * l32


def test_decoding_past_the_end_of_the_cache_is_an_error_or_nan_never_an_overwritten_slot():
    """A layer without a window needs a slot per token: more new tokens than slots is a ValueError from the
    shapes; a cache outside jit tells its fill, so overflowing it is a ValueError; under jit (a traced
    cache) the step that overflows it, and every later one, gives NaN logits instead of silently
    overwriting the last slot."""
    model = make("rope")
    x = tokens(b=1, t=6)
    with pytest.raises(ValueError, match="KV cache: 5 new tokens do not fit its 4 slots"):
        model(x[:, :5], jnp.arange(5)[None], cache=model.init_cache(1, 4))
    _, cache = model(x[:, :3], jnp.arange(3)[None], cache=model.init_cache(1, 4))  # eager: a concrete cache
    with pytest.raises(ValueError, match="KV cache: 3 cached \\+ 2 new tokens do not fit its 4 slots"):
        model(x[:, 3:5], jnp.arange(3, 5)[None], cache=cache)
    graphdef, params = nnx.split(model)
    step = jax.jit(lambda tok, pos, cache: nnx.merge(graphdef, params)(tok, pos, seq_len=6, cache=cache))
    logits, cache = step(x[:, :3], jnp.arange(3)[None], model.init_cache(1, 4))
    outs = [logits]
    for p in range(3, 6):
        logits, cache = step(x[:, p:p + 1], jnp.array([[p]]), cache)
        outs.append(logits)
    outs = jnp.concatenate(outs, axis=1)
    np.testing.assert_allclose(outs[:, :4], model(x[:, :4]), atol=2e-5, rtol=1e-5)  # within the cache: exact
    assert np.isnan(outs[:, 4:]).all()  # positions 4 and 5 have no slot


def test_a_windowed_or_bounded_cache_decodes_past_its_slots():
    """Ring caches (a windowed layer; lm_infinite / sinks) are meant to wrap: no error and no NaN past their
    slots."""
    model = make("rope", attn_window=3)
    x = tokens(b=1, t=8)
    _, cache = model(x[:, :3], jnp.arange(3)[None], cache=model.init_cache(1, 3))
    for p in range(3, 8):
        logits, cache = model(x[:, p:p + 1], jnp.array([[p]]), cache=cache)
    np.testing.assert_allclose(logits[:, -1], model(x)[:, -1], atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("impl", ["xla", "cudnn"])
def test_a_fused_kernel_asked_for_on_the_kv_cache_path_is_refused_naming_the_field(impl, monkeypatch):
    """jax.nn.dot_product_attention cannot attend a KV cache (its causal mask assumes positions 0 … T−1 for
    queries and keys alike): an explicit model.attn_impl='xla' or 'cudnn' there is a ValueError naming the field,
    why and the values that apply — also on a GPU (faked: `implementation` told backend='gpu'), where 'cudnn' is
    otherwise honoured — not decoding silently with posenc's attention. 'auto' and 'posenc' decode."""
    from posenc import attention as attention_mod  # noqa: PLC0415
    from posenc import model as model_mod  # noqa: PLC0415

    monkeypatch.setattr(model_mod, "implementation",
                        lambda *a, **kw: attention_mod.implementation(*a, **kw, backend="gpu"))
    x = tokens(b=1, t=4)
    model = make("rope", attn_impl=impl, dtype="bfloat16", act_dtype="bfloat16")
    with pytest.raises(ValueError, match=rf"model.attn_impl='{impl}'.*a KV cache.*use 'auto' or 'posenc'"):
        model(x, cache=model.init_cache(1, 4))
    for ok in ("auto", "posenc"):
        model = make("rope", attn_impl=ok)
        logits, _ = model(x, cache=model.init_cache(1, 4))
        np.testing.assert_allclose(logits, make("rope", attn_impl="posenc")(x), atol=2e-5, rtol=1e-5)
