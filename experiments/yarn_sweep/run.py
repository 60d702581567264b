r"""YaRN's attention factor and betas on the extrapolation study's RoPE runs: chosen on validation, scored on test.

    python experiments/yarn_sweep/run.py [--runs=runs/yarn_sweep/runs] [--root=runs/yarn_sweep] [--seeds=0,1,2]

For each seed's RoPE run of the extrapolation study's config (`experiments/extrapolation/config.py`, train_len
256; trained into --runs if its checkpoint is missing):

1. **temperature**: YaRN at scale s ∈ {2, 4, 8, 16}, evaluated at L = 256·s, with the attention factor
   (`RopeScaling.attention_factor`, which multiplies cos and sin, so the logits by its square) on a grid
   0.9 … 1.5; the factor with the lowest validation bits per byte is the seed's choice at s;
2. **betas**: YaRN at s = 4 (L = 1024) over beta_fast × beta_slow; the lowest on validation is the choice;
3. on the test split: at each s, no temperature (factor 1), YaRN's default 0.1·ln s + 1 and the validation
   choice; for the betas, YaRN's defaults 32 / 1 and the choice; and the baselines on the same test bytes,
   plain RoPE without scaling and the corpus's n-gram floor (`posenc.evaluate.evaluate`).

Every evaluation is an eval sweep (`posenc.sweep.run_eval_sweep`: one compiled forward per length for all
points; a rerun resumes, and refuses points of other settings). Each seed's numbers go to
`experiments/yarn_sweep/results/seed<n>.json`; `report.py` writes the README from them. A seed whose result
exists is skipped (refused if its run was trained with another config than config.py gives now): rerun the same
command after an interruption.
"""

from __future__ import annotations

import json
import math
import pathlib
import time

from absl import app, flags, logging

from posenc import checkpoint, jobs, malloc, sweep, timing
from posenc import evaluate as ev
from posenc.config import result_changes
from posenc.train import load_config_file, train_and_evaluate

HERE = pathlib.Path(__file__).resolve().parent
BASE_LEN = 256
SCALES = (2, 4, 8, 16)
ATTENTION_FACTORS = (0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5)
BETA_FAST = (4.0, 8.0, 16.0, 32.0, 64.0)
BETA_SLOW = (0.25, 0.5, 1.0, 2.0)
BETA_SCALE = 4
NUM_BYTES = 16384



def yarn_default_af(s: float) -> float:
    """YaRN's attention factor sqrt(1/t) = 0.1·ln s + 1 (Peng et al. 2023, eq. 22)."""
    return 0.1 * math.log(s) + 1


def _sweep(workdir: str, root: pathlib.Path, points: list[tuple[str, dict]], length: int, split: str) -> dict:
    """{point name: bits per byte at `length`} of an eval sweep on `split` (every point must finish)."""
    records = sweep.run_eval_sweep(workdir, str(root), points, lengths=[length], scaling="yarn", num_bytes=NUM_BYTES,
                                   split=split, progress=False)
    failed = [r for r in records if r["status"] != "done"]
    if failed:
        raise RuntimeError(f"{len(failed)} sweep point(s) failed under {root}; the first: {failed[0]['error']}")
    return {r["name"]: r[f"bpb_L{length}"] for r in records}


def seed_config(seed: int):
    """The training config of seed `seed`'s RoPE run: the extrapolation study's config.py."""
    return load_config_file(str(HERE.parent / "extrapolation" / "config.py"), f"posenc=rope,seed={seed}")


def check_kept(result: dict, seed: int, path: pathlib.Path) -> None:
    """Refuses a kept result whose run was trained with another config than seed `seed`'s has now
    (`posenc.config.run_changes`, plus train_steps), so that a changed config.py never keeps old numbers under
    the new setup; a result from before results recorded their config is not compared.

    Raises:
      SystemExit: naming the result and the fields that differ.
    """
    if "config" not in result:
        return
    now = seed_config(seed)
    changes = result_changes(result["config"], now)
    if changes:
        raise SystemExit(f"{path} was computed on a run trained with another config than seed {seed}'s now ("
                         + ", ".join(f"{k} {a!r} → {b!r}" for k, (a, b) in sorted(changes.items()))
                         + "): move it aside to compute it again, or restore the old config")


