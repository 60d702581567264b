r"""The length-generalization experiment, end to end and resumable. From the repository root:

    python experiments/length_generalization/run.py [--runs=runs/lengthgen] [--budget_minutes=170] [--workers=2]

Jobs run in priority order (`plan()`), each a training (experiments/length_generalization/config.py) then
its evaluation (posenc/task_eval.py) into results/<name>.json. The first tier is what one seed of every
verdict needs (the report estimates what is left of it from the finished jobs' measured cost):

  1. passkey at train_len 256 with RoPE and with ALiBi, seed 0 (configs/tasks.py's budget: up to 8000 steps,
     stopping at 99% validation exact match); evaluated at 256 … 4096 (1× … 16×) ×
     depths 0, 25, …, 100% (20 examples a cell), RoPE also with PI / NTK / dynamic NTK / YaRN and each
     training-free method (depths 0, 50, 100%, 10 examples a cell: the evaluation at 4096 is what costs);
  2. the RoPE passkey run fine-tuned at 4× (examples of 256 to 1024 tokens, 1500 steps at batch 8 and lr
     5e-4, all of them: no early stop) with PI, with YaRN, and without scaling (the control);
  3. copy, reverse and recall on lengths ≤ 32, tested to 128 (4×), the core encodings with and without
     randomized positions, seed 0 (4 layers: config.py's ALGO_LAYERS; the first results,
     at passkey's 2 layers, are kept in results/2layers/).

Then the tiers that extend it:

  4. seeds 1 and 2 of (3), recall's after copy's and reverse's (LATE_TASKS);
  5. passkey with the other core encodings, seed 0, then seeds 1 and 2 of every core passkey run;
  6. the other encodings of the registry, seed 0, then seeds 1 and 2.

A job whose results exist is skipped; a training that was interrupted resumes. `--budget_minutes` stops
starting new jobs once that much time has passed, so the command can be rerun to go on. `--workers=2` runs
two jobs at once, one per core, each with a one-threaded XLA: the small task models gain little from a
second thread, so two one-core workers finish more jobs per hour than one two-core process (each result
records its threads and timing). Workers claim jobs in plan order (`results/<name>.claim`, with their pid and host), so several run.py
processes can share the plan too (say one per core, each started with `taskset` and a one-threaded XLA);
a fine-tune waits for its base run. The report (report.py) is written at the end from whatever results
exist, and says which jobs are missing.

On the GPU machine (the `device` tool), `scripts/device_jobs.sh run length_generalization <minutes> --only=<jobs>` runs a selection of
the plan in one call (several workers sharing the GPU, float32 products in float32, deterministic kernels) and
brings their results back; `bash scripts/device_jobs.sh add length_generalization <folder>` adds them here. Such a result records
its device (`posenc.timing.device_record`), and the report counts its time apart from the CPUs'.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
import sys
import time

from absl import app, flags, logging

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from posenc import checkpoint, jobs, malloc, tasks  # noqa: E402
from posenc.checkpoint import params_sha256  # noqa: E402
from posenc.config import with_fields  # noqa: E402
from posenc.encodings import POSENCS, get_encoding  # noqa: E402
from posenc.task_eval import evaluate_tasks  # noqa: E402
from posenc.tasks import ALGORITHMIC  # noqa: E402
from posenc.timing import cpu_record, device_record  # noqa: E402
from posenc.train import load_config_file, train_and_evaluate  # noqa: E402

CORE = ("rope", "alibi", "none", "learned", "sinusoidal")
OTHERS = tuple(p for p in POSENCS if p not in CORE)
PASSKEY_TRAIN_LEN = 256  # configs/tasks.py's train_len for passkey (the in-range length)
PASSKEY_LENGTHS = (256, 512, 1024, 2048, 4096)
FT_LEN = 4 * PASSKEY_TRAIN_LEN  # the fine-tunes' train_len
DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
COARSE_DEPTHS = (0.0, 0.5, 1.0)  # for the scalings and methods beyond a run's own
ALGO_TRAIN_LEN = 32  # configs/tasks.py's train_len for copy, reverse and recall (the in-range length)
ALGO_LENGTHS = (16, 32, 64, 96, 128)
ROPE_SCALINGS = ("none", "linear", "ntk", "dynamic_ntk", "yarn")
ROPE_METHODS = ("self_extend", "rerope", "lm_infinite", "sinks")
NO_RANDOMIZE = ("none", "cope")  # encodings that take no positions
LATE_TASKS = ("recall",)  # tier 4 runs their seeds after the other tasks' seeds: copy's and reverse's seeds are
# further along, and three seeds of them complete the Kazemnejad and Ruoss verdicts over those tasks first
FT_LR = 5e-4  # the fine-tunes' peak learning rate. At 1e-3 for 200 steps of batch 4 (pilot rows ft*-lr1e-3-200)
# and at 2e-4 for 300 steps of batch 8 (ft*-lr2e-4-300) they reached 21–50% at 1024, their validation accuracy
# still rising (19% → 44% over the last 100 steps): their base run (of the first passkey budget, 3000 steps)
# needed about 2600 steps to pass 90%. At 5e-4 for 1000 steps on examples of 1024 only (ft*-lr5e-4-1000), no
# scaling reached 92% and PI 81% at 1024, but 1–50% at 256 and 512: a model fine-tuned on one length forgets the
# shorter ones. So the fine-tunes see examples of every length from 256 to 1024 (FT_MIN_LEN), for 1500 steps.
FT_STEPS = 1500
FT_MIN_LEN = 256

_RUNS = flags.DEFINE_string("runs", "runs/lengthgen", "Where the runs (checkpoints) go.")
_BUDGET = flags.DEFINE_float("budget_minutes", 170.0, "Start no new job after this many minutes.")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds.")
_PASSKEY_EXAMPLES = flags.DEFINE_integer("passkey_examples", 20, "Test examples per passkey cell (length, depth).")
_COARSE_EXAMPLES = flags.DEFINE_integer("coarse_examples", 10, "Test examples per passkey cell of the other "
                                       "scalings and methods (depths 0, 50, 100%).")
_ALGO_EXAMPLES = flags.DEFINE_integer("algo_examples", 100, "Test examples per algorithmic cell (length).")
_FT_STEPS = flags.DEFINE_integer("finetune_steps", FT_STEPS, "Fine-tuning steps at 4x the passkey length.")
_ONLY = flags.DEFINE_string("only", None, "Run only the jobs whose name matches this from its start: a prefix or a "
                             "regular expression (posenc.jobs.select).")
_WORKERS = flags.DEFINE_integer("workers", 1, "Processes sharing the plan, each pinned to one core with one XLA "
                                "thread (2 on 2 cores: more jobs per hour than one 2-thread process).")
_WORKER = flags.DEFINE_integer("worker", None, "Internal: the index of one of --workers processes.")


@dataclasses.dataclass(frozen=True)
class Job:
    name: str
    arg: str  # config.py's arg
    overrides: tuple = ()  # (field, value) pairs
    init_from: str | None = None
    scalings: tuple = ("none",)
    methods: tuple = ("none",)
    tier: int = 1  # 1: the first tier (one seed of every verdict); 2: the seeds and encodings that extend it

    @property
    def task(self) -> str:
        return self.arg.split("task=")[1].split(",")[0]


def plan(seeds: list[int], finetune_steps: int = FT_STEPS) -> list[Job]:
    def passkey(posenc, seed, tier=2):
        rope = get_encoding(posenc).takes_rope_scaling and posenc in CORE  # the core RoPE run gets every scaling
        return Job(f"passkey-{posenc}-s{seed}", f"task=passkey,posenc={posenc},seed={seed}",
                   scalings=ROPE_SCALINGS if rope else ("none",), methods=("none",) + (ROPE_METHODS if rope else ()),
                   tier=tier)

    def algo(task, posenc, seed, randomize, tier=2):
        return Job(f"{task}-{posenc}{'-rp' if randomize else ''}-s{seed}",
                   f"task={task},posenc={posenc},seed={seed}" + (",randomize" if randomize else ""), tier=tier)

    def algos(encodings, seed, tier=2):
        return [algo(t, p, seed, r, tier) for t in ALGORITHMIC for p in encodings
                for r in (False, True) if not (r and p in NO_RANDOMIZE)]

    first, rest = seeds[:1], seeds[1:]
    jobs = [passkey(p, s, tier=1) for s in first for p in ("rope", "alibi")]
    for kind, label in (("none", "noscale"), ("linear", "pi"), ("yarn", "yarn")):
        over = (("train_len", FT_LEN), ("batch_size", 8), ("train_steps", finetune_steps), ("warmup_steps", 50),
                ("learning_rate", FT_LR), ("task.min_len", FT_MIN_LEN), ("eval_windows", 16),
                ("task.stop_accuracy", None))  # every fine-tune runs its steps
        if kind != "none":
            over += (("model.rope.scaling.factor", float(FT_LEN // PASSKEY_TRAIN_LEN)),
                     ("model.rope.scaling.original_max_len", PASSKEY_TRAIN_LEN))
        posenc = "rope" if kind == "none" else kind
        jobs.append(Job(f"passkey-rope-s0-ft{label}4x", f"task=passkey,posenc={posenc},seed=0", over,
                        init_from="passkey-rope-s0", scalings=("run", "none") if kind != "none" else ("none",)))
    for s in first:  # copying first, with and without randomized positions, then the other tasks
        jobs += [algo("copy", p, s, r, tier=1) for p in CORE for r in (False, True) if not (r and p in NO_RANDOMIZE)]
        jobs += [j for j in algos(CORE, s, tier=1) if j not in jobs]
    seeds_rest = [j for s in rest for j in algos(CORE, s)]  # recall's last: see LATE_TASKS
    jobs += [j for j in seeds_rest if j.task not in LATE_TASKS] + [j for j in seeds_rest if j.task in LATE_TASKS]
    jobs += [passkey(p, s) for s in first for p in CORE if p not in ("rope", "alibi")]
    jobs += [passkey(p, s) for s in rest for p in CORE]
    for s in seeds:
        jobs += [passkey(p, s) for p in OTHERS]
        jobs += algos(OTHERS, s)
    return jobs


def job_config(job: Job, runs: pathlib.Path):
    """The training config of `job`: config.py's for its arg, with its overrides and its base run's workdir."""
    config = with_fields(load_config_file(str(HERE / "config.py"), job.arg), job.overrides, f"job {job.name}")
    if job.init_from:
        config.init_from = str(runs / job.init_from)
    return config


def attach_curve(result: dict, workdir: pathlib.Path) -> dict:
    """The run's training config (config.json), training curve (metrics.jsonl, packed: `jobs.pack_rows`; read it
    with `jobs.result_curve`) and tokens per step, kept with its results: the report checks each result's config
    against the one its job would train with now (`job_config`) and computes time-to-accuracy from the curve."""
    config = json.loads((workdir / "config.json").read_text())
    result["config"] = config
    result["curve_gz"] = jobs.pack_rows([json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()
                                         if line])
    result["tokens_per_step"] = config["batch_size"] * config["train_len"]
    return result


def merge_parts(done: dict[str, dict]) -> dict:
    """One result of evaluated parts (`evaluate_tasks` results): their rows in order; a field that every part
    has with one value (the seed) kept as it is, one whose values differ (a coarser part's examples, depths)
    kept per part under `parts`, so that no part is labelled with another's settings (each row has its own n
    and depth)."""
    fields = {k for p in done.values() for k in p if k != "rows"}
    same = {k for k in fields if all(k in p for p in done.values()) and
            all(p[k] == next(iter(done.values()))[k] for p in done.values())}
    result = {k: next(iter(done.values()))[k] for k in sorted(same)}
    if fields - same:
        result["parts"] = {key: {k: p.get(k) for k in sorted(fields - same)} for key, p in done.items()}
    result["rows"] = [row for p in done.values() for row in p["rows"]]
    return result


def run_job(job: Job, runs: pathlib.Path, results: pathlib.Path) -> None:
    """Trains `job` (resuming), evaluates it (resuming by part) and writes results/<name>.json atomically,
    with its training curve, CPU, threads and its training and evaluation seconds."""
    config = job_config(job, runs)
    base = results / f"{job.init_from}.json" if job.init_from else None
    if base and base.exists() and not (runs / job.name).exists():  # checked before a fine-tune's training starts
        want, have = json.loads(base.read_text())["params_sha256"], params_sha256(runs / job.init_from)
        if have != want:
            raise ValueError(f"{job.name}: its base {runs / job.init_from} holds parameters {have[:12]}…, not the "
                             f"{want[:12]}… its result {base} was scored with: restore that run, or remove its result "
                             "to train and score it again")
    start = time.time()
    train_and_evaluate(config, str(runs / job.name))
    trained = time.time() - start
    workdir = [str(runs / job.name)]
    partial_path = results / f"{job.name}.partial"  # parts evaluated so far (an interrupted job keeps them)

    def part(**kw):
        return lambda: evaluate_tasks(workdir, **kw)

    if job.task == "passkey":  # the full depth grid for the plain model and the run's own scaling; coarser for the rest
        own = tuple(s for s in job.scalings if s in ("none", "run"))
        parts = {"own": part(lengths=PASSKEY_LENGTHS, depths=DEPTHS, scalings=own, examples=_PASSKEY_EXAMPLES.value)}
        parts.update({f"scaling:{s}": part(lengths=PASSKEY_LENGTHS, depths=COARSE_DEPTHS, scalings=[s],
                                           examples=_COARSE_EXAMPLES.value) for s in job.scalings if s not in own})
        parts.update({f"method:{m}": part(lengths=PASSKEY_LENGTHS, depths=COARSE_DEPTHS, scalings=["none"],
                                          methods=[m], examples=_COARSE_EXAMPLES.value)
                      for m in job.methods if m != "none"})
    else:
        parts = {"all": part(lengths=ALGO_LENGTHS, scalings=job.scalings, methods=job.methods,
                             examples=_ALGO_EXAMPLES.value)}
    sha = params_sha256(runs / job.name)  # what a fine-tune from this run starts from
    # parts kept from an earlier sitting count only if computed from these parameters under these settings
    settings = {"job": dataclasses.asdict(job), "task_version": tasks.VERSIONS[job.task]}  # only what its parts read
    if job.task == "passkey":
        settings.update(examples=_PASSKEY_EXAMPLES.value, coarse_examples=_COARSE_EXAMPLES.value,
                        lengths=PASSKEY_LENGTHS, depths=DEPTHS, coarse_depths=COARSE_DEPTHS)
    else:
        settings.update(examples=_ALGO_EXAMPLES.value, lengths=ALGO_LENGTHS)
    if config.positions.randomize:
        settings["positions_version"] = tasks.POSITIONS_VERSION
    done, seconds = jobs.run_parts(partial_path, parts, jobs.stamp(sha, settings))
    result = merge_parts(done)
    result["job"] = dataclasses.asdict(job)
    result["params_sha256"] = sha
    init = checkpoint.read_run_info(runs / job.name).get("init_from")
    if job.init_from and init:  # what training loaded (posenc.train records it); report.check_bases holds it
        result["init_sha256"] = init["params_sha256"]  # to the base result's params_sha256
    attach_curve(result, runs / job.name)
    curve = jobs.result_curve(result)
    # the last validation row of the whole run (one that finished in an earlier sitting trains no step in this one)
    result["final_metrics"] = next(row for row in reversed(curve) if "val_loss" in row)
    result.update(cpu_record())
    result["threads"] = jobs.threads()
    result.update(device_record())
    # train_s: this sitting's training call (about 0 for a run trained in an earlier sitting; the curve's timed_s
    # holds every sitting's training time)
    result["timing"] = {"train_s": round(trained, 1), **jobs.parts_timing(seconds)}
    jobs.write_atomic(results / f"{job.name}.json", json.dumps(result))
    partial_path.unlink(missing_ok=True)


def main(argv):
    malloc.keep_buffers()  # before JAX starts its threads: posenc/malloc.py
    del argv
    logging.set_verbosity(logging.ERROR)
    t0 = time.time()
    runs = pathlib.Path(_RUNS.value)
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    full = plan([int(s) for s in _SEEDS.value], _FT_STEPS.value)
    planned = jobs.select(full, _ONLY.value)
    sys.modules.setdefault("run", sys.modules["__main__"])  # report.py imports this module as `run`
    import report  # noqa: PLC0415  (experiments/length_generalization/report.py)

    kept = report.load(results)
    # the seeds the kept results are of join the checked plan: a sitting of fewer --seeds still runs
    seen = {int(m.group(1)) for name in kept if (m := re.search(r"-s(\d+)(?:-|$)", name))}
    try:  # a result the report would refuse (another task version, config or base) stops the sitting before work
        report.check_results(kept, plan(sorted(seen | {int(s) for s in _SEEDS.value}), _FT_STEPS.value))
    except ValueError as e:
        raise SystemExit(str(e)) from None
    jobs.exit_on_sigterm()  # a terminated worker runs its `finally`s: its claim is removed
    if _WORKERS.value == 1 or _WORKER.value is not None:  # one process, or one of --workers started below
        jobs.work(planned, lambda job: run_job(job, runs, results), results, needs=lambda job: job.init_from,
                  deadline=t0 + 60 * _BUDGET.value)
        if _WORKER.value is not None:
            return
    else:
        jobs.spawn_workers(_WORKERS.value, sys.argv)
    timing = {p.stem: json.loads(p.read_text()).get("timing") for p in sorted(results.glob("*.json")) if p.stem != "timing"}
    jobs.write_atomic(results / "timing.json", json.dumps({k: v for k, v in timing.items() if v}, indent=1))
    print(report.write_report(HERE, full))


if __name__ == "__main__":
    app.run(main)
