r"""Model-free figures of the seeds' math. Regenerate all of them (a few seconds, no training):

    python experiments/figures/make_figures.py [--out=experiments/figures]

1. rope_decay.png — RoFormer's long-range decay bound, mean_j |Σ_{k<j} e^{i r θ_k}|, against the relative
   distance r for several bases (head_dim 128); (d/2 + 1)/2 at r = 0 (tests/test_rope.py).
2. sinusoidal_similarity.png — PE(p)·PE(q) of the sinusoidal encoding for p, q < 256 (d = 128): the seeds'
   "neighbouring positions are more similar".
3. yarn_regions.png — each frequency pair's wavelength 2π/θ_i against the training length (head_dim 64,
   base 1e4, L = 256), with the pairs YaRN keeps, ramps and interpolates (β_fast 32, β_slow 1), and the ratio
   θ'_i / θ_i that PI, NTK-aware and YaRN produce at s = 4.
4. rope_scores.png — ⟨R(m) q, R(n) k⟩ against r = m − n for random q, k and for q = k (head_dim 64).
"""

from __future__ import annotations

import pathlib

import matplotlib
import numpy as np
from absl import app, flags

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import posenc  # noqa: E402

_OUT = flags.DEFINE_string("out", str(pathlib.Path(__file__).resolve().parent), "Output directory.")


def rope_decay(out: pathlib.Path) -> None:
    r = np.arange(0, 10001)
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for base in (100.0, 1e4, 1e6):
        ax.plot(r, posenc.relative_decay_bound(r, 128, base), label=f"base {base:g}", linewidth=1)
    ax.axhline((64 + 1) / 2, color="gray", linestyle=":", linewidth=1)
    ax.set_xscale("symlog", linthresh=10)
    ax.set_xlabel("relative distance r = m − n")
    ax.set_ylabel(r"mean$_j$ |$\sum_{k<j} e^{i r \theta_k}$|")
    ax.set_xlim(0, r.max())
    ax.set_title("RoPE decay bound (RoFormer §3.4.3), head_dim 128\n(d/2 + 1)/2 = 32.5 at r = 0", fontsize=10)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "rope_decay.png", dpi=100)
    plt.close(fig)


def sinusoidal_similarity(out: pathlib.Path) -> None:
    pe = np.asarray(posenc.sinusoidal_table(256, 128), np.float64)
    sim = pe @ pe.T
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    im = axes[0].imshow(sim, cmap="viridis", origin="lower")
    axes[0].set_xlabel("position q")
    axes[0].set_ylabel("position p")
    axes[0].set_title("PE(p)·PE(q), d = 128")
    fig.colorbar(im, ax=axes[0])
    k = np.arange(0, 256)
    axes[1].plot(k, [np.mean(np.sum(pe[: 256 - j] * pe[j:], axis=-1)) for j in k])
    axes[1].set_xlabel("offset k")
    axes[1].set_ylabel("mean PE(p)·PE(p+k)")
    axes[1].set_title("similarity depends only on the offset, and decays")
    fig.tight_layout()
    fig.savefig(out / "sinusoidal_similarity.png", dpi=100)
    plt.close(fig)


def yarn_regions(out: pathlib.Path, d: int = 64, base: float = 1e4, train_len: int = 256, s: float = 4.0) -> None:
    theta = posenc.rope_frequencies(d, base=base)[0]
    wavelength = 2 * np.pi / theta
    low, high = posenc.yarn_correction_range(d, base, train_len, 32.0, 1.0)
    i = np.arange(d // 2)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    ax = axes[0]
    ax.semilogy(i, wavelength, "o-", markersize=3, color="black")
    ax.axhline(train_len, color="red", linestyle="--", label=f"training length {train_len}")
    ax.axhline(s * train_len, color="red", linestyle=":", label=f"target {int(s * train_len)}")
    ax.axvspan(-0.5, low, color="tab:green", alpha=0.2, label=f"YaRN keeps θ (i ≤ {low}: ≥ 32 turns in L)")
    ax.axvspan(low, high, color="tab:orange", alpha=0.2, label="YaRN ramps")
    ax.axvspan(high, d // 2 - 0.5, color="tab:blue", alpha=0.2, label=f"YaRN interpolates θ/s (i ≥ {high}: < 1 turn)")
    ax.set_xlabel("frequency pair i")
    ax.set_ylabel("wavelength 2π/θ_i (tokens)")
    ax.set_title(f"head_dim {d}, base {base:g}")
    ax.legend(fontsize=7)
    ax = axes[1]
    for kind, sc in (("PI (linear)", posenc.RopeScaling("linear", s)), ("NTK-aware", posenc.RopeScaling("ntk", s)),
                     ("YaRN", posenc.RopeScaling("yarn", s, original_max_len=train_len))):
        ax.plot(i, posenc.rope_frequencies(d, base=base, scaling=sc)[0] / theta, "o-", markersize=3, label=kind)
    ax.set_xlabel("frequency pair i (high → low frequency)")
    ax.set_ylabel("θ'_i / θ_i")
    ax.set_title(f"scaled frequencies at s = {s:g}: PI squashes every pair by 1/s")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "yarn_regions.png", dpi=100)
    plt.close(fig)


def rope_scores(out: pathlib.Path, d: int = 64, n: int = 200) -> None:
    rng = np.random.default_rng(0)
    inv = posenc.rope_frequencies(d)[0]
    r = np.arange(0, 3000)
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for label, same in (("random q, k (mean of 200 pairs)", False), ("q = k (mean of 200 vectors)", True)):
        q = rng.normal(size=(n, d))
        k = q if same else rng.normal(size=(n, d))
        # score(r) = Σ_i Re(q_(i) conj(k_(i)) e^{i r θ_i}), interleaved pairs, relative only (seeds, property 1)
        zq, zk = q[:, 0::2] + 1j * q[:, 1::2], k[:, 0::2] + 1j * k[:, 1::2]
        scores = np.real((zq * np.conj(zk)) @ np.exp(1j * np.outer(inv, r))) / d
        ax.plot(r, scores.mean(axis=0), label=label, linewidth=1)
    ax.set_xscale("symlog", linthresh=10)
    ax.set_xlabel("relative distance r")
    ax.set_ylabel("⟨R(m)q, R(n)k⟩ / d")
    ax.set_xlim(0, r.max())
    ax.set_title(f"RoPE attention score against distance (head_dim {d}, base 1e4)", fontsize=10)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "rope_scores.png", dpi=100)
    plt.close(fig)


def main(argv):
    del argv
    out = pathlib.Path(_OUT.value)
    out.mkdir(parents=True, exist_ok=True)
    for make in (rope_decay, sinusoidal_similarity, yarn_regions, rope_scores):
        make(out)
        print(f"wrote {out / (make.__name__ + '.png')}")


if __name__ == "__main__":
    app.run(main)
