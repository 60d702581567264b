"""RopeScaling and rope_frequencies: float64 oracles written from the papers' formulas, published
values, the seeds' scaling claims as properties, and the validation errors."""

import dataclasses
import math

import jax
import numpy as np
import pytest

import posenc
from posenc import RopeScaling, rope_frequencies

D, BASE, L = 64, 10000.0, 2048


def theta(d=D, base=BASE):
    """θ_i = base^(-2i/d), one Python float at a time."""
    return np.array([base ** (-2.0 * i / d) for i in range(d // 2)])


# ---------------------------------------------------------------------------------------------------------
# Oracles, one per kind, written from the formulas (loops over pairs, float64).


def oracle_yarn(s, d=D, base=BASE, orig=L, beta_fast=32.0, beta_slow=1.0, truncate=True):
    """YaRN "NTK-by-parts" (arXiv 2309.00071 §3.2, reference code): pair i keeps θ_i below the dimension
    that completes beta_fast rotations in the original context, takes θ_i / s above the one completing
    beta_slow rotations, and ramps linearly in the pair index between."""

    def dim_for(rotations):  # solve orig / (2π / θ_i) = rotations for i, in units of pairs
        return d * math.log(orig / (rotations * 2 * math.pi)) / (2 * math.log(base))

    lo, hi = dim_for(beta_fast), dim_for(beta_slow)
    if truncate:
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, d - 1)
    if lo == hi:
        hi += 0.001
    out = []
    for i, t in enumerate(theta(d, base)):
        ramp = min(max((i - lo) / (hi - lo), 0.0), 1.0)  # 0 -> keep, 1 -> interpolate
        out.append(t * (1 - ramp) + (t / s) * ramp)
    mscale = 0.1 * math.log(s) + 1 if s > 1 else 1.0
    return np.array(out), mscale


def oracle_llama3(s, low_ff=1.0, high_ff=4.0, d=D, base=BASE, orig=8192):
    out = []
    for t in theta(d, base):
        wavelen = 2 * math.pi / t
        if wavelen < orig / high_ff:
            out.append(t)
        elif wavelen > orig / low_ff:
            out.append(t / s)
        else:
            smooth = (orig / wavelen - low_ff) / (high_ff - low_ff)
            out.append((1 - smooth) * t / s + smooth * t)
    return np.array(out)


def transformers_formulas(rope_type, d, base, params, seq_len, max_position_embeddings):
    """Hugging Face transformers' `modeling_rope_utils._compute_<type>_parameters`, transcribed to float64 NumPy
    (the rotary dimension d is int(head_dim · partial_rotary_factor) there): (inv_freq, attention_factor)."""
    exponent = np.arange(0, d, 2, dtype=np.float64) / d
    inv = 1.0 / base ** exponent
    f = params.get("factor")
    if rope_type == "linear":
        return inv / f, 1.0
    if rope_type == "dynamic":
        big_l = max_position_embeddings
        t = max(seq_len, big_l) if seq_len is not None else big_l
        return 1.0 / (base * ((f * t / big_l) - (f - 1)) ** (d / (d - 2))) ** exponent, 1.0
    big_l = params["original_max_position_embeddings"]
    if rope_type == "yarn":
        def get_mscale(scale, mscale=1):
            return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0
        mscale, mscale_all_dim = params.get("mscale"), params.get("mscale_all_dim")
        af = params.get("attention_factor")
        if af is None:
            af = get_mscale(f, mscale) / get_mscale(f, mscale_all_dim) if mscale and mscale_all_dim else get_mscale(f)

        def correction_dim(rotations):
            return (d * math.log(big_l / (rotations * 2 * math.pi))) / (2 * math.log(base))

        low, high = correction_dim(params.get("beta_fast") or 32), correction_dim(params.get("beta_slow") or 1)
        if params.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, d - 1)
        if low == high:
            high += 0.001
        extrapolation = 1 - np.clip((np.arange(d // 2) - low) / (high - low), 0, 1)
        pos_freqs = base ** exponent
        return 1.0 / (f * pos_freqs) * (1 - extrapolation) + 1.0 / pos_freqs * extrapolation, af
    if rope_type == "longrope":
        af = params.get("attention_factor")
        if af is None:
            af = 1.0 if f <= 1.0 else math.sqrt(1 + math.log(f) / math.log(big_l))
        ext = np.asarray(params["long_factor"] if seq_len and seq_len > big_l else params["short_factor"])
        return 1.0 / (ext * base ** exponent), af
    assert rope_type == "llama3"
    low_ff, high_ff = params["low_freq_factor"], params["high_freq_factor"]
    wavelen = 2 * math.pi / inv
    inv_llama = np.where(wavelen > big_l / low_ff, inv / f, inv)
    smooth = (big_l / wavelen - low_ff) / (high_ff - low_ff)
    smoothed = (1 - smooth) * inv_llama / f + smooth * inv_llama
    medium = ~(wavelen < big_l / high_ff) & ~(wavelen > big_l / low_ff)
    return np.where(medium, smoothed, inv_llama), 1.0


def test_every_kind_equals_transformers_formulas_in_float64():
    """Every Hugging Face rope type against its transcribed formulas over a grid of rotary dims (partial rotary is
    just a smaller d), bases, factors (exactly 1 included), original lengths, sequence lengths below, at and past
    the original, YaRN's betas, truncate and mscale pairs, Llama 3.1 band factors: to float64 rounding."""
    rng = np.random.default_rng(1)
    checked = 0
    for d in (8, 24, 128):
        for base in (100.0, 1e4, 5e5):
            for f in (1.0, 2.5, 40.0):
                for big_l in (128, 4096):
                    cases = [("linear", {"factor": f}, None)]
                    cases += [("dynamic", {"factor": f}, t) for t in (1, big_l, big_l + 1, 5 * big_l)]
                    yarn = {"factor": f, "original_max_position_embeddings": big_l}
                    cases += [("yarn", {**yarn, "beta_fast": bf, "beta_slow": bs, "truncate": tr}, None)
                              for bf, bs in ((32.0, 1.0), (16.0, 2.0)) for tr in (True, False)]
                    cases += [("yarn", {**yarn, "mscale": m, "mscale_all_dim": ma}, None)
                              for m, ma in ((1.0, 1.0), (0.707, 0.707), (1.0, 0.5), (0.5, 0.0))]
                    cases += [("yarn", {**yarn, "attention_factor": 1.3}, None)]
                    longrope = {"factor": f, "original_max_position_embeddings": big_l,
                                "short_factor": list(rng.uniform(0.5, 2, d // 2)),
                                "long_factor": list(rng.uniform(1, 40, d // 2))}
                    cases += [("longrope", longrope, t) for t in (1, big_l, big_l + 1)]
                    cases += [("llama3", {"factor": f, "original_max_position_embeddings": big_l, "low_freq_factor": lo,
                                          "high_freq_factor": hi}, None) for lo, hi in ((1.0, 4.0), (0.5, 2.0), (2.0, 32.0))]
                    for rope_type, params, seq_len in cases:
                        sc = RopeScaling.from_hf({"rope_type": rope_type, **params}, max_position_embeddings=big_l)
                        inv, af = rope_frequencies(d, base=base, scaling=sc, seq_len=seq_len)
                        ref_inv, ref_af = transformers_formulas(rope_type, d, base, params, seq_len, big_l)
                        np.testing.assert_allclose(inv, ref_inv, rtol=1e-14, atol=0, err_msg=f"{rope_type} {params}")
                        assert af == pytest.approx(ref_af, rel=1e-15), (rope_type, params)
                        checked += 1
    assert checked == 3 * 3 * 3 * 2 * 20


def test_none_is_roformer():
    inv, af = rope_frequencies(D, base=BASE)
    np.testing.assert_allclose(inv, theta(), rtol=1e-15)
    assert af == 1.0 and inv[0] == 1.0  # seeds: θ_0 = 1 (highest frequency)
    np.testing.assert_allclose(inv[-1], BASE ** (-(D - 2) / D))


@pytest.mark.parametrize("d,slowest_wavelength", [(32, 35332.9475), (64, 47117.2428), (128, 54410.1431)])
def test_slowest_pair_is_base_to_the_minus_d_minus_2_over_d_not_the_seeds_one_over_base(d, slowest_wavelength):
    """Seed 004 writes θ_{d/2−1} = 10000⁻¹ ≈ 10⁻⁴ and a slowest wavelength of 2π × 10000 ≈ 63000 positions; with
    i = 0 … d/2 − 1 the last exponent is (d − 2)/d, so θ_{d/2−1} = b^(−(d−2)/d) and its wavelength 2π·b^((d−2)/d):
    47,117 positions at head_dim 64 (configs/default.py), 35,333 at 32 (the extrapolation study), 54,410 at 128;
    2π·b is only the limit d → ∞. The wavelengths 2π/θ_i are geometric, from 2π, in steps of b^(2/d)."""
    inv, _ = rope_frequencies(d, base=BASE)
    wavelength = 2 * np.pi / inv
    assert wavelength[-1] == pytest.approx(slowest_wavelength, rel=1e-9)
    assert wavelength[-1] < 0.9 * 2 * np.pi * BASE and inv[-1] > 1.15 / BASE  # not the seed's 63k, nor 1e-4
    assert wavelength[0] == 2 * np.pi
    np.testing.assert_allclose(wavelength[1:] / wavelength[:-1], BASE ** (2 / d), rtol=1e-13)


@pytest.mark.parametrize("s", [1.5, 2.0, 8.0])
def test_linear_is_position_interpolation(s):
    """PI: θ_i / s; the angle at position s·m equals the unscaled angle at m."""
    inv, af = rope_frequencies(D, scaling=RopeScaling("linear", s))
    np.testing.assert_allclose(inv, theta() / s, rtol=1e-15)
    m = np.arange(0, 500, 7.0)
    np.testing.assert_allclose(np.outer(s * m, inv), np.outer(m, theta()), rtol=1e-13, atol=1e-12)
    assert af == 1.0


@pytest.mark.parametrize("s", [2.0, 4.0])
def test_ntk_base_change(s):
    """NTK-aware: base' = base · s^(d/(d−2)) (seeds, YaRN section): the lowest frequency becomes θ_{d/2−1}/s."""
    inv, _ = rope_frequencies(D, scaling=RopeScaling("ntk", s))
    np.testing.assert_allclose(inv, theta(base=BASE * s ** (D / (D - 2))), rtol=1e-14)
    assert inv[0] == 1.0
    np.testing.assert_allclose(inv[-1], theta()[-1] / s, rtol=1e-13)


def test_dynamic_ntk_matches_hf_formula_and_is_none_in_range():
    sc = RopeScaling("dynamic_ntk", 4.0, original_max_len=L)
    for t in (1, 100, L):
        np.testing.assert_array_equal(rope_frequencies(D, scaling=sc, seq_len=t)[0], rope_frequencies(D)[0])
    for t in (L + 1, 3 * L, 16 * L):
        base = BASE * (4.0 * t / L - 3.0) ** (D / (D - 2))
        np.testing.assert_allclose(rope_frequencies(D, scaling=sc, seq_len=t)[0], theta(base=base), rtol=1e-14)


def test_yarn_published_values():
    """Head dim 64, base 1e4, s = 4, L = 2048, betas 32/1: correction range (8, 21), mscale 0.1 ln 4 + 1."""
    assert posenc.yarn_correction_range(64, 1e4, 2048, 32, 1) == (8, 21)
    inv, af = rope_frequencies(64, scaling=RopeScaling("yarn", 4.0, original_max_len=2048))
    assert af == pytest.approx(0.1 * math.log(4) + 1, rel=1e-15)
    t = theta()
    np.testing.assert_allclose(inv[:9], t[:9], rtol=1e-15)  # pairs 0..8 keep θ_i (ramp = 0 up to dim 8)
    np.testing.assert_allclose(inv[21:], t[21:] / 4, rtol=1e-15)  # 21.. interpolated
    ratio = t[8:22] / inv[8:22]
    assert np.all(np.diff(ratio) > 0)  # strictly ramping between


@pytest.mark.parametrize("truncate", [True, False])
@pytest.mark.parametrize("d,base,orig,betas", [(64, 1e4, 2048, (32, 1)), (128, 5e5, 8192, (32, 1)),
                                               (32, 100.0, 256, (16, 2)), (16, 1e4, 4096, (64, 0.5)),
                                               (64, 1e4, 128, (32, 1))])
def test_yarn_keeps_short_wavelengths_and_interpolates_long_ones(d, base, orig, betas, truncate):
    """Seeds/004, YaRN's piecewise rule in wavelengths λ_i = 2π/θ_i: θ_i is kept where λ_i < α·L, divided by s
    where λ_i > β·L, and in between lies between θ_i/s and θ_i, the share interpolated growing with i
    (α = 1/beta_fast, β = 1/beta_slow: a pair kept completes more than beta_fast turns in L, one interpolated
    fewer than beta_slow). YaRN's temperature: attention factor 0.1·ln s + 1."""
    s = 6.0
    sc = RopeScaling("yarn", s, original_max_len=orig, beta_fast=betas[0], beta_slow=betas[1], truncate=truncate)
    inv, af = rope_frequencies(d, base=base, scaling=sc)
    t = theta(d, base)
    wavelength = 2 * np.pi / t
    short, long = wavelength < orig / betas[0], wavelength > orig / betas[1]
    assert long.any() and (~short & ~long).any()
    np.testing.assert_allclose(inv[short], t[short], rtol=1e-15)
    np.testing.assert_allclose(inv[long], t[long] / s, rtol=1e-15)
    ratio = t / inv  # 1 (kept) … s (interpolated)
    assert np.all((ratio >= 1 - 1e-15) & (ratio <= s * (1 + 1e-15))) and np.all(np.diff(ratio) >= -1e-12)
    assert af == pytest.approx(0.1 * math.log(s) + 1, rel=1e-15)


def test_past_the_training_length_only_slow_pairs_turn_to_unseen_angles_and_yarn_keeps_them_in_range():
    """Why extrapolation fails (seed 004, 外推为什么会失败: angles never seen in training) and which pairs it concerns.
    Past L the fast pairs only repeat angles they have seen (in positions 0 … L−1 they turned full circles); the new
    angles are in the slow pairs, whose wavelength exceeds L − 1 (not "high frequencies rotating too fast", as seed
    000 §5.2 puts it). At positions below s·L, YaRN (L = 2048, s = 4, head_dim 64) interpolates every pair that has
    not turned a full circle in training enough to stay within its trained angles (to one position's angle) and
    keeps the rate of the fastest; PI keeps every pair in range but slows the fast ones by s too (seed 004:
    高频旋转被压平); NTK-aware leaves middle pairs past their trained angles."""
    d, big_l, s = 64, 2048, 4.0
    t = theta(d)
    full_turns = (big_l - 1) * t >= 2 * np.pi  # the angles a pair has seen in positions 0 … L−1
    np.testing.assert_array_equal(~full_turns, 2 * np.pi / t > big_l - 1)
    assert full_turns[:20].all() and not full_turns[-5:].any() and np.all(np.diff(full_turns.astype(int)) <= 0)

    def in_range(inv):  # each pair: full turns seen in training, or at most one position past its trained angles
        return full_turns | ((s * big_l - 1) * inv <= big_l * t)

    yarn, _ = rope_frequencies(d, scaling=RopeScaling("yarn", s, original_max_len=big_l))
    assert in_range(yarn).all() and np.array_equal(yarn[:9], rope_frequencies(d)[0][:9])
    pi, _ = rope_frequencies(d, scaling=RopeScaling("linear", s))
    assert in_range(pi).all() and pi[0] == 1 / s
    ntk, _ = rope_frequencies(d, scaling=RopeScaling("ntk", s))
    assert not in_range(ntk).all() and in_range(ntk)[[0, -1]].all()


@pytest.mark.parametrize("s,truncate,betas", [(4.0, True, (32, 1)), (8.0, False, (32, 1)), (2.5, True, (16, 2))])
def test_yarn_oracle(s, truncate, betas):
    sc = RopeScaling("yarn", s, original_max_len=L, beta_fast=betas[0], beta_slow=betas[1], truncate=truncate)
    inv, af = rope_frequencies(D, scaling=sc)
    ref_inv, ref_af = oracle_yarn(s, beta_fast=betas[0], beta_slow=betas[1], truncate=truncate)
    np.testing.assert_allclose(inv, ref_inv, rtol=1e-14)
    assert af == pytest.approx(ref_af, rel=1e-15)


def test_yarn_attention_factor_override_and_deepseek_mscale():
    sc = RopeScaling("yarn", 4.0, original_max_len=L, attention_factor=1.3)
    assert rope_frequencies(D, scaling=sc)[1] == 1.3
    sc = RopeScaling("yarn", 40.0, original_max_len=4096, mscale=0.707, mscale_all_dim=0.707)
    assert rope_frequencies(D, scaling=sc)[1] == pytest.approx(1.0)
    sc = RopeScaling("yarn", 40.0, original_max_len=4096, mscale=1.0, mscale_all_dim=0.5)
    expected = (0.1 * math.log(40) + 1) / (0.05 * math.log(40) + 1)
    assert rope_frequencies(D, scaling=sc)[1] == pytest.approx(expected, rel=1e-14)


@pytest.mark.parametrize("kind", ["linear", "ntk", "yarn"])
def test_dynamic_switch(kind):
    """dynamic=True: s = max(1, seq_len / L) (YaRN §3.3), equal to `none` up to L."""
    sc = RopeScaling(kind, original_max_len=256, dynamic=True)
    for t in (1, 255, 256):
        inv, af = rope_frequencies(D, scaling=sc, seq_len=t)
        np.testing.assert_array_equal(inv, rope_frequencies(D)[0])
        assert af == 1.0
    static = RopeScaling(kind, 3.0, original_max_len=256)
    np.testing.assert_allclose(rope_frequencies(D, scaling=sc, seq_len=768)[0], rope_frequencies(D, scaling=static)[0],
                               rtol=1e-15)


def test_longrope_switches_strictly_above_original_len():
    short = np.linspace(1.0, 1.5, D // 2)
    long = np.linspace(1.0, 6.0, D // 2)
    sc = RopeScaling("longrope", 8.0, original_max_len=4096, short_factor=short, long_factor=long)
    inv_s, af = rope_frequencies(D, scaling=sc, seq_len=4096)
    inv_l, af_l = rope_frequencies(D, scaling=sc, seq_len=4097)
    np.testing.assert_allclose(inv_s, theta() / short, rtol=1e-15)
    np.testing.assert_allclose(inv_l, theta() / long, rtol=1e-15)
    assert af == af_l == pytest.approx(math.sqrt(1 + math.log(8) / math.log(4096)), rel=1e-15)


def test_longrope_n_hat_only_with_long_factors():
    """LongRoPE's n̂ belongs to the long factors (microsoft/LongRoPE searches it in the long search only,
    evolution/dim_mono_n/dim_mono_n.py): `rope_inputs` gives it past original_max_len, 0 at and below it, where
    the short factors apply as stage 2 searched them (without n̂)."""
    sc = RopeScaling("longrope", 4.0, original_max_len=64, short_factor=[1.0] * 8,
                     long_factor=list(np.linspace(1, 4, 8)), unscaled_positions=4)
    for seq_len, n_hat in ((1, 0), (16, 0), (64, 0), (65, 4), (256, 4)):
        assert posenc.rope_inputs(16, 1e4, sc, seq_len)[2] == n_hat, seq_len
    assert posenc.rope_inputs(16, 1e4, RopeScaling("yarn", 4.0, original_max_len=64), 256)[2] == 0
    assert posenc.rope_inputs(16, 1e4, None, 256)[2] == 0


def test_longrope_per_layer_factors():
    layers = np.stack([np.linspace(1, 2 + k, D // 2) for k in range(3)])
    sc = RopeScaling("longrope", 4.0, original_max_len=128, short_factor=np.ones_like(layers), long_factor=layers)
    inv, _ = rope_frequencies(D, scaling=sc, seq_len=512)
    assert inv.shape == (3, D // 2)
    np.testing.assert_allclose(inv, theta()[None] / layers, rtol=1e-15)
    hash(sc)  # per-layer factors stay hashable (static under jit)


def test_llama3_bands():
    """Llama 3.1 (factor 8, low 1, high 4, L = 8192, base 500000): three bands."""
    inv, af = rope_frequencies(128, base=500000.0, scaling=RopeScaling("llama3", 8.0, original_max_len=8192))
    ref = oracle_llama3(8.0, d=128, base=500000.0)
    np.testing.assert_allclose(inv, ref, rtol=1e-14)
    t = theta(128, 500000.0)
    wavelen = 2 * np.pi / t
    np.testing.assert_allclose(inv[wavelen < 8192 / 4], t[wavelen < 8192 / 4], rtol=1e-15)
    np.testing.assert_allclose(inv[wavelen > 8192], t[wavelen > 8192] / 8, rtol=1e-15)
    mid = (wavelen >= 2048) & (wavelen <= 8192)
    assert mid.any() and np.all((inv[mid] <= t[mid]) & (inv[mid] >= t[mid] / 8))
    assert af == 1.0


@pytest.mark.parametrize(
    "scaling",
    [
        RopeScaling("linear", 1.0),
        RopeScaling("ntk", 1.0),
        RopeScaling("yarn", 1.0, original_max_len=64),
        RopeScaling("llama3", 1.0, original_max_len=64),
        RopeScaling("longrope", 1.0, original_max_len=64, short_factor=[1.0] * 16, long_factor=[1.0] * 16),
    ],
    ids=lambda s: s.kind,
)
@pytest.mark.parametrize("seq_len", [32, 64, 1000])
def test_every_kind_at_factor_one_is_none(scaling, seq_len):
    inv, af = rope_frequencies(32, scaling=scaling, seq_len=seq_len)
    np.testing.assert_array_equal(inv, rope_frequencies(32)[0])
    assert af == 1.0


@pytest.mark.parametrize(
    "scaling",
    [
        RopeScaling("dynamic_ntk", 1.0, original_max_len=64),
        RopeScaling("dynamic_ntk", 8.0, original_max_len=64),
        RopeScaling("linear", 8.0, original_max_len=64, dynamic=True),
        RopeScaling("ntk", 8.0, original_max_len=64, dynamic=True),
        RopeScaling("yarn", 8.0, original_max_len=64, dynamic=True),
    ],
    ids=lambda s: f"{s.kind}_{s.factor}",
)
def test_dynamic_kinds_are_none_up_to_original_len_and_scale_past_it(scaling):
    """Dynamic scalings leave in-range positions unchanged (the factor is a slope for dynamic_ntk and
    ignored by dynamic=True, as in HF and YaRN §3.3), and rescale past original_max_len."""
    for seq_len in (1, 63, 64):
        inv, af = rope_frequencies(32, scaling=scaling, seq_len=seq_len)
        np.testing.assert_array_equal(inv, rope_frequencies(32)[0])
        assert af == 1.0
    assert rope_frequencies(32, scaling=scaling, seq_len=1000)[0][-1] < rope_frequencies(32)[0][-1]


@pytest.mark.parametrize(
    "hf",
    [
        {"rope_type": "default"},
        {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 1.0},
        {"rope_type": "linear", "factor": 4.0},
        {"type": "linear", "factor": 2.0},
        {"rope_type": "dynamic", "factor": 2.0},
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768, "beta_fast": 32.0,
         "beta_slow": 1.0, "truncate": False, "attention_factor": 1.1},
        {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096, "mscale": 1.0,
         "mscale_all_dim": 1.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": True},
        {"rope_type": "longrope", "factor": 32.0, "original_max_position_embeddings": 4096,
         "short_factor": [1.0] * 48, "long_factor": list(np.linspace(1, 30, 48))},
        {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192, "low_freq_factor": 1.0,
         "high_freq_factor": 4.0},
    ],
)
def test_from_hf_round_trips(hf):
    """Dynamic NTK's length is the model's max_position_embeddings (outside the dict, as in transformers)."""
    sc = RopeScaling.from_hf(hf, max_position_embeddings=4096)
    assert RopeScaling.from_hf(sc.to_hf(), max_position_embeddings=sc.original_max_len) == sc
    back = sc.to_hf()
    for key, value in hf.items():
        if key not in ("rope_type", "type", "rope_theta", "partial_rotary_factor"):
            np.testing.assert_allclose(back[key], value)
    assert set(back) - {"rope_type"} == set(hf) - {"rope_type", "type", "rope_theta", "partial_rotary_factor"}
    assert back["rope_type"] == hf.get("rope_type", hf.get("type"))


@pytest.mark.parametrize(
    "hf,key",
    [
        ({"rope_type": "linear", "factor": 2.0, "beta_fast": 8.0}, "beta_fast"),
        ({"rope_type": "default", "factor": 8.0}, "factor"),
        ({"rope_type": "longrope", "factor": 4.0, "short_factor": [1.0], "long_factor": [2.0], "mscale": 1.0}, "mscale"),
        ({"rope_type": "longrope", "factor": 4.0, "short_factor": [1.0], "long_factor": [2.0], "truncate": False},
         "truncate"),
        ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "beta_slow": 1.0},
         "beta_slow"),
        ({"rope_type": "yarn", "factor": 4.0, "low_freq_factor": 1.0}, "low_freq_factor"),
        # keys transformers only warns about ("Unrecognized keys") and ignores: refused as well
        ({"rope_type": "linear", "factor": 2.0, "attention_factor": 1.5}, "attention_factor"),
        ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "attention_factor": 2.0}, "attention_factor"),
    ],
    ids=lambda x: x if isinstance(x, str) else x["rope_type"],
)
def test_from_hf_refuses_a_key_its_type_does_not_take(hf, key):
    """Each type takes the keys of transformers' `_validate_<type>_rope_parameters`; the error names the key, the
    type and the keys it takes."""
    with pytest.raises(ValueError, match=rf"unknown keys \['{key}'\] for rope_type '{hf['rope_type']}'; valid keys"):
        RopeScaling.from_hf(hf, max_position_embeddings=8192)


def test_from_hf_dynamic_original_length_must_be_the_one_transformers_uses_and_llama3_needs_its_own():
    """transformers' validation takes dynamic's original_max_position_embeddings, and its dynamic NTK scales from
    max_position_embeddings: a config where the two differ says another length than it means. llama3 reads its
    original length (a KeyError in transformers without it): never defaulted to max_position_embeddings."""
    plain = RopeScaling.from_hf({"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=4096)
    same = RopeScaling.from_hf({"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 4096},
                               max_position_embeddings=4096)
    assert same == plain
    with pytest.raises(ValueError, match=r"original_max_position_embeddings=2048: transformers scales dynamic NTK "
                                         r"from max_position_embeddings \(4096\)"):
        RopeScaling.from_hf({"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 2048},
                            max_position_embeddings=4096)
    with pytest.raises(ValueError, match=r"rope_type 'llama3' requires \['original_max_position_embeddings'\]"):
        RopeScaling.from_hf({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0},
                            max_position_embeddings=131072)


def test_from_hf_types_transformers_does_not_have():
    with pytest.raises(ValueError, match="transformers has no 'ntk' type"):
        RopeScaling.from_hf({"rope_type": "ntk", "factor": 2.0})
    longrope = {"short_factor": [1.0, 1.0], "long_factor": [2.0, 3.0], "original_max_position_embeddings": 64}
    with pytest.raises(ValueError, match="for model_type='phi3' only"):
        RopeScaling.from_hf({"type": "su", **longrope}, max_position_embeddings=256)
    with pytest.raises(ValueError, match="rope_type must be one of"):
        RopeScaling.from_hf({"type": "su", **longrope}, max_position_embeddings=256, model_type="llama")
    # Phi3Config: "su" and "yarn" are LongRoPE, and no other scaled type is taken
    want = RopeScaling.from_hf({"rope_type": "longrope", **longrope}, max_position_embeddings=256)
    assert want.kind == "longrope" and want.factor == 4.0
    for legacy in ("su", "yarn"):
        assert RopeScaling.from_hf({"type": legacy, **longrope}, max_position_embeddings=256, model_type="phi3") == want
    with pytest.raises(ValueError, match="model_type='phi3'.*got 'linear'"):
        RopeScaling.from_hf({"rope_type": "linear", "factor": 2.0}, model_type="phi3")


def test_from_hf_longrope_mscales_ignored_for_phi3_only():
    """Phi-3's LongRoPE does not read short_mscale / long_mscale; Phi-3.5-MoE's (phimoe) scales cos/sin by them,
    which posenc does not reproduce: an error there and wherever the model_type is not phi3."""
    d = {"rope_type": "longrope", "factor": 4.0, "original_max_position_embeddings": 64,
         "short_factor": [1.0, 1.0], "long_factor": [2.0, 3.0]}
    plain = RopeScaling.from_hf(d)
    assert RopeScaling.from_hf({**d, "short_mscale": 1.2, "long_mscale": 1.3}, model_type="phi3") == plain
    for model_type in ("phimoe", None):
        with pytest.raises(ValueError, match=r"\['short_mscale', 'long_mscale'\] are not supported.*phimoe"):
            RopeScaling.from_hf({**d, "short_mscale": 1.2, "long_mscale": 1.3}, model_type=model_type)
    with pytest.raises(ValueError, match=r"\['long_mscale'\] are not supported"):
        RopeScaling.from_hf({**d, "long_mscale": 1.3}, model_type="phimoe")


def test_from_hf_refuses_partial_rotary_factor_it_cannot_hold():
    d = {"rope_type": "linear", "factor": 2.0}
    assert RopeScaling.from_hf({**d, "partial_rotary_factor": 1.0}) == RopeScaling.from_hf(d)
    with pytest.raises(ValueError, match="partial_rotary_factor=0.5 sets the rotary dimension.*rope_setup"):
        RopeScaling.from_hf({**d, "partial_rotary_factor": 0.5})


def test_from_hf_longrope_without_factor_needs_the_lengths():
    """A factor-less LongRoPE takes max / original (Phi-3); with no max_position_embeddings it is an error, never 1."""
    d = {"rope_type": "longrope", "original_max_position_embeddings": 4096, "short_factor": [1.0, 1.0],
         "long_factor": [2.0, 3.0]}
    assert RopeScaling.from_hf(d, max_position_embeddings=131072).factor == 32.0
    with pytest.raises(ValueError, match="factor is None for rope_type 'longrope'"):
        RopeScaling.from_hf(d)
    with pytest.raises(ValueError, match="factor is None for rope_type 'longrope'"):
        RopeScaling.from_hf({**d, "factor": None})


@pytest.mark.parametrize(
    "scaling,match",
    [
        (RopeScaling("ntk", 2.0), "kind='ntk' has no Hugging Face form"),
        (RopeScaling("linear", original_max_len=64, dynamic=True), r"dynamic=True \(kind='linear'\)"),
        (RopeScaling("yarn", 2.0, original_max_len=64, dynamic=True), r"dynamic=True \(kind='yarn'\)"),
        (RopeScaling("longrope", 2.0, original_max_len=8, short_factor=[1.0], long_factor=[2.0], unscaled_positions=4),
         "unscaled_positions=4"),
        (RopeScaling("longrope", 2.0, original_max_len=8, short_factor=[[1.0], [1.0]], long_factor=[[2.0], [3.0]]),
         "per-layer short_factor"),
        (RopeScaling("none", attention_factor=1.5), "attention_factor=1.5"),
        (RopeScaling("linear", 2.0, attention_factor=1.5), "attention_factor=1.5"),
        (RopeScaling("dynamic_ntk", 2.0, original_max_len=64, attention_factor=1.5), "attention_factor=1.5"),
    ],
    ids=lambda x: x.kind if isinstance(x, RopeScaling) else None,
)
def test_to_hf_refuses_what_transformers_cannot_load(scaling, match):
    """Fields that change the frequencies and have no Hugging Face form raise, naming the field."""
    with pytest.raises(ValueError, match=match):
        scaling.to_hf()


def test_to_hf_writes_only_keys_from_hf_takes():
    """A static linear scaling's original length (unused by it) is not written: transformers' linear takes none."""
    back = RopeScaling("linear", 2.0, original_max_len=4096).to_hf()
    assert back == {"rope_type": "linear", "factor": 2.0}
    assert RopeScaling("dynamic_ntk", 2.0, original_max_len=4096).to_hf() == {"rope_type": "dynamic", "factor": 2.0}


def test_from_hf_uses_max_position_embeddings_fallback():
    sc = RopeScaling.from_hf({"rope_type": "yarn", "factor": 4.0}, max_position_embeddings=2048)
    assert sc.original_max_len == 2048 and sc.kind == "yarn"


def test_frequencies_work_under_jit():
    sc = RopeScaling("yarn", 4.0, original_max_len=L)
    fn = jax.jit(lambda: rope_frequencies(D, scaling=sc))
    inv, af = fn()
    np.testing.assert_allclose(np.asarray(inv), rope_frequencies(D, scaling=sc)[0], rtol=1e-6)
    assert float(af) == pytest.approx(0.1 * math.log(4) + 1, rel=1e-6)


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda: RopeScaling("cubic"), r"kind must be one of .*'yarn'"),
        (lambda: RopeScaling("linear", 0.5), "factor must be"),
        (lambda: RopeScaling("linear", float("nan")), "factor must be"),
        (lambda: RopeScaling("yarn", 2.0), "original_max_len is required"),
        (lambda: RopeScaling("linear", dynamic=True), "original_max_len is required"),
        (lambda: RopeScaling("llama3", 2.0, original_max_len=0), "original_max_len must be a positive integer"),
        (lambda: RopeScaling("llama3", dynamic=True, original_max_len=8), "dynamic=True is valid only"),
        (lambda: RopeScaling("yarn", 2.0, original_max_len=8, beta_fast=1, beta_slow=32), "beta_fast"),
        (lambda: RopeScaling("yarn", 2.0, original_max_len=8, attention_factor=0.0), "attention_factor"),
        (lambda: RopeScaling("llama3", 2.0, original_max_len=8, low_freq_factor=4, high_freq_factor=1), "low_freq"),
        (lambda: RopeScaling("longrope", 2.0, original_max_len=8, long_factor=[1.0]), "short_factor is required"),
        (lambda: RopeScaling("longrope", 2.0, original_max_len=8, short_factor=[1.0], long_factor=[1.0, 2.0]),
         "same shape"),
        (lambda: RopeScaling("longrope", 2.0, original_max_len=8, short_factor=[0.0], long_factor=[1.0]), "> 0"),
        (lambda: RopeScaling("longrope", 2.0, original_max_len=1, short_factor=[1.0], long_factor=[2.0]),
         r"original_max_len must be >= 2 for kind='longrope' .* divides by ln L, got original_max_len=1"),
        (lambda: rope_frequencies(7), "rotary_dim must be a positive even"),
        (lambda: RopeScaling("yarn", 2.0, original_max_len=8, unscaled_positions=4), "valid only for kind='longrope'"),
        (lambda: RopeScaling("longrope", 2.0, original_max_len=8, short_factor=[1.0], long_factor=[1.0],
                             unscaled_positions=-1), "unscaled_positions must be"),
        (lambda: rope_frequencies(8, base=0.0), "base must be"),
        (lambda: rope_frequencies(8, base=-1e4), "base must be"),
        (lambda: rope_frequencies(2, scaling=RopeScaling("ntk", 2.0)), "rotary_dim > 2"),
        (lambda: rope_frequencies(8, scaling=RopeScaling("dynamic_ntk", 2.0, original_max_len=8)), "seq_len is required"),
        (lambda: rope_frequencies(8, scaling=RopeScaling("yarn", original_max_len=8, dynamic=True)), "seq_len is required"),
        (lambda: rope_frequencies(8, scaling=RopeScaling("longrope", 2.0, original_max_len=8, short_factor=[1.0] * 3,
                                                         long_factor=[1.0] * 3), seq_len=9), "long_factor must have"),
        (lambda: RopeScaling.from_hf({"rope_type": "sinusoidal"}), "rope_type must be one of"),
        (lambda: RopeScaling.from_hf({"rope_type": "linear", "factr": 2.0}), "unknown keys"),
        (lambda: RopeScaling.from_hf({"rope_type": "longrope", "factor": 2.0, "short_factor": [1.0]}),
         r"requires \['long_factor'\]"),
        # values that were accepted and read wrongly, or failed without naming the field
        (lambda: RopeScaling("linear", True), "factor must be a finite number >= 1"),
        (lambda: RopeScaling("yarn", 2.0, original_max_len=8, beta_fast=float("inf")), "beta_fast must be a finite"),
        (lambda: RopeScaling("yarn", 2.0, original_max_len=8, attention_factor=float("inf")),
         "attention_factor must be a finite number > 0"),
        (lambda: RopeScaling("yarn", 2.0, original_max_len=8, mscale=float("nan"), mscale_all_dim=1.0),
         "mscale must be a finite number >= 0"),
        (lambda: RopeScaling("yarn", 2.0, original_max_len=8, mscale=1.0, mscale_all_dim=-10.0),
         "mscale_all_dim must be a finite number >= 0"),
        (lambda: RopeScaling("llama3", 2.0, original_max_len=8, high_freq_factor=float("inf")),
         "high_freq_factor must be a finite number"),
        (lambda: RopeScaling("linear", original_max_len=8, dynamic="no"), "dynamic must be True or False"),
        (lambda: RopeScaling("yarn", 2.0, original_max_len=8, truncate="no"), "truncate must be True or False"),
        (lambda: RopeScaling("longrope", 2.0, original_max_len=8, short_factor=[1.0], long_factor=[float("inf")]),
         "long_factor must be all finite and > 0"),
        (lambda: RopeScaling("longrope", 2.0, original_max_len=8, short_factor=[[[1.0]]], long_factor=[[[1.0]]]),
         r"short_factor must be a vector \[rotary_dim // 2\] or a matrix .* got shape \(1, 1, 1\)"),
        (lambda: RopeScaling("longrope", 2.0, original_max_len=8, short_factor=[[1.0], [1.0, 2.0]],
                             long_factor=[[1.0], [2.0, 3.0]]), "short_factor must be a vector"),
        (lambda: RopeScaling.from_hf({"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 2048.5}),
         "original_max_position_embeddings .* must be a whole number of positions, got 2048.5"),
        (lambda: RopeScaling.from_hf({"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 2048,
                                      "truncate": "false"}), "truncate must be true or false, got 'false'"),
        (lambda: RopeScaling.from_hf({"rope_type": "linear", "factor": "4"}), "factor must be a number, got '4'"),
    ],
)
def test_bad_values_raise_naming_the_field(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_frozen_and_hashable():
    sc = RopeScaling("yarn", 4.0, original_max_len=L)
    assert hash(sc) == hash(RopeScaling("yarn", 4.0, original_max_len=L))
    with pytest.raises(dataclasses.FrozenInstanceError):
        sc.factor = 2.0  # type: ignore[misc]


def test_factors_fit_one_vector_or_one_per_layer():
    from posenc.rope_scaling import factors_fit

    assert factors_fit(np.ones(16), 32, 4) and factors_fit(np.ones((4, 16)), 32, 4)
    for shape in ((15,), (3, 16), (4, 15), (1, 4, 16), ()):
        assert not factors_fit(np.ones(shape), 32, 4), shape
