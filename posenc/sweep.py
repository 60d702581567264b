"""Sweeps over config fields (train mode) or inference-time RoPE scaling parameters (eval mode).

An axis is `field=v1,v2,…`. Axes combine as a grid (every combination) or zipped (the i-th values together).

* **train**: each point overrides fields of a base config (`model.rope.base=100,1000`, `train_len=128,256`),
  trains its own run in `ROOT/<point name>` with `train_and_evaluate` (which resumes a half-finished run),
  then evaluates it past its training length. Its results land in `ROOT/<point name>/sweep_point.json`.
* **eval**: each point sets `RopeScaling` fields (`factor`, `attention_factor`, `beta_fast`, `beta_slow`,
  `kind`, `dynamic`, `truncate`, `original_max_len`) and training-free method fields (`method`, `window`,
  `group`, `leak`, `n_global`, `num_sinks`, `logn`: see posenc/training_free.py) and re-evaluates one
  trained run — no retraining, and no recompilation either: RoPE frequencies and the methods' parameters
  are traced inputs, so every point reuses one compiled forward per length (and method). Results land in
  `ROOT/points/<point name>.json`.

Points are scored on the validation split by default, the split to choose settings on: a table on the
validation split marks its lowest point at each length (in bold; the heatmap's title names it), one on the test
split does not (score the chosen point on test, as
`posenc.tuning.tune` does). A finished point (its JSON has status `done`) is skipped if it was computed from
the same config (train) or the same run and parameters (eval), scaling, split, corpus and bytes, and extended
if only lengths were added (at the same bytes: a default --num_bytes, 8 × the longest length, changes with them); a rerun that would compute it from anything else is refused before any work,
naming what differs (its numbers are never overwritten: give that sweep its own root), and so are new points
of other settings than the points under the root (one table shares them: `check_new_points`). A failing point
is recorded with its error (status `failed`) and the sweep goes on; a sweep whose every point failed exits non-zero. Each point is also an independent command (`--points=NAME` or
`--shard=i/n`), so points can be spread over machines and gathered into one table with `--aggregate_only`.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import itertools
import json
import math
import pathlib
import traceback
from typing import Any, Callable, Sequence

import ml_collections
import numpy as np
from tqdm.auto import tqdm

from posenc import checkpoint, data, jobs
from posenc.config import (SCALING_FIELDS, defining_fields, parse_value, scaling_fields_read, unread_fields, validate,
                           with_fields)
from posenc.evaluate import (LN2, Evaluator, bootstrap_interval, check_num_bytes, check_split, hf_run, load_run,
                             ngram_baseline, run_stream)
from posenc.encodings import get_encoding
from posenc.rope_scaling import KINDS, RopeScaling
from posenc.training_free import FIELDS as METHOD_FIELDS
from posenc.training_free import Method

MODES = ("train", "eval")
COMBINE = ("grid", "zip")
EVAL_FIELDS = ("kind", "factor", "attention_factor", "beta_fast", "beta_slow", "dynamic", "truncate",
               "original_max_len")
# The types of the RopeScaling fields but `kind` (one of KINDS), as an axis value must have them (a bool is no
# number here: float(True) is 1.0), and those that also take None (their RopeScaling default).
EVAL_FIELD_TYPES = {"factor": float, "attention_factor": float, "beta_fast": float, "beta_slow": float,
                    "dynamic": bool, "truncate": bool, "original_max_len": int}
EVAL_OPTIONAL = ("attention_factor", "original_max_len")


def parse_axes(specs: Sequence[str]) -> list[tuple[str, list[Any]]]:
    """['model.rope.base=100,1000', 'factor=2,4'] -> [('model.rope.base', [100, 1000]), ('factor', [2, 4])]."""
    axes = []
    for spec in specs:
        field, sep, values = spec.partition("=")
        if not sep or not field.strip() or not values.strip():
            raise ValueError(f"axis must look like field=v1,v2,…, got {spec!r}")
        if any(not v.strip() for v in values.split(",")):
            raise ValueError(f"axis {field.strip()!r} has an empty value in {spec!r}: values are comma-separated "
                             "(v1,v2,…), each non-empty")
        axes.append((field.strip(), [parse_value(v.strip()) for v in values.split(",")]))
    fields = [f for f, _ in axes]
    if len(set(fields)) != len(fields):
        raise ValueError(f"axis fields must be distinct, got {fields}")
    return axes


def expand(axes: list[tuple[str, list[Any]]], combine: str = "grid") -> list[dict[str, Any]]:
    """The points of the sweep, each a {field: value} dict, in a stable order."""
    if combine not in COMBINE:
        raise ValueError(f"combine must be one of {COMBINE}, got {combine!r}")
    if not axes:
        raise ValueError("a sweep needs at least one axis")
    fields = [f for f, _ in axes]
    if combine == "zip":
        lengths = {len(v) for _, v in axes}
        if len(lengths) != 1:
            raise ValueError(f"zipped axes must have the same number of values, got {[len(v) for _, v in axes]}")
        combos = zip(*(v for _, v in axes))
    else:
        combos = itertools.product(*(v for _, v in axes))
    return [dict(zip(fields, combo)) for combo in combos]


def _fmt(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def point_name(point: dict[str, Any], all_fields: Sequence[str] | None = None) -> str:
    """'base=100,factor=2' from {'model.rope.base': 100, 'model.rope.scaling.factor': 2}: the last component
    of each field, or the whole dotted field where two fields share their last component."""
    fields = list(all_fields or point)
    short = [f.split(".")[-1] for f in fields]
    clash = {s for s in short if short.count(s) > 1}
    parts = []
    for field in point:
        label = field if field.split(".")[-1] in clash else field.split(".")[-1]
        parts.append(f"{label}={_fmt(point[field])}")
    return ",".join(parts).replace("/", "_")


def _read(path: pathlib.Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.exists() else None


def _write(path: pathlib.Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    jobs.write_atomic(path, json.dumps(record, indent=1))  # a temporary file of its own: sweeps may share points


def select(points: list[dict[str, Any]], names: Sequence[str] | None = None, shard: str | None = None):
    """The points this command runs: all, the named ones, or shard i/n (points i, i+n, …).

    `names` are point names, or the pieces a comma-separated list flag (`--points`) splits them into: a name
    has one `field=value` part per axis (`factor=2,attention_factor=1.1` arrives as two pieces), so pieces that
    are not names themselves are rejoined in groups of that many."""
    fields = list(points[0]) if points else []
    named = [(point_name(p, fields), p) for p in points]
    known_names = {n for n, _ in named}
    if names and len(fields) > 1 and not all(n in known_names for n in names):
        pieces = [piece for n in names for piece in n.split(",")]
        if len(pieces) % len(fields):
            raise ValueError(f"--points: {','.join(names)!r} does not split into names of {len(fields)} "
                             f"field=value parts (one per axis {fields}); points are {sorted(known_names)}")
        names = [",".join(pieces[i:i + len(fields)]) for i in range(0, len(pieces), len(fields))]
    by_name: dict[str, list] = {}
    for n, p in named:
        by_name.setdefault(n, []).append(p)
    same = {n: ps for n, ps in by_name.items() if len(ps) > 1}
    if same:  # one run directory / record for several points: one would overwrite or refuse another
        raise ValueError("sweep points whose names coincide (values alike to 6 digits, or '/' read as '_'): "
                         + "; ".join(f"{n}: {ps}" for n, ps in same.items()))
    if names:
        unknown = [n for n in names if n not in known_names]
        if unknown:
            raise ValueError(f"unknown point(s) {unknown}; points are {sorted(known_names)}")
        named = [(n, p) for n, p in named if n in names]
    if shard:
        i, sep, n = shard.partition("/")
        if not (sep and i.strip().isdigit() and n.strip().isdigit()) or not 0 <= int(i) < int(n):
            raise ValueError(f"shard must be i/n with integers 0 <= i < n (such as 0/3), got {shard!r}")
        i, n = int(i), int(n)
        named = named[i::n]
    return named


def _bpb_rows(evaluator: Evaluator, stream: np.ndarray, lengths: Sequence[int], num_bytes: int,
              make_scaling: Callable[[int], RopeScaling], method: Method | None = None,
              counts: np.ndarray | None = None) -> dict[str, float | None]:
    """Bits per byte at each length (`counts`: UTF-8 bytes per token of a Hugging Face run's stream), its 95%
    bootstrap interval over windows (`ci_L<n>`: `posenc.evaluate.bootstrap_interval`), each window's bits per
    byte (`window_bpb_L<n>`, for paired comparisons with other evaluations of the same windows), the n-gram floor
    on the same windows for a byte run (`floor_L<n>`: `posenc.evaluate.ngram_baseline`; None for a tokenizer's
    run), and the RoPE scaling each length was scored with (`scaling_L<n>`, `scaling_fields`)."""
    run = evaluator.run

    def floor(x, y):  # fit (or read from the cache) only once a length is scored
        model, context, _ = ngram_baseline(run.config.data.path, run.config.data.cache_dir)
        return float(model.bits(x, y, context).mean())

    out: dict[str, Any] = {}
    for length in lengths:
        if evaluator.undefined_reason(length, evaluator.resolve(method, length)):
            out[f"bpb_L{length}"] = None
            continue
        scaling = make_scaling(length)
        out[f"scaling_L{length}"] = scaling_fields(scaling)
        x, y = data.eval_windows(stream, length=length, num_bytes=num_bytes)
        nll = np.asarray(evaluator.nll(x, y, scaling, method), np.float64)
        window_bytes = (np.full(len(nll), length) if counts is None
                        else counts[1:num_bytes + 1].reshape(len(nll), length).sum(axis=1))
        out[f"bpb_L{length}"] = float(nll.sum() / window_bytes.sum()) / LN2
        out[f"ci_L{length}"] = bootstrap_interval(nll.sum(axis=1) / LN2, window_bytes)
        out[f"window_bpb_L{length}"] = (nll.sum(axis=1) / LN2 / window_bytes).tolist()
        out[f"floor_L{length}"] = floor(x, y) if run.tokenizer is None else None
    return out


def scaling_fields(scaling: RopeScaling) -> dict[str, Any]:
    """A RopeScaling as the JSON a record keeps (tuples as lists)."""
    return json.loads(json.dumps(dataclasses.asdict(scaling)))


def missing_lengths(record: dict[str, Any] | None, key: dict[str, Any], lengths: Sequence[int],
                    scaling_at: Callable[[int], RopeScaling] | None = None, windows: bool = False) -> list[int]:
    """The lengths a point still needs: none if `record` is done for the same `key` (what it was computed
    from: config or run and step, scaling, split, bytes) at every length; the missing ones if only lengths
    were added; all of them otherwise (another key, a failed or unfinished record). With `scaling_at`, a scored
    length whose recorded scaling (`scaling_L<n>`) is not the one it resolves to now (a named scaling whose
    meaning changed, or a record that kept none) is missing too (a train sweep checks it once the point's run
    exists). With `windows`, so is a scored length whose record kept no per-window scores (`window_bpb_L<n>`)."""
    if not record or record.get("status") != "done" or same_key(record.get("key", {})) != same_key(key):
        return list(lengths)
    return [n for n in lengths if f"bpb_L{n}" not in record or (
        scaling_at is not None and record[f"bpb_L{n}"] is not None
        and record.get(f"scaling_L{n}") != scaling_fields(scaling_at(n))) or (
        windows and record[f"bpb_L{n}"] is not None and f"window_bpb_L{n}" not in record)]


def _differences(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    """'field: old in the record, new now' for each field (nested dicts dotted) where two keys differ."""
    out = []
    for k in sorted(set(old) | set(new), key=str):
        a, b = old.get(k, "(absent)"), new.get(k, "(absent)")
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differences(a, b, f"{prefix}{k}.")
        elif a != b:
            out.append(f"{prefix}{k}: {a!r} in the record, {b!r} now")
    return out


def same_key(key: dict[str, Any]) -> dict[str, Any]:
    """What decides whether a record can be reused: its key, less the run's path where its parameters' SHA-256
    names the run (a path is typed differently on each machine, and a checkout moves)."""
    return {k: v for k, v in key.items() if not (k == "run" and "params_sha256" in key)}


def check_rerun(root: str, todo: Sequence[tuple[str, dict[str, Any] | None, dict[str, Any]]]) -> None:
    """Refuses a rerun that would overwrite a finished point (`old`, status done) with one computed from another
    key (another config or run, scaling, split, corpus, bytes or point values): run before any point is computed.

    Args:
      todo: (point name, its record under `root` or None, the key it would be computed from now).

    Raises:
      ValueError: naming each such point and the fields that differ.
    """
    clashes = [(name, _differences(same_key(old.get("key", {})), same_key(key))) for name, old, key in todo
               if old and old.get("status") == "done" and same_key(old.get("key", {})) != same_key(key)]
    if clashes:
        raise ValueError(f"{root} holds finished sweep points computed from other settings; rerunning would overwrite "
                         "them: " + "; ".join(f"{name} ({', '.join(d[:4])}{', …' if len(d) > 4 else ''})"
                                               for name, d in clashes[:3])
                         + (f"; and {len(clashes) - 3} more" if len(clashes) > 3 else "")
                         + " — give this sweep its own --root, or the settings of the finished one (lengths added "
                           "to a sweep whose --num_bytes was left out change its default, 8 × the longest length: "
                           "pass the recorded num_bytes to extend it)")


def _record(old: dict[str, Any] | None, key: dict[str, Any], lengths: Sequence[int], base: dict[str, Any],
            scaling_at: Callable[[int], RopeScaling] | None = None, windows: bool = False):
    """The record to extend (the old one when only lengths are missing) or a fresh one."""
    todo = missing_lengths(old, key, lengths, scaling_at, windows)
    if old and old.get("status") == "done" and same_key(old.get("key", {})) == same_key(key):
        return {**old, "key": key}, todo
    return {**base, "key": key, "status": "running"}, todo


def check_train_points(base_config: ml_collections.ConfigDict, points: list[tuple[str, dict]], scaling: str) -> None:
    """Raises a ValueError naming the point for a point whose config does not validate, or whose encoding cannot
    take `scaling`: run before any point trains (and before the sweep's folder is made)."""
    from posenc.evaluate import SCALINGS  # noqa: PLC0415

    if scaling not in SCALINGS:
        raise ValueError(f"scaling must be one of {SCALINGS}, got {scaling!r}")
    for name, point in points:
        config = with_fields(base_config, point, "sweep axis")
        try:
            validate(config)
        except ValueError as e:
            hint = ("; a field only some points' encodings read can be swept with them: --combine=zip"
                    if "model.posenc" in point and unread_fields(config) else "")
            raise ValueError(f"sweep point {name}: {e}{hint}") from None
        posenc = config.model.posenc
        if scaling not in ("none", "run") and not get_encoding(posenc).takes_rope_scaling:
            raise ValueError(f"scaling {scaling!r} does not apply to point {name} (posenc={posenc!r} takes no RoPE "
                             "scaling): use --scaling=none")


def _train_key(config: ml_collections.ConfigDict, lengths: Sequence[int], scaling: str, split: str,
               num_bytes: int | None) -> tuple[dict[str, Any], np.ndarray]:
    """(the key a train-sweep point is computed from, the split's bytes it is scored on)."""
    corpus = data.load_corpus(config.data.path, config.data.cache_dir)
    stream = corpus.split(split)
    nb = check_num_bytes(stream, lengths, num_bytes, default_windows=8, what=f"the {split} split")
    key = {"config": json.loads(json.dumps(defining_fields(config))), "train_steps": config.train_steps,
           "scaling": scaling, "split": split, "num_bytes": nb, "corpus": corpus.sha256}
    return key, stream


def base_digest(config: ml_collections.ConfigDict) -> str:
    """A train sweep's base config (what defines its runs, and train_steps) as 16 hex digits: the points of one
    table share it."""
    fields = {**json.loads(json.dumps(defining_fields(config))), "train_steps": config.train_steps}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def run_train_sweep(base_config: ml_collections.ConfigDict, root: str, points: list[tuple[str, dict]], *,
                    lengths: Sequence[int], scaling: str = "none", num_bytes: int | None = None,
                    split: str = "validation", train_fn: Callable | None = None,
                    progress: bool = True) -> list[dict[str, Any]]:
    """Trains (or resumes) and evaluates each point on `split`; returns the point records.

    A point is reused only for the same config, scaling, split, corpus and bytes, and extended with lengths it
    lacks; a finished point of other settings, or points of other settings than those under `root`, are refused
    before any work (`check_rerun`, `check_new_points`). A point whose run
    directory holds a run of another config fails with the training's error naming the fields (a run directory
    is never retrained under another config).
    """
    from posenc.evaluate import scaling_for  # noqa: PLC0415
    from posenc.train import train_and_evaluate  # noqa: PLC0415

    check_split(split)
    check_train_points(base_config, points, scaling)
    train_fn = train_fn or train_and_evaluate
    base = base_digest(base_config)
    path_of = lambda name: pathlib.Path(root) / name / "sweep_point.json"  # noqa: E731
    keys = {}
    for name, point in points:  # a point whose key cannot be made fails below, with its error recorded
        try:
            keys[name] = _train_key(with_fields(base_config, point, "sweep axis"), lengths, scaling, split, num_bytes)[0]
        except Exception:  # noqa: BLE001
            pass
    check_rerun(root, [(name, _read(path_of(name)), key) for name, key in keys.items()])
    fresh = {name: {"name": name, "point": point, "mode": "train", "split": split, "base": base, "status": "running"}
             for name, point in points}
    check_new_points(root, "train", [{**fresh[name], "key": key, "scaling": scaling, "num_bytes": key["num_bytes"]}
                                     for name, key in keys.items()])
    records = []
    for name, point in tqdm(points, desc="sweep points", disable=not progress or None):
        path = path_of(name)
        old = _read(path)
        record = dict(fresh[name])
        try:
            config = with_fields(base_config, point, "sweep axis")
            key, stream = _train_key(config, lengths, scaling, split, num_bytes)
            record, todo = _record(old, key, lengths, record)
            workdir = str(pathlib.Path(root) / name)
            if not todo and pathlib.Path(workdir).exists():  # each length's scaling as it resolves now
                trained = load_run(workdir, name)
                todo = missing_lengths(old, key, lengths, lambda n: scaling_for(trained, scaling, n))
            if not todo:
                records.append(record)
                continue
            train_fn(config, workdir)
            run = load_run(workdir, name)
            ev = Evaluator(run)
            record.update(_bpb_rows(ev, stream, todo, key["num_bytes"], lambda n: scaling_for(run, scaling, n)),
                          status="done", scaling=scaling, num_bytes=key["num_bytes"], train_len=run.train_len,
                          step=run.step)
        except Exception as e:  # noqa: BLE001 — one failing point must not stop the sweep
            record.update(status="failed", error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc()[-2000:])
        _write(path, record)
        records.append(record)
    return records


def split_point(point: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """An eval-sweep point's (RopeScaling fields, training-free method fields); an unknown field is an error."""
    method_fields = ("method",) + METHOD_FIELDS
    unknown = sorted(set(point) - set(EVAL_FIELDS) - set(method_fields))
    if unknown:
        raise ValueError(f"eval sweep axes must be RopeScaling fields {EVAL_FIELDS} or training-free method fields "
                         f"{method_fields}, got {unknown}")
    return ({k: v for k, v in point.items() if k in EVAL_FIELDS},
            {k: v for k, v in point.items() if k in method_fields})


def check_eval_point(name: str, point: dict[str, Any], base_kind: str) -> None:
    """Refuses an eval-sweep point with a RopeScaling field of another type than the field's (EVAL_FIELD_TYPES:
    `--axis=factor=true` would be scored at float(True) = 1.0 and labelled True), or one its kind (the point's
    `kind`, else `base_kind`, the --scaling) does not read (posenc.config.SCALING_FIELDS): its record would be
    labelled with values that changed nothing (--scaling=none --axis=factor=2,4 scores every point unscaled)."""
    fields = split_point(point)[0]
    for field, value in fields.items():
        want = EVAL_FIELD_TYPES.get(field)  # (kind: one of KINDS, below)
        if want is None or (value is None and field in EVAL_OPTIONAL):
            continue
        accepts = {float: (int, float, np.integer, np.floating), int: (int, np.integer), bool: (bool, np.bool_)}[want]
        if not isinstance(value, accepts) or (want is not bool and isinstance(value, (bool, np.bool_))):
            wanted = {float: "a number", int: "an integer", bool: "True or False"}[want]
            raise ValueError(f"sweep point {name}: axis {field}={value!r}: {field} takes {wanted} ({want.__name__}"
                             f"{' or None' if field in EVAL_OPTIONAL else ''}), not {type(value).__name__}")
    kind = fields.get("kind", base_kind)
    if kind not in KINDS:
        raise ValueError(f"sweep point {name}: kind must be one of {KINDS}, got {kind!r}")
    reads = scaling_fields_read(kind, bool(fields.get("dynamic")))
    unread = [f for f in fields if f != "kind" and f not in reads]
    if unread:
        raise ValueError(f"sweep point {name}: RoPE scaling kind {kind!r} (--scaling or a kind axis) does not read "
                         f"{', '.join(f'{f}={fields[f]!r}' for f in unread)} (it reads "
                         f"{', '.join(f for f in SCALING_FIELDS[kind] if f in EVAL_FIELDS) or 'no field'}"
                         f"{'; dynamic=True replaces factor by seq_len / original_max_len' if fields.get('dynamic') else ''}"
                         "): sweep the fields of the kind, or set --scaling to the kind the axes modify")


def eval_method(point: dict[str, Any], base_method: str = "none") -> Method:
    """The training-free method of an eval-sweep point (its unset parameters resolved per length later)."""
    fields = dict(split_point(point)[1])
    return Method(fields.pop("method", base_method), **fields)


def eval_scaling(run, point: dict[str, Any], base_kind: str, length: int) -> RopeScaling:
    """The RopeScaling of an eval-sweep point at `length`: factor L / L0 unless the point sets one (`dynamic_ntk`:
    slope 1, the length-tracking variant, as `posenc.evaluate.scaling_for`)."""
    point = split_point(point)[0]
    kwargs = {"kind": base_kind, "original_max_len": run.base_len}
    kwargs.update(point)
    if "factor" not in point and not kwargs.get("dynamic"):
        kwargs["factor"] = 1.0 if kwargs["kind"] == "dynamic_ntk" else max(1.0, length / kwargs["original_max_len"])
    for key in ("factor", "attention_factor", "beta_fast", "beta_slow"):
        if key in kwargs and kwargs[key] is not None:
            kwargs[key] = float(kwargs[key])
    return RopeScaling(**kwargs)


def run_eval_sweep(workdir: str, root: str, points: list[tuple[str, dict]], *, lengths: Sequence[int],
                   scaling: str = "yarn", num_bytes: int | None = None, split: str = "validation",
                   progress: bool = True, method: str = "none", hf_model: bool = False,
                   text: str | None = None, windows: bool = False) -> list[dict[str, Any]]:
    """Re-evaluates one run at every point (one compiled forward per length and method for all points).
    `scaling` is the base RoPE scaling kind and `method` the base training-free method the points modify.
    With `windows`, a finished point whose record kept no per-window scores is scored again.
    With `hf_model`, `workdir` is a Hugging Face checkpoint directory scoring the corpus `text` in its own
    tokens (lengths and `num_bytes` in tokens; bits per UTF-8 byte)."""
    check_split(split)
    if scaling not in KINDS:
        raise ValueError(f"scaling (the RoPE scaling kind the points modify) must be one of {KINDS}, got {scaling!r}")
    for name, point in points:  # before the run loads: a point labelled with fields its kind does not apply
        check_eval_point(name, point, scaling)
    run = hf_run(workdir, text) if hf_model else load_run(workdir)
    rescales = scaling != "none" or any(split_point(p)[0] for _, p in points)
    if rescales and not run.cfg.encoding.takes_rope_scaling:
        raise ValueError(f"an eval sweep over RoPE scaling needs a run whose encoding takes one; {workdir!r} has "
                         f"posenc={run.cfg.posenc!r} (sweep training-free method fields with --scaling=none)")
    for _, point in points:  # every point's method must be defined for the run, before any work
        eval_method(point, method).check(run.cfg.encoding, run.cfg)
    stream, counts, digest = run_stream(run, split)
    nb = check_num_bytes(stream, lengths, num_bytes, default_windows=8, what=f"the {split} split")
    ev = Evaluator(run)
    key = {"run": str(pathlib.Path(workdir).expanduser().resolve()), "step": run.step, "scaling": scaling,
           "split": split, "num_bytes": nb, "corpus": digest,
           "params_sha256": checkpoint.tree_sha256(run.params)}  # a run trained again to the same step differs
    if method != "none":
        key["method"] = method
    if hf_model:
        key["hf_model"] = True
    point_keys = {name: json.loads(json.dumps({**key, "point": point}))  # the exact values, not the rounded name
                  for name, point in points}
    path_of = lambda name: pathlib.Path(root) / "points" / f"{name}.json"  # noqa: E731
    check_rerun(root, [(name, _read(path_of(name)), point_keys[name]) for name, _ in points])
    fresh = {name: {"name": name, "point": point, "mode": "eval", "run": workdir, "step": run.step,
                    "scaling": scaling, "split": split, "num_bytes": nb, "train_len": run.train_len,
                    "status": "running"}
             for name, point in points}
    check_new_points(root, "eval", [{**fresh[name], "key": point_keys[name]} for name, _ in points])
    records = []
    for name, point in tqdm(points, desc="sweep points", disable=not progress or None):
        path = path_of(name)
        point_key = point_keys[name]
        record = dict(fresh[name])
        try:  # one failing point must not stop the sweep
            point_method = eval_method(point, method)

            def scaling_at(n, point=point, point_method=point_method):
                """The point's scaling at length n (under a bounded method, at the longest distance it sees)."""
                return eval_scaling(run, point, scaling, ev.resolve(point_method, n).scaling_length(n))

            record, todo = _record(_read(path), point_key, lengths, record, scaling_at, windows)
            if not todo:
                records.append(record)
                continue
            record.update(_bpb_rows(ev, stream, todo, nb, scaling_at, point_method, counts if hf_model else None),
                          status="done")
        except Exception as e:  # noqa: BLE001
            record.update(status="failed", error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc()[-2000:])
        _write(path, record)
        records.append(record)
    return records


# what every record of one sweep table shares (its axes aside): records of another command would be one series
SHARED = {"train": ("scaling", "split", "num_bytes", "corpus", "base"),
          "eval": ("run", "scaling", "method", "split", "num_bytes", "corpus", "hf_model")}


def gather(root: str, mode: str, axes: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Every point record written under `root` (from any machine).

    Raises:
      ValueError: records made with other settings (SHARED: the scaling, the split, the corpus and the bytes
        scored; in train mode also the base config and train_steps, `base_digest`; in eval mode the run — its
        parameters' SHA-256 and step —, the method and whether it is a Hugging Face checkpoint), or, with
        `axes`, over other axes than these fields in this order (a table over `axes` would show other axes'
        points with None for its fields, and the same axes in another order name each point anew, so every
        point would be in it twice) — sweeps with other settings belong under their own --root.
    """
    records = _records(root, mode)
    other = [r["name"] for r in records if axes is not None and list(r.get("point", {})) != list(axes)]
    if other:  # (the same axes in another order name every point anew: each would be in the table twice)
        raise ValueError(f"{root} holds sweep points over other axes than {list(axes)} (or these in another order): "
                         + ", ".join(other[:5]) + (f" and {len(other) - 5} more" if len(other) > 5 else "")
                         + " — give each sweep its own --root")
    check_settings(root, mode, records)
    return records


def _records(root: str, mode: str) -> list[dict[str, Any]]:
    pattern = "*/sweep_point.json" if mode == "train" else "points/*.json"
    return [json.loads(p.read_text()) for p in sorted(pathlib.Path(root).glob(pattern))]


def check_settings(root: str, mode: str, records: Sequence[dict[str, Any]]) -> None:
    """Raises a ValueError if `records` (of one table under `root`) were made with other settings (SHARED)."""
    values: dict[str, dict[Any, list[str]]] = {}
    for r in records:
        key = r.get("key", {})  # the run by its weights (a path is typed differently on each machine)
        setting = {**r, "method": key.get("method", "none"), "corpus": key.get("corpus"),
                   "split": r.get("split", key.get("split")), "hf_model": key.get("hf_model", False),
                   "run": [key["params_sha256"], r.get("step")] if "params_sha256" in key else r.get("run")}
        for field in SHARED[mode]:
            if setting.get(field) is not None:
                values.setdefault(field, {}).setdefault(json.dumps(setting[field]), []).append(r["name"])
    mixed = {f: v for f, v in values.items() if len(v) > 1}
    if mixed:
        raise ValueError(f"{root} holds sweep points made with other settings: "
                         + "; ".join(f"{f}: " + ", ".join(f"{json.loads(k)!r} ({', '.join(n[:3])}"
                                                             f"{', …' if len(n) > 3 else ''})" for k, n in v.items())
                                     for f, v in mixed.items())
                         + " — give each sweep its own --root")


def check_new_points(root: str, mode: str, new: Sequence[dict[str, Any]]) -> None:
    """Refuses points about to run (`new`: their records as they would be written, without results) that the
    table would refuse with the records under `root` (`check_settings`): run before any point runs or writes.
    A record under `root` of the same name is left out (the point's own rerun check: `check_rerun`)."""
    names = {r["name"] for r in new}
    check_settings(root, mode, [r for r in _records(root, mode) if r["name"] not in names] + list(new))


def records_split(records: Sequence[dict[str, Any]]) -> str | None:
    """The split a gathered sweep's points were scored on (None for no records)."""
    splits = {r.get("split", r.get("key", {}).get("split")) for r in records}
    if len(splits) > 1:
        raise ValueError(f"sweep points scored on different splits: {sorted(map(str, splits))}")
    return next(iter(splits), None)


def write_outputs(records: list[dict[str, Any]], root: str, axes: list[str], lengths: Sequence[int],
                  plot_length: int | None = None) -> dict[str, pathlib.Path]:
    """results.csv, results.md and a plot: a heatmap for two axes, lines over length for one (each point shaded over
    its interval over windows, and the n-gram floor dashed, as the table has them)."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    out = pathlib.Path(root)
    out.mkdir(parents=True, exist_ok=True)
    cols = [f"bpb_L{n}" for n in lengths]
    split = records_split(records) or "validation"
    paths = {"csv": out / "results.csv", "md": out / "results.md", "png": out / "sweep.png"}
    ci = lambda r, n: r.get(f"ci_L{n}") or (None, None)  # noqa: E731
    floors = {n: next((r[f"floor_L{n}"] for r in records if r.get(f"floor_L{n}") is not None), None) for n in lengths}
    with open(paths["csv"], "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["name", *axes, "split", "status", *cols, *(f"{b}_L{n}" for n in lengths for b in ("bpb_lo", "bpb_hi")),
                    "error"])
        for r in records:
            w.writerow([r["name"], *(r["point"].get(a) for a in axes), split, r["status"], *(r.get(c) for c in cols),
                        *(v for n in lengths for v in ci(r, n)), r.get("error", "")])
        if any(v is not None for v in floors.values()):
            w.writerow(["n-gram floor", *([""] * len(axes)), split, "baseline", *(floors[n] for n in lengths),
                        *([""] * 2 * len(lengths)), ""])

    lowest = {n: min((r[f"bpb_L{n}"] for r in records if r["status"] == "done" and r.get(f"bpb_L{n}") is not None),
                     default=None) for n in lengths}

    def cell(r, n):  # on validation the lowest of each length in bold: the sweep's choice there
        v, (lo, hi) = r.get(f"bpb_L{n}"), ci(r, n)
        if v is None:
            return "–"
        text = f"**{v:.3f}**" if split == "validation" and r["status"] == "done" and v == lowest[n] else f"{v:.3f}"
        return text + (f" [{lo:.3f}, {hi:.3f}]" if lo is not None else "")

    lines = ["| " + " | ".join([*axes, "status", *cols]) + " |", "|" + "---|" * (len(axes) + 1 + len(cols))]
    for r in records:
        lines.append("| " + " | ".join([*(_fmt(r["point"].get(a)) for a in axes), r["status"],
                                        *(cell(r, n) for n in lengths)]) + " |")
    if any(v is not None for v in floors.values()):
        lines.append("| " + " | ".join(["n-gram floor", *(["—"] * (len(axes) - 1)), "baseline",
                                        *("–" if floors[n] is None else f"{floors[n]:.3f}" for n in lengths)]) + " |")
    failed = [r for r in records if r["status"] == "failed"]
    if failed:
        lines += ["", "Failed points:"] + [f"- {r['name']}: {r['error']}" for r in failed]
    note = ("the lowest at each length, in bold, is the sweep's choice" if split == "validation" else
            "no point is chosen here: choose on the validation split (--split=validation), then score the choice on test")
    baseline = ("; the n-gram floor is the corpus's interpolated Witten–Bell byte n-gram, fit on its train split, "
                "on the same windows" if any(v is not None for v in floors.values()) else
                "; no n-gram floor (a tokenizer's run, or points scored before the floor was kept)")
    paths["md"].write_text(f"bits per byte on the {split} split (non-overlapping windows, lower is better; {note}), "
                           f"with its 95% bootstrap interval over windows (adjacent windows are correlated: a lower "
                           f"bound on the uncertainty){baseline}\n\n" + "\n".join(lines) + "\n")

    if plot_length is not None and plot_length not in lengths:
        raise ValueError(f"plot_length={plot_length} is not one of the lengths {list(lengths)}: the heatmap shows bits "
                         "per byte at one of them")
    done = [r for r in records if r["status"] == "done"]
    plot_length = plot_length or lengths[-1]
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    if len(axes) == 2 and done:
        xs = sorted({r["point"][axes[0]] for r in done}, key=lambda v: (str(type(v)), v))
        ys = sorted({r["point"][axes[1]] for r in done}, key=lambda v: (str(type(v)), v))
        grid = np.full((len(ys), len(xs)), np.nan)
        for r in done:
            v = r.get(f"bpb_L{plot_length}")
            grid[ys.index(r["point"][axes[1]]), xs.index(r["point"][axes[0]])] = np.nan if v is None else v
        im = ax.imshow(grid, cmap="viridis_r", origin="lower", aspect="auto")
        ax.set_xticks(range(len(xs)), [_fmt(v) for v in xs])
        ax.set_yticks(range(len(ys)), [_fmt(v) for v in ys])
        ax.set_xlabel(axes[0])
        ax.set_ylabel(axes[1])
        for (yi, xi), v in np.ndenumerate(grid):
            if not math.isnan(v):
                ax.text(xi, yi, f"{v:.2f}", ha="center", va="center", fontsize=7, color="white")
        fig.colorbar(im, ax=ax, label=f"bits per byte at L={plot_length}")
        best = np.unravel_index(np.nanargmin(grid), grid.shape) if np.isfinite(grid).any() else None
        title = (f"best on validation: {axes[0]}={_fmt(xs[best[1]])}, {axes[1]}={_fmt(ys[best[0]])}"
                 if best and split == "validation" else f"{split} split")
        ax.set_title(title)
    else:
        for r in done:  # the table's cells: each point's bits per byte, shaded over its interval where it has one
            pts = [(n, r.get(f"bpb_L{n}")) for n in lengths if r.get(f"bpb_L{n}") is not None]
            line, = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=r["name"])
            band = [(n, *ci(r, n)) for n, _ in pts if ci(r, n)[0] is not None]
            if band:
                ax.fill_between([b[0] for b in band], [b[1] for b in band], [b[2] for b in band],
                                color=line.get_color(), alpha=0.15, lw=0)
        floor_pts = [(n, v) for n, v in floors.items() if v is not None]
        if floor_pts:
            ax.plot([p[0] for p in floor_pts], [p[1] for p in floor_pts], color="k", linestyle="--",
                    label="n-gram floor")
        train_lens = sorted({r.get("train_len") for r in done if r.get("train_len")})
        for t in train_lens:
            ax.axvline(t, color="gray", linestyle="--", linewidth=1)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("evaluation length (tokens)")
        ax.set_ylabel(f"bits per byte ({split} split)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(paths["png"], dpi=100)
    plt.close(fig)
    return paths