def run_seed(seed: int, runs: pathlib.Path, root: pathlib.Path) -> dict:
    """Trains (if needed) and sweeps one seed's RoPE run; its result, as `results/seed<n>.json` keeps it."""
    workdir = runs / f"rope-s{seed}"
    start = time.time()
    train_and_evaluate(seed_config(seed), str(workdir))
    trained = time.time()
    run = ev.load_run(str(workdir))
    if run.base_len != BASE_LEN:
        raise ValueError(f"{workdir} has train_len {run.base_len}; this experiment's scales are of {BASE_LEN}")
    result = {"seed": seed, "run": str(workdir), "step": run.step, "params_sha256": checkpoint.tree_sha256(run.params),
              "config": json.loads((workdir / "config.json").read_text()),
              "num_bytes": NUM_BYTES, "validation": {"temperature": {}, "betas": {}}, "chosen": {"temperature": {}},
              "test": {"temperature": {}}}
    folder = root / f"s{seed}"
    resumed = folder.exists()  # its sweeps' time then counts only what this sitting computed
    for s in SCALES:
        length = BASE_LEN * s
        points = [(f"af={a:g}", {"factor": float(s), "attention_factor": a}) for a in ATTENTION_FACTORS]
        val = _sweep(str(workdir), folder / "validation" / f"temperature_s{s}", points, length, "validation")
        result["validation"]["temperature"][str(s)] = {str(p["attention_factor"]): val[n] for n, p in points}
        chosen = min(points, key=lambda np_: val[np_[0]])[1]["attention_factor"]  # ties: the smaller factor
        result["chosen"]["temperature"][str(s)] = chosen
        test_points = [("no_temperature", {"factor": float(s), "attention_factor": 1.0}),
                       ("yarn_default", {"factor": float(s)}),  # attention factor unset: 0.1 ln s + 1
                       ("chosen", {"factor": float(s), "attention_factor": chosen})]
        result["test"]["temperature"][str(s)] = _sweep(str(workdir), folder / "test" / f"temperature_s{s}",
                                                       test_points, length, "test")
    length = BASE_LEN * BETA_SCALE
    points = [(f"beta_fast={f:g},beta_slow={b:g}", {"beta_fast": f, "beta_slow": b}) for f in BETA_FAST for b in BETA_SLOW]
    val = _sweep(str(workdir), folder / "validation" / "betas", points, length, "validation")
    result["validation"]["betas"] = {f"{p['beta_fast']:g},{p['beta_slow']:g}": val[n] for n, p in points}
    chosen = min(points, key=lambda np_: val[np_[0]])[1]
    result["chosen"]["betas"] = chosen
    result["test"]["betas"] = _sweep(str(workdir), folder / "test" / "betas",
                                     [("yarn_default", {"beta_fast": 32.0, "beta_slow": 1.0}), ("chosen", chosen)],
                                     length, "test")
    lengths = sorted({BASE_LEN * s for s in SCALES})
    scored = ev.evaluate([str(workdir)], lengths, ["none"], num_bytes=NUM_BYTES, split="test", progress=False)
    plain = {r["length"]: r for r in scored["rows"] if r["protocol"] == "nonoverlap"}
    floor = {r["length"]: r for r in scored["baselines"]}
    if set(plain) != set(lengths) or set(floor) != set(lengths) or any(plain[n]["num_bytes"] != NUM_BYTES for n in lengths):
        raise RuntimeError(f"the plain evaluation of {workdir} did not score {NUM_BYTES} test bytes at {lengths}")
    result["test"]["no_scaling"] = {str(n): plain[n]["bpb"] for n in lengths}
    result["test"]["ngram_floor"] = {str(n): floor[n]["bpb"] for n in lengths}
    result["test"]["ngram_context"] = floor[lengths[0]]["ngram_context"]
    result["timing"] = {"train_s": trained - start, "sweeps_s": time.time() - trained, "resumed": resumed,
                        "threads": jobs.threads(), **timing.machine_record()}
    return result


def main(argv):
    FLAGS = flags.FLAGS
    malloc.keep_buffers()  # before JAX starts its threads: posenc/malloc.py
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.ERROR)
    (HERE / "results").mkdir(exist_ok=True)
    for seed in [int(s) for s in FLAGS.seeds]:
        out = HERE / "results" / f"seed{seed}.json"
        if out.exists():
            check_kept(json.loads(out.read_text()), seed, out)
            print(f"{out} exists: skipped")
            continue
        result = run_seed(seed, pathlib.Path(FLAGS.runs), pathlib.Path(FLAGS.root))
        jobs.write_atomic(out, json.dumps(result, indent=1))
        print(f"wrote {out}")


if __name__ == "__main__":  # flags defined here: report.py imports this module's constants
    flags.DEFINE_string("runs", "runs/yarn_sweep/runs", "Where the RoPE runs are (or go): not the extrapolation "
                        "study's folder, whose scored runs its fine-tunes start from.")
    flags.DEFINE_string("root", "runs/yarn_sweep", "Where the sweeps' point records go.")
    flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds of the RoPE runs.")
    app.run(main)
