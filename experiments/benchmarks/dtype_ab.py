"""posenc float32 against posenc bf16 on this machine: alternating `scripts/benchmark_train.py` runs.

    python experiments/benchmarks/dtype_ab.py OUT.json [PAIRS]

Runs PAIRS (default 2) float32/bfloat16 pairs of `benchmark_train.py --rounds=3 --steps=5` one after the other
and writes each dtype's median tokens/s, the CPU and every run to OUT.json.
"""

import json
import pathlib
import statistics
import subprocess
import sys


def main(out: str, pairs: int = 2) -> None:
    runs = []
    for _ in range(pairs):
        for dtype in ("float32", "bfloat16"):
            proc = subprocess.run([sys.executable, "scripts/benchmark_train.py", "--rounds=3", "--steps=5", f"--dtype={dtype}"],
                                  capture_output=True, text=True, check=True)
            runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    ab = {d: statistics.median(r["tokens_per_s"] for r in runs if r["dtype"] == d) for d in ("float32", "bfloat16")}
    result = {**ab, "cpu": runs[0]["cpu"], "commit": runs[0].get("commit", "unknown"), "runs": runs}
    pathlib.Path(out).write_text(json.dumps(result) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}))


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:]))
