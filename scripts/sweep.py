r"""Sweep config fields (train mode) or inference-time RoPE scaling parameters (eval mode).

Train: every point trains its own run under --root, then is evaluated past its training length:

    python scripts/sweep.py --mode=train --config=configs/default.py --root=runs/base_sweep \
        --axis=model.rope.base=100,1000,10000,100000 [--axis=train_len=128,256] [--combine=grid|zip] \
        --lengths=256,512,1024,2048,4096 [--scaling=none]

Eval: one trained run re-evaluated at every point, without retraining or recompiling:

    python scripts/sweep.py --mode=eval --workdir=runs/default --root=runs/yarn_sweep --scaling=yarn \
        --axis=factor=2,4,8,16 --axis=attention_factor=1.0,1.1,1.2,1.3 --lengths=1024

Training-free methods (posenc/training_free.py) sweep the same way: --method names the base method and its
fields are axes (the scaling stays --scaling, `none` for plain RoPE or for a non-RoPE run):

    python scripts/sweep.py --mode=eval --workdir=runs/default --root=runs/self_extend_sweep --scaling=none \
        --method=self_extend --axis=window=32,64,128 --axis=group=2,4,8,16 --lengths=1024,4096

Points are scored on --split=validation by default, where the table marks the lowest at each length (in bold)
as the choice; score a chosen setting with --split=test (no point marked). Rerunning resumes: points finished
with the same config (or run and parameters), scaling, split, corpus and bytes are skipped, and extended with
lengths they lack (give the recorded --num_bytes: its default, 8 x the longest length, changes with them); a
rerun that would overwrite a finished point with other settings, or add points of other settings than
those under --root, is refused before any work. A sweep whose every point failed exits non-zero. To spread
points over machines, give each machine its shard (--shard=0/3, 1/3, 2/3) or named points (--points=NAME,...), copy the point
directories back under one --root, and rebuild the table with --aggregate_only. Writes results.csv, results.md, sweep.png in --root.
"""

import sys

from absl import app, flags, logging

from posenc import malloc, sweep, training_free
from posenc.config import DEFINE_config_file, parse_config_flags, parse_lengths
from posenc.evaluate import prepare_out_dir

_MODE = flags.DEFINE_enum("mode", None, sweep.MODES, "train: a run per point; eval: re-evaluate one run.",
                          required=True)
_CONFIG = DEFINE_config_file("config", "configs/default.py", "Base config (train mode).",
                              lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "The trained run (eval mode).")
_HF = flags.DEFINE_string("hf_model", None, "Eval mode: a Hugging Face checkpoint directory instead of --workdir, "
                          "scored in its own tokens (lengths in tokens).")
_TEXT = flags.DEFINE_string("text", None, "With --hf_model: the corpus it scores (as data.path; default the bundled one).")
_ROOT = flags.DEFINE_string("root", None, "Sweep directory.", required=True)
_AXES = flags.DEFINE_multi_string("axis", [], "field=v1,v2,... (repeat for more axes).")
_COMBINE = flags.DEFINE_enum("combine", "grid", sweep.COMBINE, "grid: every combination; zip: i-th values together.")
_LENGTHS = flags.DEFINE_list("lengths", ["256", "512", "1024", "2048", "4096"], "Evaluation lengths.")
_SCALING = flags.DEFINE_string("scaling", None, "Train mode: scaling name at evaluation (default none). "
                               "Eval mode: the RopeScaling kind the axes modify (default yarn).")
_METHOD = flags.DEFINE_enum("method", "none", training_free.METHODS,
                            "Eval mode: the training-free method the points' method fields (window, group, leak, "
                            "n_global, num_sinks, logn) apply to.")
_SPLIT = flags.DEFINE_enum("split", "validation", ("validation", "test"),
                           "The split the points are scored on: validation to choose a setting (the table marks the "
                           "lowest), test to report settings already chosen (no point is marked).")
_NUM_BYTES = flags.DEFINE_integer("num_bytes", None, "Bytes (tokens with --hf_model) scored per length (default 8 x "
                                  "longest).")
_PLOT_LENGTH = flags.DEFINE_integer("plot_length", None, "Length whose bits per byte fill the heatmap.")
_POINTS = flags.DEFINE_list("points", None, "Run only these point names, comma-separated as written (a point of "
                            "two axes: --points=factor=2,attention_factor=1.1).")
_SHARD = flags.DEFINE_string("shard", None, "Run only shard i/n of the points.")
_AGGREGATE = flags.DEFINE_bool("aggregate_only", False, "Only gather finished points into the table and plot.")


