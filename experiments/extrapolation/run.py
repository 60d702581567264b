r"""The extrapolation study, end to end and resumable. From the repository root:

    python experiments/extrapolation/run.py [--runs=runs/extrapolation] [--seeds=0,1,2]

1. trains NoPE, sinusoidal, learned, RoPE and ALiBi with identical budgets (experiments/extrapolation/config.py)
   at train_len 256, one run per (encoding, seed) under --runs;
2. fine-tunes each seed's RoPE run at 4x the length (train_len 1024) with PI and with YaRN for
   --finetune_steps steps (--init_from), with two controls of the same steps and tokens: training on at 256,
   and fine-tuning at 1024 without scaling;
3. evaluates every run at 256 … 4096 (1× … 16×) on the same test bytes with the three protocols; RoPE runs
   also with linear (PI), NTK, dynamic NTK, YaRN and dynamic YaRN applied at inference time, learned runs
   also with their table interpolated; results go to experiments/extrapolation/results/<run>.json;
4. writes the report (experiments/extrapolation/report.py).

Every stage skips what is done: rerun the same command after an interruption. A run whose result exists is not
trained again unless a missing fine-tune starts from it; then it must score as its result did
(`check_same_run`). A result records its run's config, and one whose run was trained otherwise than `job_config`
gives it now stops the command before any work (`check_kept`).
"""

from __future__ import annotations

import json
import pathlib
import time

import ml_collections
from absl import app, flags, logging

from posenc import evaluate as ev
from posenc import jobs, malloc
from posenc.config import result_changes
from posenc.timing import machine_record
from posenc.train import load_config_file, train_and_evaluate

HERE = pathlib.Path(__file__).resolve().parent
POSENCS = ("none", "sinusoidal", "learned", "rope", "alibi")
LENGTHS = (256, 512, 1024, 2048, 4096)
ROPE_SCALINGS = ("none", "linear", "ntk", "dynamic_ntk", "yarn", "dynamic_yarn")
FT_BASE = "rope"  # the encoding of the runs that FINETUNES continue: rope-s<seed>
# (label, posenc, train_len): PI and YaRN at 4x, and their controls: the same steps at 256 (does more training
# alone help?) and at 1024 without scaling (does the longer data alone help?)
FINETUNES = (("cont256", "rope", 256), ("noscale4x", "rope", 1024), ("pi4x", "linear", 1024), ("yarn4x", "yarn", 1024))
FT_TOKENS_PER_STEP = 4 * 1024  # the same tokens per step as the base runs (batch 16 x 256)
FT_LEARNING_RATE = 1e-3
FT_WARMUP_STEPS = 15



def define_flags() -> None:
    """The command's flags, defined when it runs (importing this module, as the tests do, defines none)."""
    flags.DEFINE_string("runs", "runs/extrapolation", "Where the runs (checkpoints) go.")
    flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds of the main comparison.")
    flags.DEFINE_integer("finetune_steps", 150, "Fine-tuning steps at 4x the length.")
    flags.DEFINE_integer("num_bytes", 32768, "Test bytes scored at every length.")


def job_config(name: str, runs: pathlib.Path, finetune_steps: int) -> ml_collections.ConfigDict:
    """The training config of run `name`: `<posenc>-s<seed>` (config.py's) or `rope-s<seed>-ft-<label>` (a
    fine-tune of FINETUNES from its base run in `runs`, `finetune_steps` steps)."""
    base, _, label = name.partition("-ft-")
    posenc, sep, seed = base.rpartition("-s")
    labels = [lab for lab, _, _ in FINETUNES]
    if not sep or posenc not in POSENCS or not seed.isdigit() or (label and (posenc != FT_BASE or label not in labels)):
        raise ValueError(f"{name!r} is no run of this study: <posenc>-s<seed> with posenc in {POSENCS}, or "
                         f"{FT_BASE}-s<seed>-ft-<label> with label in {labels}")
    if not label:
        return load_config_file(str(HERE / "config.py"), f"posenc={posenc},seed={seed}")
    kind, train_len = next((k, n) for lab, k, n in FINETUNES if lab == label)
    config = load_config_file(str(HERE / "config.py"), f"posenc={kind},seed={seed}")
    config.init_from = str(runs / base)
    config.train_len = train_len
    config.batch_size = FT_TOKENS_PER_STEP // train_len
    config.train_steps = finetune_steps
    config.warmup_steps = FT_WARMUP_STEPS
    config.learning_rate = FT_LEARNING_RATE
    config.eval_every = config.checkpoint_every = finetune_steps
    config.eval_windows = 16
    if kind != "rope":
        config.model.rope.scaling.factor = 4.0
        config.model.rope.scaling.original_max_len = 256
    return config


def check_kept(name: str, result: dict, runs: pathlib.Path, finetune_steps: int) -> None:
    """Refuses a kept result whose run was trained with another config than `job_config` gives it now
    (`posenc.config.run_changes`, plus train_steps; not the base's folder `init_from`), so that a changed config.py
    or fine-tune recipe never keeps old numbers under the new setup; a result from before results recorded their
    config is not compared.

    Raises:
      SystemExit: naming the result and the fields that differ.
    """
    if "config" not in result:
        return
    now = job_config(name, runs, finetune_steps)
    changes = result_changes(result["config"], now)
    if changes:
        raise SystemExit(f"results/{name}.json was computed on a run trained with another config than run.py gives it "
                         "now (" + ", ".join(f"{k} {a!r} → {b!r}" for k, (a, b) in sorted(changes.items()))
                         + "): move the results aside to compute them again, or restore the old config")


