"""p-RoPE: frequencies equal transformers' `proportional` rope type; p = 1 is RoPE and p = 0 is NoPE."""

import json
import pathlib

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import posenc
from posenc.model import ModelConfig, Transformer
from posenc.p_rope import PRope

REF = json.loads((pathlib.Path(__file__).parent / "data" / "encoding_reference.json").read_text())["p_rope"]


@pytest.mark.parametrize("case", REF, ids=lambda c: f"{c['head_dim']}-{c['p']}")
def test_frequencies_equal_transformers_proportional(case):
    head_dim = case["head_dim"]
    cfg = ModelConfig(posenc="p_rope", d_model=2 * head_dim, num_heads=2, num_layers=1, mlp_dim=8,
                      encoding_options=(("p", case["p"]),))
    ctx = PRope(cfg, rngs=nnx.Rngs(0)).context(jnp.arange(4)[None], 4)
    np.testing.assert_allclose(np.asarray(ctx.inv_freq), case["inv_freq"], rtol=1e-6, atol=0)


def test_float64_oracle_and_limits():
    head_dim, p = 16, 0.5
    theta = 10000.0 ** (-np.arange(0, head_dim, 2) / head_dim)
    expected = np.where(np.arange(head_dim // 2) < int(p * head_dim // 2), theta, 0.0)
    cfg = ModelConfig(posenc="p_rope", d_model=32, num_heads=2, num_layers=1, mlp_dim=8, encoding_options=(("p", p),))
    np.testing.assert_allclose(np.asarray(PRope(cfg, rngs=nnx.Rngs(0)).context(None, 8).inv_freq), expected, rtol=1e-6)

    def model(posenc_name, **opts):
        m = Transformer(ModelConfig(posenc=posenc_name, d_model=32, num_heads=2, num_layers=2, mlp_dim=64,
                                    encoding_options=tuple(opts.items())), rngs=nnx.Rngs(0))
        for block in m.blocks:
            block.attn.qkv.kernel[...] = block.attn.qkv.kernel[...] * 8
        return m

    x = jnp.asarray(np.random.default_rng(0).integers(0, 256, size=(2, 24)))
    np.testing.assert_allclose(model("p_rope", p=1.0)(x), model("rope")(x), atol=1e-6)  # p = 1: RoPE
    np.testing.assert_allclose(model("p_rope", p=0.0)(x), model("none")(x), atol=1e-6)  # p = 0: NoPE
    with pytest.raises(ValueError, match="model.p_rope.p must be in"):
        ModelConfig(posenc="p_rope", encoding_options=(("p", 1.5),))
    with pytest.raises(ValueError, match="model.rope.fraction must be 1.0"):
        ModelConfig(posenc="p_rope", rope_fraction=0.5)
    assert posenc.rope_frequencies(16)[0].shape == (8,)


def test_frozen_pairs_stay_unrotated_under_longrope_n_hat():
    """The pairs p-RoPE freezes pass through at every position, the first n̂ too (where LongRoPE takes the
    unscaled θ): 4 pairs, p = 0.5, so pairs 2 and 3 never rotate; the rotating pairs below n̂ turn by the
    unscaled θ, above it by the scaled one."""
    from posenc.rope_scaling import RopeScaling, rope_inputs

    cfg = ModelConfig(posenc="p_rope", d_model=16, num_heads=2, num_layers=1, mlp_dim=8,
                      encoding_options=(("p", 0.5),))
    enc = PRope(cfg, rngs=nnx.Rngs(0))
    factors = np.array([1.0, 2.0, 4.0, 8.0])
    sc = RopeScaling("longrope", 4.0, original_max_len=16, short_factor=np.ones(4), long_factor=factors,
                     attention_factor=1.0, unscaled_positions=8)
    positions = jnp.arange(32)[None]
    ctx = enc.context(positions, 32, rope=rope_inputs(cfg.rotary_dim, cfg.rope_base, sc, 32))
    x = jnp.asarray(np.random.default_rng(0).normal(size=(1, 32, 1, 8)), jnp.float32)
    y = np.asarray(enc.rotate(x, positions, ctx, 0, "q"))
    # half layout: pair i is features (i, i + 4); pairs 2, 3 are features 2, 3, 6, 7
    frozen = [2, 3, 6, 7]
    np.testing.assert_array_equal(y[..., frozen], np.asarray(x)[..., frozen])
    theta = 10000.0 ** (-np.arange(0, 8, 2) / 8)
    for p, scale in ((5, 1.0), (20, factors[1])):  # pair 1: unscaled below n̂ = 8, θ / 2 above
        angle = p * theta[1] / scale
        x1, x5 = np.asarray(x)[0, p, 0, 1], np.asarray(x)[0, p, 0, 5]
        np.testing.assert_allclose(y[0, p, 0, [1, 5]], [x1 * np.cos(angle) - x5 * np.sin(angle),
                                                        x5 * np.cos(angle) + x1 * np.sin(angle)], rtol=1e-5, atol=1e-6)
