"""apply_rope: float64 oracles and the seeds' RoPE derivations as properties (seeds/004, "RoPE")."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import posenc

RNG = np.random.default_rng(0)


def rotation_matrix(m, inv_freq, head_dim, layout):
    """The explicit block-diagonal R(m) of the seeds, float64 [H, H], in the given layout."""
    r = len(inv_freq)
    mat = np.eye(head_dim)
    for i, theta in enumerate(inv_freq):
        a, b = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + r)
        c, s = np.cos(m * theta), np.sin(m * theta)
        mat[a, a], mat[a, b], mat[b, a], mat[b, b] = c, -s, s, c
    return mat


def rope64(x, positions, inv_freq, layout="half", attention_factor=1.0):
    with jax.enable_x64(True):
        out = posenc.apply_rope(jnp.asarray(x, jnp.float64), jnp.asarray(positions), jnp.asarray(inv_freq, jnp.float64),
                                layout=layout, attention_factor=attention_factor)
        return np.asarray(out)


@pytest.mark.parametrize("layout", posenc.LAYOUTS)
@pytest.mark.parametrize("head_dim,rotary_dim", [(8, 8), (16, 8), (12, 4)])
def test_equals_block_diagonal_rotation_matrix(layout, head_dim, rotary_dim):
    inv_freq = posenc.rope_frequencies(rotary_dim, base=100.0)[0]
    x = RNG.normal(size=(2, 5, 3, head_dim))
    positions = RNG.integers(0, 5000, size=(2, 5))
    out = rope64(x, positions, inv_freq, layout)
    for b in range(2):
        for t in range(5):
            expected = x[b, t] @ rotation_matrix(positions[b, t], inv_freq, head_dim, layout).T
            np.testing.assert_allclose(out[b, t], expected, rtol=0, atol=1e-12)


def test_equals_complex_number_form():
    """Seeds: f(x, m) = x · e^{imθ} with x_(i) = x_{2i} + i x_{2i+1} (interleaved pairs)."""
    inv_freq = posenc.rope_frequencies(16)[0]
    x = RNG.normal(size=(7, 2, 16))
    positions = np.arange(7) * 37
    out = rope64(x, positions, inv_freq, "interleaved")
    z = (x[..., 0::2] + 1j * x[..., 1::2]) * np.exp(1j * positions[:, None, None] * inv_freq)
    np.testing.assert_allclose(out[..., 0::2], z.real, atol=1e-12)
    np.testing.assert_allclose(out[..., 1::2], z.imag, atol=1e-12)


@pytest.mark.parametrize("layout", posenc.LAYOUTS)
def test_inner_product_depends_only_on_relative_position(layout):
    """Seeds, property 1: ⟨f(q, m), f(k, n)⟩ = g(q, k, m − n)."""
    inv_freq = posenc.rope_frequencies(32)[0]
    q, k = RNG.normal(size=(1, 1, 32)), RNG.normal(size=(1, 1, 32))
    scores = {}
    for m, n in [(5, 2), (103, 100), (10003, 10000), (3, 0), (0, 3), (1000, 1003)]:
        dot = float(np.sum(rope64(q, [m], inv_freq, layout) * rope64(k, [n], inv_freq, layout)))
        scores.setdefault(m - n, []).append(dot)
    for rel, values in scores.items():
        np.testing.assert_allclose(values, values[0], rtol=1e-10, err_msg=f"m - n = {rel}")
    assert not np.isclose(scores[3][0], scores[-3][0])  # and it does depend on the relative position


@pytest.mark.parametrize("layout", posenc.LAYOUTS)
def test_norm_preserved_and_position_zero_is_identity(layout):
    """Seeds, property 3: rotations are isometries; R(0) = I."""
    inv_freq = posenc.rope_frequencies(64)[0]
    x = RNG.normal(size=(3, 50, 4, 64))
    positions = RNG.integers(0, 100000, size=(3, 50))
    out = rope64(x, positions, inv_freq, layout)
    np.testing.assert_allclose(np.linalg.norm(out, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-12)
    np.testing.assert_array_equal(rope64(x, np.zeros((3, 50), int), inv_freq, layout), x)


def test_half_and_interleaved_agree_up_to_a_permutation():
    """half pairs (i, i + d/2); interleaved pairs (2i, 2i + 1): the same rotation in permuted features."""
    d = 16
    inv_freq = posenc.rope_frequencies(d)[0]
    perm = np.stack([np.arange(d // 2), np.arange(d // 2) + d // 2], axis=-1).reshape(-1)  # half -> interleaved
    x = RNG.normal(size=(9, 2, d))
    positions = np.arange(9) * 11
    half = rope64(x, positions, inv_freq, "half")
    inter = rope64(x[..., perm], positions, inv_freq, "interleaved")
    np.testing.assert_allclose(half[..., perm], inter, atol=1e-12)
    assert not np.allclose(half, rope64(x, positions, inv_freq, "interleaved"))


@pytest.mark.parametrize("layout", posenc.LAYOUTS)
def test_partial_rotary_leaves_tail_untouched(layout):
    inv_freq = posenc.rope_frequencies(8)[0]
    x = RNG.normal(size=(4, 3, 20)).astype(np.float32)
    out = np.asarray(posenc.apply_rope(x, np.arange(4) + 7, inv_freq, layout=layout))
    np.testing.assert_array_equal(out[..., 8:], x[..., 8:])
    assert not np.allclose(out[..., :8], x[..., :8])


def test_attention_factor_scales_rotated_features_only():
    inv_freq = posenc.rope_frequencies(8)[0]
    x = RNG.normal(size=(4, 3, 12))
    out = rope64(x, np.arange(4), inv_freq, attention_factor=1.5)
    ref = rope64(x, np.arange(4), inv_freq)
    np.testing.assert_allclose(out[..., :8], 1.5 * ref[..., :8], atol=1e-12)
    np.testing.assert_array_equal(out[..., 8:], x[..., 8:])


@pytest.mark.parametrize("layout", posenc.LAYOUTS)
def test_jit_and_no_jit_agree(layout):
    inv_freq = jnp.asarray(posenc.rope_frequencies(32)[0], jnp.float32)
    x = jnp.asarray(RNG.normal(size=(2, 16, 4, 32)), jnp.float32)
    positions = jnp.asarray(RNG.integers(0, 4096, size=(2, 16)))
    eager = posenc.apply_rope(x, positions, inv_freq, layout=layout)
    jitted = jax.jit(lambda a, p, f: posenc.apply_rope(a, p, f, layout=layout))(x, positions, inv_freq)
    np.testing.assert_allclose(np.asarray(eager), np.asarray(jitted), atol=2e-6)


def test_positions_broadcast_and_offsets():
    """Positions are data: a KV-cache offset is the same rotation as the slice of a longer sequence."""
    inv_freq = posenc.rope_frequencies(16)[0]
    x = RNG.normal(size=(2, 10, 3, 16))
    full = rope64(x, np.arange(10)[None], inv_freq)  # [1, T] broadcast over the batch
    tail = rope64(x[:, 6:], np.arange(6, 10)[None], inv_freq)
    np.testing.assert_allclose(full[:, 6:], tail, atol=1e-12)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_precision_at_large_positions(dtype):
    """Angles are never computed in bf16: positions up to 1e6 against a float64 reference.

    Stated tolerance: a float32 angle p·θ is off by at most ~2 ulp, |p·θ| · 2^-23 (rounding of θ and of
    the product), so each output feature is off by |x| times that; a bf16 result adds its own rounding,
    |x| · 2^-8. A bf16 *angle* (8-bit mantissa) would be off by whole radians past p ≈ 500 and fail.
    """
    d = 64
    inv_freq = posenc.rope_frequencies(d)[0]
    positions = np.array([0, 1, 1000, 65535, 500001, 1000000])
    x = jnp.asarray(RNG.normal(size=(6, 2, d)), dtype)
    x64 = np.asarray(x.astype(jnp.float32), np.float64)
    ref = rope64(x64, positions, inv_freq, "half")
    out = posenc.apply_rope(x, positions, inv_freq, layout="half")
    assert out.dtype == dtype
    out = np.asarray(out.astype(jnp.float32), np.float64)
    angle_err = np.abs(positions)[:, None] * np.concatenate([inv_freq, inv_freq]) * 2.0**-23  # [T, d]
    tol = np.abs(x64).max() * (angle_err[:, None, :] + (2.0**-8 if dtype == jnp.bfloat16 else 2.0**-22))
    assert np.all(np.abs(out - ref) <= tol), np.max(np.abs(out - ref) - tol)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(layout="rotate"), "layout"),
        (dict(inv_freq=np.ones(5)), "rotary_dim"),  # 2·5 > head_dim 8
        (dict(inv_freq=np.ones((2, 2))), "inv_freq"),
        (dict(positions=np.arange(3)), "positions"),
        (dict(x=np.ones((4, 8))), "x must be"),
    ],
)
def test_bad_inputs_raise(kwargs, match):
    args = dict(x=np.ones((4, 2, 8), np.float32), positions=np.arange(4), inv_freq=np.ones(4), layout="half")
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        posenc.apply_rope(args.pop("x"), args.pop("positions"), args.pop("inv_freq"), **args)


@pytest.mark.parametrize("d", [2, 16, 64, 128])
def test_roformer_decay_bound_at_zero_and_its_decay(d):
    """Seeds, property 2 (long-range decay): RoFormer's bound is (d/2 + 1)/2 at r = 0 and decays with r."""
    bound = posenc.rope.relative_decay_bound(np.array([0.0]), d)
    assert bound[0] == (d // 2 + 1) / 2
    if d >= 16:
        curve = posenc.rope.relative_decay_bound(np.arange(0, 2000), d)
        assert curve[0] == curve.max()
        assert curve[1000:].mean() < 0.5 * curve[0] and curve[10:100].mean() < curve[:10].mean()


def test_longrope_initial_positions_keep_unscaled_frequencies():
    """LongRoPE's n̂: positions p < n̂ rotate with the original θ, the rest with the rescaled θ / λ."""
    theta = posenc.rope_frequencies(16)[0]
    scaled = theta / np.linspace(1, 4, 8)
    x = RNG.normal(size=(10, 2, 16))
    positions = np.arange(10)
    with jax.enable_x64(True):
        out = np.asarray(posenc.apply_rope(jnp.asarray(x), positions, jnp.asarray(scaled), original_inv_freq=jnp.asarray(theta),
                                           unscaled_positions=4))
    np.testing.assert_allclose(out[:4], rope64(x, positions, theta)[:4], atol=1e-12)
    np.testing.assert_allclose(out[4:], rope64(x, positions, scaled)[4:], atol=1e-12)
    with pytest.raises(ValueError, match="original_inv_freq"):
        posenc.apply_rope(x, positions, scaled, original_inv_freq=theta[:4], unscaled_positions=4)


def test_longrope_initial_positions_take_no_attention_factor():
    """The first n̂ positions take the original cos/sin without the attention factor, the rest the rescaled ones
    times it, as microsoft/LongRoPE's start-token path (rope/LlamaSPIScaledStartTokenRotaryEmbedding.py copies
    the unscaled LlamaRotaryEmbedding's cos/sin, without mscale, over the first start_token positions): a
    float64 oracle of the tables and of the rotation."""
    from posenc.rope import rope_cos_sin  # noqa: PLC0415

    theta = posenc.rope_frequencies(16)[0]
    scaled = theta / np.linspace(1, 4, 8)
    positions = np.arange(10)
    af = 1.2
    with jax.enable_x64(True):
        cos, sin = rope_cos_sin(jnp.asarray(positions), jnp.asarray(scaled), attention_factor=af,
                                original_inv_freq=jnp.asarray(theta), unscaled_positions=4)
        x = RNG.normal(size=(10, 2, 16))
        out = np.asarray(posenc.apply_rope(jnp.asarray(x), positions, jnp.asarray(scaled), attention_factor=af,
                                           original_inv_freq=jnp.asarray(theta), unscaled_positions=4))
    below = positions[:, None] < 4
    angles = np.where(below, positions[:, None] * theta, positions[:, None] * scaled)
    scale = np.where(below, 1.0, af)
    np.testing.assert_allclose(np.asarray(cos), np.cos(angles) * scale, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(np.asarray(sin), np.sin(angles) * scale, rtol=1e-13, atol=1e-13)
    assert np.all(np.asarray(cos)[0] == 1.0)  # position 0: cos 0 = 1, not the attention factor
    np.testing.assert_allclose(out[:4], rope64(x, positions, theta)[:4], atol=1e-12)
    np.testing.assert_allclose(out[4:], rope64(x, positions, scaled, attention_factor=af)[4:], atol=1e-12)
    cos32, _ = rope_cos_sin(jnp.arange(8), np.float32(scaled), attention_factor=jnp.float32(af),
                            original_inv_freq=np.float32(theta), unscaled_positions=jnp.int32(4))  # traced, float32
    assert cos32.dtype == jnp.float32 and np.all(np.asarray(cos32)[0] == 1.0)
    np.testing.assert_allclose(np.asarray(cos32)[5], af * np.cos(5 * scaled), rtol=1e-5)


def test_angles_stay_exact_at_a_million_positions():
    """float32 RoPE with range-reduced angles and θ's float64 residual is within 2e-3 of float64 up to
    position 2·10⁶ (rounding p·θ directly in float32 is off by ~0.03 at 10⁶, as in HF and MaxText)."""
    from posenc.rope import rope_angles  # noqa: PLC0415
    from posenc.rope_scaling import inv_freq_residual, rope_inputs  # noqa: PLC0415

    inv64 = posenc.rope_frequencies(128)[0]
    inv32, _, _, lo = rope_inputs(128, 10000.0, None, 8)
    np.testing.assert_array_equal(lo, inv_freq_residual(inv64))
    x = np.random.default_rng(0).normal(size=(7, 1, 128))
    pos = np.array([0, 7, 4095, 4096, 10**5, 10**6, 2 * 10**6])
    ours = np.asarray(posenc.apply_rope(x.astype(np.float32), pos, inv32, inv_freq_lo=lo))
    naive = np.asarray(posenc.apply_rope(x.astype(np.float32), pos.astype(np.float32), inv32))  # p·θ directly
    with jax.enable_x64(True):
        exact = np.asarray(posenc.apply_rope(jnp.asarray(x), jnp.asarray(pos), jnp.asarray(inv64)))
        angles64 = np.asarray(rope_angles(jnp.asarray(pos[:, None]), jnp.asarray(inv64)))[:, 0]
    assert np.abs(ours - exact).max() < 2e-3
    assert np.abs(naive - exact)[5].max() > 1e-2  # what the range reduction is for
    # the reduced angles equal p·θ modulo 2π
    reduced = np.asarray(rope_angles(jnp.asarray(pos[:, None]), inv32, lo))[:, 0]
    diff = np.angle(np.exp(1j * (reduced.astype(np.float64) - angles64)))
    assert np.abs(diff).max() < 1e-3


@pytest.mark.parametrize("layout", posenc.LAYOUTS)
def test_table_lookup_equals_computed_rotation(layout):
    """`apply_rope_table` (one sin/cos table per decoding step, gathered per key) rotates as `apply_rope`,
    for per-row positions, negative ones (sinks' re-indexed cache), LongRoPE's n̂ and partial rotary; a
    position outside the table is NaN, never a clamped neighbour."""
    from posenc.rope import apply_rope_table, rope_table  # noqa: PLC0415

    theta = posenc.rope_frequencies(8)[0]
    scaled = theta / np.linspace(1, 4, 4)
    x = jnp.asarray(RNG.normal(size=(2, 6, 3, 12)), jnp.float32)
    positions = jnp.asarray([[0, 5, 17, 3, -4, -17], [9, 9, 1, 0, 12, 2]], jnp.int32)  # [B, S]: per row
    kw = dict(attention_factor=0.7, original_inv_freq=theta, unscaled_positions=4)
    table = rope_table(-17, 18, scaled, **kw)
    got = apply_rope_table(x, positions, table, layout)
    want = posenc.apply_rope(x, positions, scaled, layout=layout, **kw)
    np.testing.assert_allclose(got, want, atol=1e-6)
    np.testing.assert_array_equal(got[..., 8:], x[..., 8:])  # the pass-through tail
    outside = apply_rope_table(x, positions.at[0, 0].set(18), table, layout)
    assert np.isnan(outside[0, 0, :, :8]).all() and np.isfinite(outside[0, 1:]).all()
    with pytest.raises(ValueError, match="positions must be integers"):
        apply_rope_table(x, positions.astype(jnp.float32), table, layout)


def test_rope_cos_sin_names_a_mismatched_argument():
    """rope_cos_sin (apply_rope's tables) refuses an inv_freq_lo or original_inv_freq of another shape than
    inv_freq, naming the argument."""
    from posenc.rope import rope_cos_sin

    inv = np.ones(4, np.float32)
    with pytest.raises(ValueError, match=r"rope_cos_sin .*inv_freq_lo \(3,\) must match inv_freq \(4,\)"):
        rope_cos_sin(np.arange(8), inv, inv_freq_lo=np.ones(3, np.float32))
    with pytest.raises(ValueError, match=r"rope_cos_sin .*original_inv_freq \(2,\) must match inv_freq \(4,\)"):
        rope_cos_sin(np.arange(8), inv, original_inv_freq=np.ones(2, np.float32), unscaled_positions=4)


def complex_pairs(x, r, layout):
    """The seeds' x_(i) = x_a + i·x_b of pair i: (2i, 2i + 1) interleaved, (i, i + r) half."""
    if layout == "interleaved":
        return x[..., 0:2 * r:2] + 1j * x[..., 1:2 * r:2]
    return x[..., :r] + 1j * x[..., r:2 * r]


@pytest.mark.parametrize("layout", posenc.LAYOUTS)
@pytest.mark.parametrize("head_dim,rotary_dim", [(2, 2), (32, 32), (20, 12)])
def test_score_is_the_seeds_sum_over_subspaces(layout, head_dim, rotary_dim):
    """Seeds, property 1 written out: ⟨f(q, m), f(k, n)⟩ = Σ_i Re(q_(i) k̄_(i) e^{i(m−n)θ_i})
    = Σ_i |q_(i)||k_(i)| cos((m−n)θ_i + φ_i), φ_i = ∠q_(i) − ∠k_(i) (in 2D: |q||k| cos(∠(q, k) + (m−n)θ)),
    plus Σ_j q_j k_j over the pass-through features of a partial rotary."""
    r = rotary_dim // 2
    theta = posenc.rope_frequencies(rotary_dim)[0]
    q, k = RNG.normal(size=(1, 1, head_dim)), RNG.normal(size=(1, 1, head_dim))
    qc, kc = complex_pairs(q[0, 0], r, layout), complex_pairs(k[0, 0], r, layout)
    tail = float(q[0, 0, rotary_dim:] @ k[0, 0, rotary_dim:])
    for m, n in [(0, 0), (7, 3), (3, 7), (1000, 1), (12345, 54321)]:
        score = float(np.sum(rope64(q, [m], theta, layout) * rope64(k, [n], theta, layout)))
        via_complex = np.sum(np.real(qc * np.conj(kc) * np.exp(1j * (m - n) * theta))) + tail
        phi = np.angle(qc) - np.angle(kc)
        via_cosines = np.sum(np.abs(qc) * np.abs(kc) * np.cos((m - n) * theta + phi)) + tail
        np.testing.assert_allclose(score, via_complex, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(score, via_cosines, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("head_dim,rotary_dim", [(16, 16), (12, 8)])
def test_elementwise_forms_of_the_seeds(head_dim, rotary_dim):
    """The seeds' O(d) implementations, float64. Interleaved (seeds/004): f(x, m) = x ⊙ cos(mθ) + x' ⊙ sin(mθ),
    x' = (−x_1, x_0, −x_3, x_2, …), each angle repeated for its pair. Half (seeds/000 §5.1, HF):
    q·cos + rotate_half(q)·sin with freqs concatenated twice and rotate_half(x_1, x_2) = (−x_2, x_1)."""
    r = rotary_dim // 2
    theta = posenc.rope_frequencies(rotary_dim)[0]
    x = RNG.normal(size=(6, 2, head_dim))
    positions = np.array([0, 1, 5, 100, 4097, 77777])
    angles = positions[:, None, None] * theta  # [T, 1, r]
    rot = x[..., :rotary_dim]

    x_prime = np.stack([-rot[..., 1::2], rot[..., 0::2]], axis=-1).reshape(rot.shape)
    want = rot * np.repeat(np.cos(angles), 2, axis=-1) + x_prime * np.repeat(np.sin(angles), 2, axis=-1)
    got = rope64(x, positions, theta, "interleaved")
    np.testing.assert_allclose(got[..., :rotary_dim], want, atol=1e-12)
    np.testing.assert_array_equal(got[..., rotary_dim:], x[..., rotary_dim:])

    rotate_half = np.concatenate([-rot[..., r:], rot[..., :r]], axis=-1)
    emb = np.concatenate([angles, angles], axis=-1)
    want = rot * np.cos(emb) + rotate_half * np.sin(emb)
    got = rope64(x, positions, theta, "half")
    np.testing.assert_allclose(got[..., :rotary_dim], want, atol=1e-12)
    np.testing.assert_array_equal(got[..., rotary_dim:], x[..., rotary_dim:])


def test_decay_bound_is_roformers_curve_and_bounds_the_scores():
    """RoFormer §3.4.3 (seeds, property 2): with h_i = q_(i) k̄_(i) and h_{d/2} = 0, Abel summation gives
    |⟨f(q, m), f(k, n)⟩| ≤ max_i |h_{i+1} − h_i| · Σ_{j=1}^{d/2} |S_j|, S_j = Σ_{k<j} e^{i(m−n)θ_k}, and
    `relative_decay_bound` is the mean of the |S_j| (a float64 loop oracle here)."""
    d = 32
    theta = posenc.rope_frequencies(d)[0]
    distances = np.array([0, 1, 2, 10, 100, 1000, 5000])
    oracle = [np.mean([abs(sum(np.exp(1j * dist * theta[k]) for k in range(j))) for j in range(1, d // 2 + 1)])
              for dist in distances]
    bound = posenc.rope.relative_decay_bound(distances, d)
    np.testing.assert_allclose(bound, oracle, rtol=1e-12)
    for _ in range(20):
        q, k = RNG.normal(size=(1, 1, d)), RNG.normal(size=(1, 1, d))
        h = complex_pairs(q[0, 0], d // 2, "half") * np.conj(complex_pairs(k[0, 0], d // 2, "half"))
        step = np.abs(np.diff(np.append(h, 0.0))).max()
        scores = [float(np.sum(rope64(q, [dist], theta) * rope64(k, [0], theta))) for dist in distances]
        assert np.all(np.abs(scores) <= step * (d // 2) * bound * (1 + 1e-12)), (scores, step * (d // 2) * bound)


def test_scores_of_matching_content_decay_on_average():
    """Seeds, property 2 as stated: not monotone, but on average (over random q, with k = q) the score
    ⟨f(q, m), f(q, n)⟩ = Σ_i |q_(i)|² cos((m−n)θ_i) falls with the distance: window means at
    r ∈ [0, 10), [10, 100), [100, 1000), [1000, 4000) decrease, the last below a sixth of the r = 0 score.
    Seed 004 says it of random q, k ("随机 q,k 的平均注意力越低"): for independent zero-mean q, k the mean score is 0
    at every r, r = 0 included, so there is nothing to decay; the decay is that of correlated q and k (as here,
    and experiments/figures/rope_scores.png)."""
    d, samples = 64, 256
    theta = posenc.rope_frequencies(d)[0]
    q = RNG.normal(size=(1, samples, d))
    at_zero = rope64(q, [0], theta)
    distances = np.unique(np.geomspace(1, 3999, 120).astype(int))
    rotated = rope64(np.broadcast_to(q, (len(distances), samples, d)), distances, theta)
    mean_score = np.sum(rotated * at_zero, axis=-1).mean(axis=-1)  # [distances]
    at_0 = np.sum(at_zero * at_zero, axis=-1).mean()
    windows = [mean_score[(distances >= lo) & (distances < hi)].mean() for lo, hi in
               [(0, 10), (10, 100), (100, 1000), (1000, 4000)]]
    assert at_0 > windows[0] > windows[1] > windows[2] > windows[3], (at_0, windows)
    assert windows[3] < at_0 / 6
    assert np.any(np.diff(mean_score) > 0)  # and not monotone


@pytest.mark.parametrize("head_dim,rotary_dim", [(16, 16), (20, 12)])
def test_half_and_interleaved_give_the_same_scores_up_to_a_permutation(head_dim, rotary_dim):
    """The two pairings are one rotation in permuted features, so q·k agree when q and k are permuted alike,
    with partial rotary (only the rotary block is permuted) and scaled frequencies (YaRN with its attention
    factor); without the permutation the scores differ."""
    r = rotary_dim // 2
    theta, af = posenc.rope_frequencies(rotary_dim, scaling=posenc.RopeScaling("yarn", 4.0, original_max_len=64))
    perm = np.concatenate([np.stack([np.arange(r), np.arange(r) + r], axis=-1).reshape(-1),
                           np.arange(rotary_dim, head_dim)])  # half -> interleaved
    q, k = RNG.normal(size=(9, 2, head_dim)), RNG.normal(size=(9, 2, head_dim))
    positions = np.arange(9) * 37

    def scores(q, k, layout):
        qr = rope64(q, positions, theta, layout, attention_factor=af)
        kr = rope64(k, positions, theta, layout, attention_factor=af)
        return np.einsum("tnh,snh->nts", qr, kr)

    np.testing.assert_allclose(scores(q, k, "half"), scores(q[..., perm], k[..., perm], "interleaved"), atol=1e-10)
    assert not np.allclose(scores(q, k, "half"), scores(q, k, "interleaved"))


def test_yarn_temperature_scales_the_rotary_part_of_the_scores_by_its_square():
    """YaRN's temperature (seeds/004: scores scaled by 1/t): the attention factor sqrt(1/t) = 0.1·ln s + 1
    multiplies cos and sin of q and of k, so the logits of the rotated features scale by (0.1·ln s + 1)²;
    with partial rotary the pass-through features are not scaled (as Hugging Face's `apply_rotary_pos_emb`
    leaves `q_pass`), so the whole score does not scale uniformly. Seed 004's reason for t (interpolated pairs
    rotate more slowly, so the variance of q·k falls) is not YaRN's, which fits t to perplexity (§3.4, eq. 22): for
    isotropic q, k no rotation changes the distribution of q·k. Its measured effect here: experiments/yarn_sweep."""
    s = 8.0
    theta, af = posenc.rope_frequencies(16, scaling=posenc.RopeScaling("yarn", s, original_max_len=64))
    assert af == pytest.approx(0.1 * np.log(s) + 1, rel=1e-15)
    q, k = RNG.normal(size=(5, 2, 24)), RNG.normal(size=(5, 2, 24))
    positions = np.array([0, 3, 64, 100, 511])

    def parts(attention_factor):
        qr = rope64(q, positions, theta, attention_factor=attention_factor)
        kr = rope64(k, positions, theta, attention_factor=attention_factor)
        return (np.einsum("tnh,snh->nts", qr[..., :16], kr[..., :16]),
                np.einsum("tnh,snh->nts", qr[..., 16:], kr[..., 16:]))

    (rot_t, tail_t), (rot_1, tail_1) = parts(af), parts(1.0)
    np.testing.assert_allclose(rot_t, af ** 2 * rot_1, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(tail_t, tail_1)


def test_absolute_encoding_scores_depend_on_absolute_position_rope_does_not():
    """Seeds/000 §2.3 and §4.2: with an added APE, (x_i + p_i)·(x_j + p_j) mixes content and position, so at a
    fixed offset i − j it changes with i (only the p_i·p_j term is relative for the sinusoidal table); RoPE's
    q·k at that offset does not."""
    d, offset = 16, 5
    with jax.enable_x64(True):
        pe = np.asarray(posenc.sinusoidal_table(400, d, dtype=jnp.float64))
    q, k = RNG.normal(size=d), RNG.normal(size=d)
    starts = np.array([0, 10, 100, 300])
    ape = [(q + pe[i + offset]) @ (k + pe[i]) for i in starts]
    pos_only = [pe[i + offset] @ pe[i] for i in starts]
    np.testing.assert_allclose(pos_only, pos_only[0], rtol=1e-12)  # the position-position term is relative
    assert np.ptp(ape) > 0.1  # the content-position cross terms are not
    theta = posenc.rope_frequencies(d)[0]
    rope = [float(np.sum(rope64(q[None, None], [i + offset], theta) * rope64(k[None, None], [i], theta)))
            for i in starts]
    np.testing.assert_allclose(rope, rope[0], rtol=1e-11)


def test_with_projections_even_the_position_terms_of_an_absolute_encoding_are_absolute():
    """Seed 000 §2.3 as written, Attn(i, j) ∝ (x_i + p_i)W_Q · (x_j + p_j)W_K: with the projections even the
    position-position term p_i W_Q W_Kᵀ p_jᵀ changes with i at a fixed offset (W_Q W_Kᵀ does not commute with the
    table's per-pair rotations), so only W_Q W_Kᵀ = I makes it relative; RoPE's R(i)x_iW_Q · R(j)x_jW_K depends on
    i − j for every W_Q, W_K (float64)."""
    d, offset = 16, 5
    with jax.enable_x64(True):
        pe = np.asarray(posenc.sinusoidal_table(400, d, dtype=jnp.float64))
    w_q, w_k = RNG.normal(size=(d, d)) / np.sqrt(d), RNG.normal(size=(d, d)) / np.sqrt(d)
    x_i, x_j = RNG.normal(size=d), RNG.normal(size=d)
    starts = np.array([0, 10, 100, 300])
    pos_only = [(pe[i + offset] @ w_q) @ (pe[i] @ w_k) for i in starts]
    assert np.ptp(pos_only) > 0.1, pos_only
    ape = [((x_i + pe[i + offset]) @ w_q) @ ((x_j + pe[i]) @ w_k) for i in starts]
    assert np.ptp(ape) > 0.1
    theta = posenc.rope_frequencies(d)[0]
    for layout in posenc.LAYOUTS:
        rope = [float(np.sum(rope64((x_i @ w_q)[None, None], [i + offset], theta, layout)
                             * rope64((x_j @ w_k)[None, None], [i], theta, layout))) for i in starts]
        np.testing.assert_allclose(rope, rope[0], rtol=1e-11)