def check_same_run(workdir: str, result: dict, tolerance: float = 1e-4) -> None:
    """Refuses a run trained again (on another machine, its checkpoint gone) that is not the run its committed
    `result` scored: its bits per byte at the first length without scaling must agree within `tolerance`.

    Raises:
      RuntimeError: naming both numbers (fine-tunes from it would start from another run).
    """
    row = next(r for r in result["rows"] if r["scaling"] == "none" and r["protocol"] == "nonoverlap"
               and r["length"] == LENGTHS[0] and r["posenc"] != "n-gram")
    again = ev.evaluate([workdir], [LENGTHS[0]], ["none"], num_bytes=row["num_bytes"], ngram_floor=False,
                        progress=False)["rows"]
    bpb = next(r["bpb"] for r in again if r["protocol"] == "nonoverlap")
    if abs(bpb - row["bpb"]) > tolerance:
        raise RuntimeError(f"{workdir}, trained again, scores {bpb:.6f} bits per byte at {LENGTHS[0]} where its result "
                           f"scored {row['bpb']:.6f}: it is another run, and fine-tunes from it would not match the "
                           "others. Train the study again into a fresh --runs and results folder")


def _timed(log: dict, key: str, fn):
    """`fn()`, its wall time added to `log[key]` and the machine it ran on (`posenc.timing.machine_record`) to
    `log["machines"][key]`: a time summed over sittings lists each machine once."""
    t0 = time.time()
    out = fn()
    log[key] = log.get(key, 0.0) + time.time() - t0
    machines = log.setdefault("machines", {}).setdefault(key, [])
    if (record := machine_record()) not in machines:
        machines.append(record)
    return out


def main(argv):
    FLAGS = flags.FLAGS
    malloc.keep_buffers()  # before JAX starts its threads: posenc/malloc.py
    del argv
    logging.set_verbosity(logging.ERROR)
    runs = pathlib.Path(FLAGS.runs)
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    timing_path = results / "timing.json"
    timing = json.loads(timing_path.read_text()) if timing_path.exists() else {}
    for path in sorted(results.glob("*.json")):  # a kept result of another config stops the command before work
        if path.stem not in ("timing", "summary"):
            try:
                check_kept(path.stem, json.loads(path.read_text()), runs, FLAGS.finetune_steps)
            except ValueError as e:
                raise SystemExit(f"{path}: {e}; move it out of results/") from None

    done = lambda name: (results / f"{name}.json").exists()  # noqa: E731
    # each base run: its fine-tunes
    starts_from = {f"{FT_BASE}-s{seed}": [f"{FT_BASE}-s{seed}-ft-{label}" for label, _, _ in FINETUNES]
                   for seed in map(int, FLAGS.seeds)}
    names = []
    for posenc in POSENCS:
        for seed in map(int, FLAGS.seeds):
            name = f"{posenc}-s{seed}"
            names.append(name)
            fine_tunes = starts_from.get(name, [])
            if done(name) and all(map(done, fine_tunes)):
                continue  # scored, and no fine-tune left to start from it
            config = job_config(name, runs, FLAGS.finetune_steps)
            _timed(timing, f"train/{name}", lambda c=config, n=name: train_and_evaluate(c, str(runs / n)))
            jobs.write_atomic(timing_path, json.dumps(timing, indent=1))
            if done(name):  # trained again for its fine-tunes: it must be the run its result scored
                check_same_run(str(runs / name), json.loads((results / f"{name}.json").read_text()))

    for seed in map(int, FLAGS.seeds):  # the fine-tunes of every seed's RoPE run and their two controls
        for label, kind, train_len in FINETUNES:
            name = f"{FT_BASE}-s{seed}-ft-{label}"
            names.append(name)
            if done(name):
                continue
            config = job_config(name, runs, FLAGS.finetune_steps)
            _timed(timing, f"train/{name}", lambda c=config, n=name: train_and_evaluate(c, str(runs / n)))
            jobs.write_atomic(timing_path, json.dumps(timing, indent=1))

    for name in names:
        out = results / f"{name}.json"
        if out.exists():
            continue
        workdir = str(runs / name)
        run = ev.load_run(workdir)
        if "-ft-" in name:
            scalings = ["run", "none"] if run.cfg.rope_scaling.kind != "none" else ["none"]
        elif run.cfg.encoding.takes_rope_scaling:
            scalings = list(ROPE_SCALINGS)
        else:
            scalings = ["none"]
        result = _timed(timing, f"eval/{name}", lambda: ev.evaluate([workdir], LENGTHS, scalings,
                                                                     num_bytes=FLAGS.num_bytes, progress=True))
        if "learned_beyond" in run.cfg.encoding.model_fields:  # a table: the seeds' "interpolation", reported apart
            interp = ev.evaluate([workdir], LENGTHS, ["none"], num_bytes=FLAGS.num_bytes,
                                 learned_beyond="interpolate", progress=True)
            for row in interp["rows"]:
                row["scaling"] = "interpolate"
            result["rows"] += interp["rows"]
            result["per_position"].update({k.replace("|none", "|interpolate"): v for k, v in interp["per_position"].items()})
        result["config"] = json.loads((pathlib.Path(workdir) / "config.json").read_text())  # what check_kept compares
        jobs.write_atomic(out, json.dumps(result))
        jobs.write_atomic(timing_path, json.dumps(timing, indent=1))

    timing["finetune_steps"] = FLAGS.finetune_steps
    jobs.write_atomic(timing_path, json.dumps(timing, indent=1))
    from report import write_report  # noqa: PLC0415  (experiments/extrapolation/report.py)

    print(write_report(HERE, seeds=[int(s) for s in FLAGS.seeds]))


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(HERE))
    define_flags()
    app.run(main)
