"""Writes experiments/quickstart/README.md from run_info.json and results.json (made by run.sh)."""

import json
import pathlib

from posenc.timing import machines_text

HERE = pathlib.Path(__file__).resolve().parent
info = json.loads((HERE / "run_info.json").read_text())
result = json.loads((HERE / "results.json").read_text())
bpb = {(r["scaling"], r["length"]): r["bpb"] for r in result["rows"] if r["protocol"] == "nonoverlap"}
lengths = result["lengths"]
first, last, second = lengths[0], lengths[-1], lengths[1]
worse_pi = all(bpb[("linear", n)] > bpb[("none", n)] for n in lengths[1:])
best_long = min((bpb[(s, last)], s) for s in {s for s, _ in bpb})
scalings = list(dict.fromkeys(r["scaling"] for r in result["rows"]))
NAMES = {"linear": "Position Interpolation", "ntk": "NTK-aware", "dynamic_ntk": "dynamic NTK", "yarn": "YaRN",
         "dynamic_linear": "dynamic PI", "dynamic_yarn": "dynamic YaRN", "llama3": "Llama-3", "longrope": "LongRoPE"}
near = [s for s in scalings if s not in ("none", "linear")]  # the scalings that keep the low frequencies
if not near:
    raise SystemExit(f"results.json scores only {scalings}: the reading below compares NTK-aware / YaRN-like scalings "
                     "with the in-range loss; rerun with the default config.eval.scalings")
near_names = ", ".join(NAMES.get(s, s) for s in near[:-1]) + (" and " if len(near) > 1 else "") + NAMES.get(near[-1], near[-1])
text = f"""# Quickstart: the README's main job, as run here

Regenerate (from the repository root, after the Quickstart's install):

```bash
bash experiments/quickstart/run.sh
```

It runs exactly the main job — `scripts/train.py --config=configs/default.py` (RoPE, d_model 256, 4 layers,
train_len 256, batch 16, 400 steps, seed 0) then `scripts/eval_extrapolation.py` with the config's
defaults (lengths {first} … {last}, scalings {' / '.join(scalings)}, the first
{result['num_bytes']:,} test bytes) — and writes here: `results.{{md,csv,json}}`, `ppl_vs_length.png`,
`per_position.png`, `run_info.json` (wall times, tokens/s, machine; `by_cpu/` keeps the latest of each CPU kind)
and this README (`report.py`).
`memory.log` is the output of `scripts/measure_eval_memory.py`.

Measured on {machines_text([info])}{"" if info.get("device") else " (no GPU)"}, jax {info['jax']}, Python {info['python']}: training
{info['train_seconds']} s at {info['tokens_per_s']:.0f} tokens/s (final validation {info['val_bpb']:.3f} bits per byte),
evaluation {info['eval_seconds']} s.

![bits per byte against evaluation length](ppl_vs_length.png)

![loss by position in {last}-token windows](per_position.png)

Reading it: plain RoPE degrades past {first} ({bpb[('none', first)]:.2f} → {bpb[('none', last)]:.2f} bits per byte at
{last // first}×); Position Interpolation without fine-tuning is {"worse than doing nothing at every length past " + str(first) if worse_pi else "not uniformly worse than doing nothing"};
at {second} {near_names} {'are' if len(near) > 1 else 'is'} within {max(bpb[(s, second)] for s in near) - bpb[('none', first)]:.2f}
bits per byte of the in-range loss, and at {last} the best is {best_long[1]} ({best_long[0]:.2f}). `results.md` has the numbers.
"""
(HERE / "README.md").write_text(text)
print(text)
