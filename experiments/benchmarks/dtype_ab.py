"""posenc float32 against posenc bf16 on this machine: alternating `scripts/benchmark_train.py` runs.

    python experiments/benchmarks/dtype_ab.py OUT.json [PAIRS]

Runs PAIRS (default 2) rounds of three arms of `benchmark_train.py --rounds=3 --steps=5` one after the other —
float32; bfloat16 (bf16 products, float32 activations: `model.act_dtype=auto` on a CPU); bfloat16 with bf16
activations (`act_dtype=bfloat16`, what `auto` gives on a GPU) — and writes each arm's median tokens/s
(keys float32, bfloat16, bfloat16_activations), the CPU and every run to OUT.json.
"""

import json
import pathlib
import statistics
import subprocess
import sys


def main(out: str, pairs: int = 2) -> None:
    runs = []
    arms = {"float32": ["--dtype=float32"], "bfloat16": ["--dtype=bfloat16"],
            "bfloat16_activations": ["--dtype=bfloat16", "--act_dtype=bfloat16"]}
    for _ in range(pairs):
        for arm, args in arms.items():
            proc = subprocess.run([sys.executable, "scripts/benchmark_train.py", "--rounds=3", "--steps=5", *args],
                                  capture_output=True, text=True, check=True)
            runs.append({**json.loads(proc.stdout.strip().splitlines()[-1]), "arm": arm})
    ab = {arm: statistics.median(r["tokens_per_s"] for r in runs if r["arm"] == arm) for arm in arms}
    result = {**ab, "cpu": runs[0]["cpu"], "commit": runs[0].get("commit", "unknown"), "runs": runs}
    pathlib.Path(out).write_text(json.dumps(result) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}))


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:]))
