"""Writes experiments/yarn_sweep/README.md and best_attention_factor.png from the two sweeps' results.csv."""

import csv
import json
import math
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
timing = json.loads((HERE / "timing.json").read_text()) if (HERE / "timing.json").exists() else {}

temp = [r for r in csv.DictReader(open(HERE / "temperature" / "results.csv")) if r["status"] == "done"]
factors = sorted({float(r["factor"]) for r in temp})
afs = sorted({float(r["attention_factor"]) for r in temp})
table = {(float(r["factor"]), float(r["attention_factor"])): r for r in temp}
lines = ["| s (evaluated at 256·s) | " + " | ".join(f"af={a:g}" for a in afs) + " | best af | 0.1·ln s + 1 |",
         "|---|" + "---|" * (len(afs) + 2)]
best = {}
for s in factors:
    n = int(256 * s)
    vals = {a: float(table[(s, a)][f"bpb_L{n}"]) for a in afs}
    best[s] = min(vals, key=vals.get)
    lines.append(f"| {s:g} (L={n}) | " + " | ".join(f"{vals[a]:.3f}" for a in afs)
                 + f" | {best[s]:g} | {0.1 * math.log(s) + 1:.3f} |")
fig, ax = plt.subplots(figsize=(5.5, 4))
ax.plot(factors, [best[s] for s in factors], "o-", label="best attention factor (this model)")
grid = [1 + i * 0.1 for i in range(0, 160)]
ax.plot(grid, [0.1 * math.log(g) + 1 for g in grid], "--", label="0.1·ln s + 1 (YaRN)")
ax.set_xscale("log", base=2)
ax.set_xlabel("scale s")
ax.set_ylabel("attention factor sqrt(1/t)")
ax.legend()
fig.tight_layout()
fig.savefig(HERE / "best_attention_factor.png", dpi=100)
plt.close(fig)
follows = all(abs(best[s] - (0.1 * math.log(s) + 1)) <= 0.1 for s in factors)

betas = [r for r in csv.DictReader(open(HERE / "betas" / "results.csv")) if r["status"] == "done"]
bfs = sorted({float(r["beta_fast"]) for r in betas})
bss = sorted({float(r["beta_slow"]) for r in betas})
bt = {(float(r["beta_fast"]), float(r["beta_slow"])): float(r["bpb_L1024"]) for r in betas}
blines = ["| beta_fast \\ beta_slow | " + " | ".join(f"{b:g}" for b in bss) + " |", "|---|" + "---|" * len(bss)]
for f in bfs:
    blines.append(f"| {f:g} | " + " | ".join(f"{bt[(f, b)]:.3f}" if (f, b) in bt else "–" for b in bss) + " |")
bbest = min(bt, key=bt.get)
same = [(a, b) for a, b in zip(bfs, bfs[1:]) if all(bt.get((a, x)) == bt.get((b, x)) for x in bss)]
same_text = "".join(f" Rows beta_fast = {a:g} and {b:g} are identical: at L0 = 256 the correction dimension of both floors "
                    "to pair 0 (experiments/figures/yarn_regions.png)." for a, b in same)
text = f"""# YaRN on one checkpoint: temperature and betas (eval sweeps, no retraining)

Regenerate (resumable; about a minute or two of evaluation):

```bash
bash experiments/yarn_sweep/run.sh        # RUN=runs/extrapolation/rope-s0 by default
```

Checkpoint: `{timing.get('run', 'runs/extrapolation/rope-s0')}` (the extrapolation study's seed-0 RoPE run:
d_model 128, head_dim 32, train_len 256). Every point re-evaluates it on the first 16,384 test bytes
(non-overlapping windows) with YaRN at inference time; RoPE frequencies are traced inputs, so the whole sweep
compiles once per length. Wall time {timing.get('wall_seconds', float('nan')):.0f} s on the 2-core CPU.

## Does the best attention factor follow 0.1·ln s + 1 for a byte-level model?

Bits per byte at L = 256·s for each scale s and attention factor (`RopeScaling.attention_factor`, which
multiplies cos and sin, so the logits by its square):

{chr(10).join(lines)}

![best attention factor](best_attention_factor.png) ![heatmap at L=1024](temperature/sweep.png)

**Answer:** {"yes, within 0.1 at every s" if follows else "no"} — the best factors are
{", ".join(f"{best[s]:g} at s = {s:g}" for s in factors)} against YaRN's
{", ".join(f"{0.1 * math.log(s) + 1:.2f}" for s in factors)} (grid step 0.1).

## beta_fast × beta_slow at s = 4 (L = 1024)

{chr(10).join(blines)}

![betas](betas/sweep.png)

Best: beta_fast = {bbest[0]:g}, beta_slow = {bbest[1]:g} ({bt[bbest]:.3f} bits per byte; YaRN's defaults 32 / 1 give
{bt.get((32.0, 1.0), float('nan')):.3f}).{same_text} YaRN's defaults were chosen for 2k–4k original contexts;
at a 256-token original length a much smaller beta_fast keeps more high-frequency pairs intact.
"""
(HERE / "README.md").write_text(text)
print(text)
