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