def main(argv):
    malloc.keep_buffers()  # before JAX starts its threads: posenc/malloc.py
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.ERROR)
    if _MODE.value == "train":  # flags of the other mode would be ignored: a sweep labelled with them
        given = [f"--{f.name}" for f in (_WORKDIR, _HF, _TEXT) if f.present] + (["--method"] if _METHOD.present else [])
        if given:
            raise app.UsageError(f"{', '.join(given)}: for --mode=eval only (train mode trains each point from --config)")
    else:
        given = [f"--{name}" for name in flags.FLAGS if (name == "config" or name.startswith("config."))
                 and flags.FLAGS[name].present]
        if given:
            raise app.UsageError(f"{', '.join(given)}: for --mode=train only (eval mode re-evaluates --workdir or "
                                 "--hf_model as it was trained)")
    if _TEXT.present and not _HF.present:
        raise app.UsageError("--text: the corpus a --hf_model scores; give --hf_model too")
    if _MODE.value == "eval" and (bool(_WORKDIR.value) == bool(_HF.value)) and (
            _WORKDIR.value or not _AGGREGATE.value):  # --aggregate_only reads only --root: it may leave both out
        raise app.UsageError("--mode=eval needs exactly one of --workdir (the trained run) and --hf_model")
    axes = sweep.parse_axes(_AXES.value)
    fields = [f for f, _ in axes]
    lengths = parse_lengths(_LENGTHS.value)
    points = sweep.select(sweep.expand(axes, _COMBINE.value), _POINTS.value, _SHARD.value)
    if _MODE.value == "eval" and not _AGGREGATE.value:  # points labelled with fields their kind does not read
        for name, point in points:
            try:
                sweep.check_eval_point(name, point, _SCALING.value or "yarn")
            except ValueError as e:
                raise app.UsageError(f"--axis: {e}") from None
    if _MODE.value == "train" and not _AGGREGATE.value:  # every point's config, before --root is made
        try:
            sweep.check_train_points(_CONFIG.value, [], _SCALING.value or "none")
        except ValueError as e:
            raise app.UsageError(f"--scaling: {e}") from None
        try:  # a point's config is --config's with its --axis values: the error names the point and the field
            sweep.check_train_points(_CONFIG.value, points, _SCALING.value or "none")
        except ValueError as e:
            raise app.UsageError(str(e)) from None
    if _PLOT_LENGTH.value is not None and _PLOT_LENGTH.value not in lengths:
        raise app.UsageError(f"--plot_length={_PLOT_LENGTH.value} is not one of --lengths={','.join(map(str, lengths))}: "
                             "the heatmap shows bits per byte at one of them")
    root = str(prepare_out_dir(_ROOT.value, "--root"))  # `~` expanded: the shell leaves it in --root=~/…
    ran = []
    try:  # the checks before any point is computed (a finished point of other settings, bytes the split lacks)
        sweep.gather(root, _MODE.value, fields)  # points of another sweep's axes under --root
        if not _AGGREGATE.value and _MODE.value == "train":
            ran = sweep.run_train_sweep(_CONFIG.value, root, points, lengths=lengths,
                                        scaling=_SCALING.value or "none", num_bytes=_NUM_BYTES.value,
                                        split=_SPLIT.value)
        elif not _AGGREGATE.value:
            ran = sweep.run_eval_sweep(_WORKDIR.value or _HF.value, root, points, lengths=lengths,
                                       scaling=_SCALING.value or "yarn", num_bytes=_NUM_BYTES.value,
                                       split=_SPLIT.value, method=_METHOD.value, hf_model=bool(_HF.value),
                                       text=_TEXT.value)
        records = sweep.gather(root, _MODE.value, fields)
    except ValueError as e:
        sys.exit(f"error: {e}")
    paths = sweep.write_outputs(records, root, fields, lengths, _PLOT_LENGTH.value)
    print(paths["md"].read_text())
    print(f"wrote {', '.join(str(p) for p in paths.values())}")
    failed = [r for r in ran if r["status"] == "failed"]
    if ran and len(failed) == len(ran):
        sys.exit(f"every point of the sweep failed ({len(ran)}); the first error: {failed[0]['error']}")
    if failed:
        print(f"{len(failed)} of {len(ran)} points failed: {', '.join(r['name'] for r in failed)}", file=sys.stderr)


if __name__ == "__main__":
    app.run(main, flags_parser=parse_config_flags)
