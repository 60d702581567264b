"""ConfigDict -> frozen dataclasses, and the checks that run before anything trains.

A `ml_collections.ConfigDict` is what users edit (`configs/*.py`, `--config.field=value`); nothing jitted
ever sees one. `model_config(config)` returns the hashable `ModelConfig` the model is built from, and
`validate(config)` raises a `ValueError` naming the field and its valid values.

A workdir holds one run. `run_changes(stored, new)` lists the fields in which a rerun's config differs from
the run's own in what the run computes: everything except `RESUMABLE_FIELDS` (cadences, caches, the layout
of the same math, the evaluation defaults) and `train_steps`, which may change (to stop earlier or go on)
only with the learning-rate schedule pinned (`schedule_steps`: unset, it is train_steps itself). After a divergence a rerun may also change `RECOVERY_FIELDS`.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import hashlib
import pathlib
from typing import Any, Sequence

import ml_collections

from posenc.encodings import ENCODINGS, get_encoding
from posenc.longrope import read_factors
from posenc.model import ModelConfig
from posenc.rope_scaling import DYNAMIC_KINDS, KINDS, RopeScaling
from posenc.tasks import TASKS, TaskSpec, check_input_lengths, depth_salt


# Fields a rerun may change: how often things happen and how the same math is laid out, not what it computes.
RESUMABLE_FIELDS = ("log_every", "eval_every", "checkpoint_every", "keep_checkpoints", "data.cache_dir",
                    "model.attn_chunk", "model.attn_block", "model.attn_key_block", "model.attn_impl",
                    "mesh.fsdp", "model.act_dtype")  # act_dtype: its resolved dtype is checked (train.check_rerun)
RESUMABLE_PREFIXES = ("eval.",)  # the defaults of the evaluation after training
# Fields added after runs were recorded, with the value a config written before them meant (where it has the
# field's section): a run of the old default resumes, one of another value is refused.
IMPLIED_FIELDS = {"task.version": 1}
# Fields a rerun may change after the run diverged, to recover from its last good checkpoint.
RECOVERY_FIELDS = ("learning_rate", "warmup_steps", "min_lr_ratio", "grad_clip")


def missing_override(config: ml_collections.ConfigDict, field: str) -> str | None:
    """Why `--config.<field>` names nothing in `config` (None if it does): the first component of the dotted
    `field` its section lacks, with the fields and sections that section has."""
    node, path = config, []
    for part in field.split("."):
        if not isinstance(node, ml_collections.ConfigDict) or part not in node:
            where = f"section {'.'.join(path)!r}" if path else "the config"
            keys = sorted(node.keys()) if isinstance(node, ml_collections.ConfigDict) else []
            return (f"{where} has no field or section {part!r} (it has: {', '.join(keys)})" if keys else
                    f"{'.'.join(path)!r} is a field, not a section: it has no {part!r}")
        node, path = node[part], path + [part]
    return None


def optional_fields(config: ml_collections.ConfigDict) -> list[str]:
    """The dotted fields of `config` that take None: those declared `config_dict.placeholder(type)` (a typed
    field whose default is None, whatever value the config file then set), and those that are None."""
    from ml_collections import config_dict  # noqa: PLC0415

    return [k for k, v in _flatten(config.to_dict(preserve_field_references=True)).items()
            if v is None or isinstance(v, config_dict.FieldReference)]


def _config_arg(argv: list[str], default: str) -> str:
    """The config `--config` names in `argv` (`path[:arg]`), else `default`."""
    path = next((a.split("=", 1)[1] for a in argv if a.startswith("--config=")), None)
    if path is None and "--config" in argv[:-1]:
        path = argv[argv.index("--config") + 1]
    return path or default


def _base_config(where: str) -> ml_collections.ConfigDict | None:
    """The config `where` (`path[:arg]`) names, as `--config` loads it, without the overrides; None if the
    config file itself fails (its own error is then the flags parsing's)."""
    from posenc.train import load_config_file  # noqa: PLC0415  (posenc.train imports this module)

    path, _, arg = where.partition(":")
    try:
        return load_config_file(path, arg or None)
    except Exception:  # noqa: BLE001
        return None


def _flags_error(lines: list[str]) -> None:
    import sys  # noqa: PLC0415

    sys.stderr.write("".join(f"FATAL Flags parsing error: {line}\n" for line in lines))
    sys.exit(1)


def _exit_on_missing_overrides(argv: list[str], default: str) -> None:
    """Exits with a flags error naming each `--config.<field>` override in `argv` whose field the config lacks
    (`missing_override`), and for the sections only configs/tasks.py has (`task`, `positions`), that config;
    returns if there is none (another error: a config file's own code raised it)."""
    given = [a.split("=")[0] for a in argv if a.startswith("--config.")]
    config = _base_config(_config_arg(argv, default))
    missing = {g: missing_override(config, g[len("--config."):]) for g in given} if config is not None else {}
    missing = {g: why for g, why in missing.items() if why}
    if not missing:
        return
    lines = []
    for flag, why in missing.items():
        key = flag[len("--config."):].split(".")[0]
        where = ("; the `task` and `positions` sections exist only in configs/tasks.py: use "
                 "--config=configs/tasks.py:task=<name>[,randomize]" if key in ("task", "positions")
                 and key not in config else "")
        lines.append(f"{flag}: {why}{where}")
    _flags_error(lines)


def DEFINE_config_file(name: str, default: str, help_string: str, **kwargs):  # noqa: N802  (absl's name)
    """ml_collections' `config_flags.DEFINE_config_file`, for a script whose flags `parse_config_flags` parses.

    Without `--config` on the command line, ml_collections loads `default` and applies the `--config.*`
    overrides here, as the script defines its flags (on import): an override of a field that config lacks is
    the same flags error here as `parse_config_flags` gives with `--config`, not a traceback."""
    import sys  # noqa: PLC0415

    from absl import flags  # noqa: PLC0415
    from ml_collections import config_flags  # noqa: PLC0415

    try:
        return config_flags.DEFINE_config_file(name, default, help_string, **kwargs)
    except (KeyError, AttributeError):
        _exit_on_missing_overrides(flags.FLAGS.read_flags_from_files(sys.argv, force_gnu=False), default)
        raise


def _none_overrides(argv: list[str], default: str) -> tuple[list[str], list[str]]:
    """(`argv` without its `--config.<field>=None` (or `--config.<field> None`) overrides, the fields whose last
    override is None).

    absl parses an override by its field's type: `int('None')` fails, and a str field takes the text 'None'.
    Such an override of a field the config has is taken out, to be set after parsing; one of a field not in
    `optional_fields` (its default is not None) is a flags error naming the optional ones. An override of a
    field the config lacks is left in: parsing names it (`missing_override`)."""
    from absl import flags  # noqa: PLC0415

    def none_field(arg):  # the field of a `--config.<field>=None` override, else None
        return arg[len("--config."):-len("=None")] if arg.startswith("--config.") and arg.endswith("=None") else None

    expanded, read = [], flags.FLAGS.read_flags_from_files(argv, force_gnu=False)  # as ml_collections reads them
    while read:  # `--config.<field> None` (the value as the next argument) is the same override
        arg = read.pop(0)
        if arg.startswith("--config.") and "=" not in arg and read and read[0] == "None":
            arg += "=" + read.pop(0)
        expanded.append(arg)
    fields = list(dict.fromkeys(f for f in map(none_field, expanded) if f))
    where = _config_arg(expanded, default)
    config = _base_config(where) if fields else None
    fields = [f for f in fields if config is not None and missing_override(config, f) is None]
    if not fields:
        return argv, []
    optional, values = optional_fields(config), _flatten(config.to_dict())
    refused = [f for f in fields if f not in optional]
    if refused:
        _flags_error([f"--config.{f}=None: config.{f} is not optional ("
                      + (f"its value in {where} is {values[f]!r}" if f in values else f"a section of {where}")
                      + f"); None clears only the fields whose default is None: {', '.join(optional)}"
                      for f in refused])
    last = {a.partition("=")[0][len("--config."):]: none_field(a) is not None  # the last override holds
            for a in expanded if a.startswith("--config.")}
    return [a for a in expanded if none_field(a) not in fields], [f for f in fields if last[f]]


def parse_config_flags(argv: list[str]) -> list[str]:
    """absl's flag parsing for a script with `--config` (`app.run(main, flags_parser=parse_config_flags)`), its
    flag defined by `DEFINE_config_file`.

    An override of a field the config lacks (`--config.model.posenk=rope`, `--config.positions.randomize=True`
    on configs/default.py) is a KeyError or AttributeError inside ml_collections; this turns it into a flags
    error naming the flag, the missing component and the fields its section has (`missing_override`), and for
    the sections only configs/tasks.py has (`task`, `positions`), that config. `--config.<field>=None` clears a
    field whose default is None (`optional_fields`: `--config.task.stop_accuracy=None` trains passkey to the
    end) and counts as given; for another field it is a flags error (`_none_overrides`)."""
    from absl import app, flags  # noqa: PLC0415

    default = flags.FLAGS["config"].default_as_str.strip("'\"")
    argv, cleared = _none_overrides(argv, default)
    try:
        rest = app.parse_flags_with_usage(argv)
    except (KeyError, AttributeError):
        _exit_on_missing_overrides(flags.FLAGS.read_flags_from_files(argv, force_gnu=False), default)
        raise  # not an override's missing field (a config file's own code raised it)
    config = flags.FLAGS["config"].value
    for field in cleared:
        *parents, leaf = field.split(".")
        node = config
        for p in parents:
            node = node[p]
        node[leaf] = None
        if f"config.{field}" in flags.FLAGS:  # (ml_collections defined it from the command line's overrides)
            flags.FLAGS[f"config.{field}"].present = 1
    return rest


def schedule_steps(config: ml_collections.ConfigDict) -> int:
    """The cosine schedule's length: `config.schedule_steps`, or `train_steps` when unset."""
    return config.get("schedule_steps") or config.train_steps


def _flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in d.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _resumable(field: str) -> bool:
    return field in RESUMABLE_FIELDS or field.startswith(RESUMABLE_PREFIXES)


def defining_fields(config: ml_collections.ConfigDict) -> dict[str, Any]:
    """{dotted field: value} of what defines the run: every field but the resumable ones (except `eval_every`
    where `task.stop_accuracy` stops the run at an evaluation), train_steps and the options of encodings the
    run does not use (`model.<other encoding>.*`), with `schedule_steps` resolved and IMPLIED_FIELDS filled in."""
    unused = tuple(f"model.{name}." for name, enc in ENCODINGS.items() if enc.options and name != config.model.posenc)
    task = config.get("task")
    stops = task is not None and task.get("stop_accuracy") is not None  # checked at each evaluation: eval_every
    flat = {k: v for k, v in _flatten(config.to_dict()).items()  # decides where the run ends
            if (not _resumable(k) or (stops and k == "eval_every")) and k != "train_steps" and not k.startswith(unused)}
    for field, value in IMPLIED_FIELDS.items():
        section = field.rpartition(".")[0] + "."
        if field not in flat and any(k.startswith(section) for k in flat):
            flat[field] = value
    flat["schedule_steps"] = schedule_steps(config)
    return flat


def run_changes(stored: ml_collections.ConfigDict, new: ml_collections.ConfigDict) -> dict[str, tuple[Any, Any]]:
    """{field: (stored value, new value)} for each field that defines the run and differs.

    `train_steps` is not compared (the run may stop earlier or go on); the effective `schedule_steps` is; nor are
    the fields either config's run does not read (`fields_not_read`). A field missing from one side (a config
    written before the field existed) counts as None; 10000 and 10000.0 are the same value.
    """
    old, cur = defining_fields(stored), defining_fields(new)
    changes = {}
    not_read = set(fields_not_read(stored)) | set(fields_not_read(new))  # (another posenc or task is named)
    for key in sorted((set(old) | set(cur)) - not_read):
        if key == "eval_every" and (key not in old or key not in cur):
            continue  # it defines only a run that stops at an evaluation: task.stop_accuracy differs, and is named
        a, b = old.get(key), cur.get(key)
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))
        if (float(a) != float(b)) if numbers else (a != b):
            changes[key] = (a, b)
    return changes



def result_changes(recorded: dict[str, Any], now: ml_collections.ConfigDict) -> dict[str, tuple[Any, Any]]:
    """{field: (recorded, now)} between the training config a result recorded (its run's config.json, a dict)
    and the one its job would train with now: `run_changes` plus `train_steps` (a result scores the run at its
    end), without `init_from` (a base run's folder; its parameters are checked by hash). The experiments' runners
    refuse a kept result with any."""
    changes = {k: v for k, v in run_changes(ml_collections.ConfigDict(recorded), now).items() if k != "init_from"}
    if recorded.get("train_steps") != now.train_steps:
        changes["train_steps"] = (recorded.get("train_steps"), now.train_steps)
    return changes


def parse_value(text: str) -> Any:
    """A value written on a command line (`--set`, a sweep axis): a Python literal, `true` / `false` as
    `--config.field=` takes them, else the string itself (`yarn`)."""
    text = {"true": "True", "false": "False"}.get(text, text)
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def with_fields(config: ml_collections.ConfigDict, fields: dict[str, Any] | Sequence[tuple[str, Any]],
                what: str = "override") -> ml_collections.ConfigDict:
    """A copy of `config` with dotted fields set (`{"model.num_layers": 4}`), as `--config.field=value` would.

    Unlike `ConfigDict.update_from_flattened_dict`, which adds a missing leaf, an unknown field is an error;
    `what` names where the field came from ("sweep axis", "--set") in it. An int given for a float field
    becomes a float; a value ml_collections refuses for the field's type (a float for an int, a number for a
    str; it lets a bool pass for an int) is a ValueError naming the field and both types, and so is None for a
    field that is not optional (`optional_fields`: ml_collections would store None in any field).
    """
    config = copy.deepcopy(config)  # keeps each field's type, a placeholder's included
    optional = optional_fields(config) if any(v is None for v in dict(fields).values()) else []
    for field, value in dict(fields).items():
        node = config
        *parents, leaf = field.split(".")
        for p in parents:
            if p not in node or not isinstance(node[p], ml_collections.ConfigDict):
                raise ValueError(f"{what} {field!r}: config has no section {p!r} (sections here: "
                                 f"{sorted(k for k, v in node.items() if isinstance(v, ml_collections.ConfigDict))})")
            node = node[p]
        if leaf not in node:
            raise ValueError(f"{what} {field!r}: config has no field {leaf!r} (fields here: {sorted(node.keys())})")
        if value is None and field not in optional:
            raise ValueError(f"{what} {field}=None: config.{field} is not optional (None clears only the fields whose "
                             f"default is None: {', '.join(optional)})")
        if isinstance(node[leaf], float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        try:
            node[leaf] = value
        except TypeError:  # ml_collections keeps each field's type (a placeholder's too)
            kind = node.get_type(leaf).__name__
            raise ValueError(f"{what} {field}={value!r}: the field's type is {kind}, not {type(value).__name__}"
                             + (" (a value that reads as a number or another Python literal is taken as one)"
                                if kind == "str" else "")) from None
    return config


def parse_lengths(values: str | Sequence[str], what: str = "--lengths") -> list[int]:
    """'256,512' or ['256', '512'] -> [256, 512]; anything but positive integers is a ValueError naming `what`."""
    items = values.split(",") if isinstance(values, str) else list(values)
    out = []
    for item in items:
        text = str(item).strip()
        if not text.isdigit() or int(text) <= 0:
            raise ValueError(f"{what}: {text!r} is not a positive integer; give token counts such as 256,512,1024")
        out.append(int(text))
    if not out:
        raise ValueError(f"{what} is empty; give token counts such as 256,512,1024")
    return out


# The `model.rope.scaling` fields (RopeScaling's, and `factors_file`) each kind reads: a field another kind reads
# is not applied, so a run (or a sweep point) set to a non-default value of it would be labelled with a value
# that changed nothing. `original_max_len` is L0 for every kind that scales (evaluation extrapolates from it), and
# `attention_factor`, when set, multiplies cos and sin under every kind (posenc.rope_scaling.rope_frequencies).
SCALING_FIELDS = {
    "none": ("attention_factor",),
    "linear": ("factor", "original_max_len", "dynamic", "attention_factor"),
    "ntk": ("factor", "original_max_len", "dynamic", "attention_factor"),
    "dynamic_ntk": ("factor", "original_max_len", "attention_factor"),
    "yarn": ("factor", "original_max_len", "dynamic", "beta_fast", "beta_slow", "truncate", "attention_factor",
             "mscale", "mscale_all_dim"),
    "longrope": ("factor", "original_max_len", "attention_factor", "factors_file", "short_factor", "long_factor",
                 "unscaled_positions"),
    "llama3": ("factor", "original_max_len", "low_freq_factor", "high_freq_factor", "attention_factor"),
}
# Kinds whose static scaling at factor s <= 1 is the identity (θ_i unchanged, attention factor 1): without
# `dynamic=True` they need factor > 1. (dynamic_ntk's factor is a slope, meaningful at 1; LongRoPE's factors
# come from its file.)
IDENTITY_AT_FACTOR_1 = ("linear", "ntk", "yarn", "llama3")
SCALING_DEFAULTS = {**{f.name: f.default for f in dataclasses.fields(RopeScaling)}, "factors_file": None}


def scaling_fields_read(kind: str, dynamic: bool = False) -> set[str]:
    """The `model.rope.scaling` fields scaling `kind` reads (SCALING_FIELDS), without `factor` when `dynamic` (a
    dynamic scaling takes s = max(1, seq_len / original_max_len))."""
    if kind not in SCALING_FIELDS:
        raise ValueError(f"model.rope.scaling.kind must be one of {KINDS}, got {kind!r}")
    return set(SCALING_FIELDS[kind]) - ({"factor"} if dynamic else set())


def unread_scaling_fields(kind: str, fields: dict[str, Any]) -> list[str]:
    """The names in `fields` ({RopeScaling field or factors_file: value}) that scaling `kind` does not read
    (`scaling_fields_read`) although set to a value other than their default. `kind` itself is never unread."""
    reads = scaling_fields_read(kind, bool(fields.get("dynamic")))
    return [name for name, value in fields.items()
            if name != "kind" and name not in reads and not is_default(value, SCALING_DEFAULTS.get(name))]


def is_default(value: Any, default: Any) -> bool:
    """Whether a config value equals its default (numbers by value: 32 == 32.0; None only equals None)."""
    if value is None or default is None:
        return value is None and default is None
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (value, default))
    return float(value) == float(default) if numbers else value == default


def fields_not_read(config: ml_collections.ConfigDict) -> dict[str, tuple[Any, Any, str]]:
    """{field: (value, default, who reads it)} for every `model.*`, `task.*` and `positions.*` field the run does
    not read, whatever its value: another encoding's options (`model.<name>.<option>`, its class's `options`), the
    shared `ModelConfig` fields of other encodings (their classes' `model_fields`: `model.rope.*`,
    `model.sinusoidal_base`, `model.learned_beyond`), `model.rope.scaling.*` under an encoding that takes no RoPE
    scaling (its `kind` is model_config's check), and on a tasks config (configs/tasks.py) the task fields its
    task does not read in training (`task.filler` is passkey's; `min_len`, `lm_ratio`, `prompt_weight` the
    answer tasks') and `positions.max_position` / `positions.version` without randomized positions. Which
    scaling fields a RoPE run's kind reads is `unread_scaling_fields`'."""
    m = config.model
    encoding = get_encoding(m.posenc)
    model_defaults = {f.name: f.default for f in dataclasses.fields(ModelConfig)}
    out = {}
    for name, other in ENCODINGS.items():
        for option, (default, _) in (other.options.items() if name != m.posenc and name in m else ()):
            if option in m[name]:
                out[f"model.{name}.{option}"] = (m[name][option], default, f"posenc={name}")
    for field in dict.fromkeys(f for enc in ENCODINGS.values() for f in enc.model_fields
                               if f not in encoding.model_fields):
        node, key = (m.rope, field[len("rope_"):]) if field.startswith("rope_") else (m, field)
        if key in node:
            readers = "|".join(n for n, enc in ENCODINGS.items() if field in enc.model_fields)
            out[f"model.{'rope.' if node is m.rope else ''}{key}"] = (node[key], model_defaults[field],
                                                                       f"posenc={readers}")
    if not encoding.takes_rope_scaling and "scaling" in m.rope:
        readers = "|".join(n for n, enc in ENCODINGS.items() if enc.takes_rope_scaling)
        for key in m.rope.scaling.keys():
            if key in SCALING_DEFAULTS:
                out[f"model.rope.scaling.{key}"] = (m.rope.scaling[key], SCALING_DEFAULTS[key], f"posenc={readers}")
    pos = config.get("positions")
    if pos is not None and not pos.get("randomize"):
        for key in ("max_position", "version"):  # configs/tasks.py leaves both unset without randomize
            if key in pos:
                out[f"positions.{key}"] = (pos[key], None, "positions.randomize=True")
    task = config.get("task")
    if task is not None:
        spec_defaults = {f.name: f.default for f in dataclasses.fields(TaskSpec)}
        readers = {"filler": ("passkey",), "min_len": None, "lm_ratio": None, "prompt_weight": None}
        for field, names in readers.items():
            reads = task.name in names if names else task.name != "lm"
            if not reads and field in task:
                out[f"task.{field}"] = (task[field], spec_defaults[field],
                                        "task.name=passkey" if names else "task.name=" + "|".join(TASKS))
    return out


def unread_fields(config: ml_collections.ConfigDict) -> dict[str, tuple[Any, Any, str]]:
    """`fields_not_read` set to another value than their default: a run would be labelled with them."""
    return {k: v for k, v in fields_not_read(config).items() if not is_default(v[0], v[1])}


def check_unread_fields(config: ml_collections.ConfigDict) -> None:
    """Refuses a config that sets fields its run does not read (`unread_fields`): the run would be recorded,
    and resumed, labelled with values that changed nothing."""
    unread = unread_fields(config)
    if unread:
        raise ValueError(
            f"posenc={config.model.posenc!r}" + (f", task.name={config.task.name!r}" if "task" in config else "")
            + " does not read " + "; ".join(f"{k}={v!r} (read by {who}; default {d!r})"
                                            for k, (v, d, who) in unread.items())
            + ": leave " + ("it" if len(unread) == 1 else "them") + " at the default")


def check_factors_file(s: ml_collections.ConfigDict, where: str = "model.rope.scaling") -> None:
    """Refuses a `factors_file` (LongRoPE's factors, and the factor and attention factor they were searched
    with) under a kind other than 'longrope', before the file is read."""
    if s.get("factors_file") and s.kind != "longrope":
        raise ValueError(f"{where}.factors_file={s.factors_file!r} is read only by kind='longrope' (LongRoPE's "
                         f"short_factor / long_factor), got kind={s.kind!r}: leave factors_file unset or set "
                         f"{where}.kind='longrope'")


def check_scaling_fields(s: ml_collections.ConfigDict, where: str = "model.rope.scaling") -> None:
    """Refuses a `model.rope.scaling` that would train labelled with what it does not apply (a fresh run's
    check; loading a saved run does not make it): a `factors_file` without kind='longrope', a field its kind does
    not read set to another value than its default (SCALING_FIELDS), and a static linear / ntk / yarn / llama3
    scaling at factor <= 1 (the identity)."""
    kind = s.kind
    if kind not in KINDS:
        raise ValueError(f"{where}.kind must be one of {KINDS}, got {kind!r}")
    check_factors_file(s, where)
    fields = {k: s.get(k) for k in s.keys() if k in SCALING_DEFAULTS}
    unread = unread_scaling_fields(kind, fields)  # (kind 'none' with any field set: rope_scaling_from_config's)
    if unread:
        dynamic = " with dynamic=True (s = max(1, seq_len / original_max_len))" if fields.get("dynamic") else ""
        raise ValueError(f"{where}.kind={kind!r}{dynamic} does not read "
                         + ", ".join(f"{where}.{f}={fields[f]!r}" for f in unread)
                         + f": leave {'it' if len(unread) == 1 else 'them'} at the default "
                         + ", ".join(f"{f}={SCALING_DEFAULTS[f]!r}" for f in unread)
                         + f" (kind={kind!r} reads {', '.join(SCALING_FIELDS[kind]) or 'no field'})")
    if kind in IDENTITY_AT_FACTOR_1 and not fields.get("dynamic") and not float(s.factor) > 1:
        raise ValueError(f"{where}.factor={s.factor!r} with kind={kind!r} changes nothing (a static {kind} scaling "
                         f"at factor <= 1 is the identity): set {where}.factor > 1 (the target length / "
                         f"original_max_len){', or dynamic=True' if kind in DYNAMIC_KINDS else ''}, or kind='none'")


def rope_scaling_from_config(s: ml_collections.ConfigDict) -> RopeScaling:
    """`config.model.rope.scaling` -> `RopeScaling` (LongRoPE factors read from `factors_file`)."""
    kwargs = dict(
        kind=s.kind, factor=float(s.factor), original_max_len=s.original_max_len, dynamic=s.dynamic,
        beta_fast=float(s.beta_fast), beta_slow=float(s.beta_slow), truncate=s.truncate,
        attention_factor=s.attention_factor, low_freq_factor=float(s.low_freq_factor),
        high_freq_factor=float(s.high_freq_factor),
    )
    if s.kind == "longrope" and not s.get("factors_file"):
        raise ValueError("model.rope.scaling.kind='longrope' needs model.rope.scaling.factors_file: the "
                         "longrope.json written by scripts/search_longrope.py")
    if s.get("factors_file"):
        saved = read_factors(s.factors_file, what="model.rope.scaling.factors_file")
        for key in ("short_factor", "long_factor"):
            kwargs[key] = saved[key]
        for key in ("factor", "attention_factor", "original_max_len"):
            if saved.get(key) is None:
                continue
            if kwargs.get(key) not in (None, 1.0) and float(kwargs[key]) != float(saved[key]):
                raise ValueError(f"model.rope.scaling.{key}={kwargs[key]!r} disagrees with {saved[key]!r} in "
                                 f"factors_file={s.factors_file!r}: leave it unset to take the file's")
            kwargs[key] = saved[key]
        kwargs["unscaled_positions"] = int(saved.get("unscaled_positions", 0))
    try:
        scaling = RopeScaling(**kwargs)
    except ValueError as e:
        raise ValueError(f"model.rope.scaling: {e}") from None
    if scaling.kind == "none":  # fields of a scaling that is not applied: a run would be labelled with them
        unused = [f"model.rope.scaling.{f.name}={getattr(scaling, f.name)!r}" for f in dataclasses.fields(scaling)
                  if getattr(scaling, f.name) != getattr(RopeScaling(), f.name)]
        if s.get("factors_file"):
            unused.append(f"model.rope.scaling.factors_file={s.factors_file!r}")
        if unused:
            raise ValueError(f"model.rope.scaling.kind='none' applies no scaling, but {', '.join(unused)} "
                             f"{'is' if len(unused) == 1 else 'are'} set: set kind (one of {KINDS[1:]}) or leave "
                             "them at their defaults")
    return scaling


def rope_factors_sha256(config: ml_collections.ConfigDict) -> str | None:
    """The SHA-256 of `model.rope.scaling.factors_file`'s bytes (None without one): a run records it, and a
    resumed or evaluated run must read the same factors (the config names the file only by its path)."""
    path = config.model.rope.scaling.get("factors_file")
    return hashlib.sha256(pathlib.Path(path).expanduser().read_bytes()).hexdigest() if path else None


def check_rope_factors(config: ml_collections.ConfigDict, info: dict, workdir) -> None:
    """Raises a ValueError if the run's factors file (recorded in run.json's `rope_factors`) changed since."""
    recorded = info.get("rope_factors", {}).get("sha256")
    now = rope_factors_sha256(config)
    if recorded and recorded != now:
        raise ValueError(f"workdir {workdir}: model.rope.scaling.factors_file="
                         f"{config.model.rope.scaling.get('factors_file')!r} now holds other factors than the run "
                         f"was trained with (sha256 {now} now, {recorded} in run.json)")


def max_len(config: ml_collections.ConfigDict) -> int:
    """Positions the model is trained on (the learned table's rows): `train_len`, or
    `positions.max_position` with randomized positions (posenc/tasks.py)."""
    pos = config.get("positions")
    if pos is not None and pos.get("randomize"):
        return int(pos.max_position)
    return int(config.train_len)


def model_config(config: ml_collections.ConfigDict) -> ModelConfig:
    m = config.model
    encoding = get_encoding(m.posenc)
    if not encoding.takes_rope_scaling and m.rope.scaling.kind != "none":
        raise ValueError(f"model.rope.scaling.kind={m.rope.scaling.kind!r} does not apply to posenc={m.posenc!r}, "
                         "which takes no RoPE scaling: leave it 'none'")
    return ModelConfig(
        d_model=m.d_model, num_layers=m.num_layers, num_heads=m.num_heads, mlp_dim=m.mlp_dim, posenc=m.posenc,
        max_len=max_len(config), learned_beyond=m.learned_beyond, sinusoidal_base=float(m.sinusoidal_base),
        rope_base=float(m.rope.base), rope_layout=m.rope.layout, rope_fraction=float(m.rope.fraction),
        rope_scaling=rope_scaling_from_config(m.rope.scaling) if encoding.takes_rope_scaling else RopeScaling(),
        attn_chunk=m.attn_chunk, attn_block=m.get("attn_block", 0), attn_key_block=m.get("attn_key_block", 512),
        attn_impl=m.get("attn_impl", "auto"), dtype=m.dtype, act_dtype=m.get("act_dtype", "auto"),
        encoding_options=tuple(sorted(m[m.posenc].to_dict().items())) if encoding.options and m.posenc in m else (),
    )


def _validate_optimizer(config: ml_collections.ConfigDict) -> None:
    """The fields only training reads: warmup within the schedule, Adam's rates, weight decay, the seed."""
    if isinstance(config.warmup_steps, bool) or not isinstance(config.warmup_steps, int) or \
            not 0 <= config.warmup_steps < schedule_steps(config):
        raise ValueError(f"config.warmup_steps must be an integer in [0, schedule_steps = {schedule_steps(config)}) "
                         f"(the cosine schedule's length: config.schedule_steps, else train_steps), got "
                         f"{config.warmup_steps!r}")
    for name in ("b1", "b2"):
        if not 0 <= config[name] < 1:
            raise ValueError(f"config.{name} (Adam's decay rate) must be in [0, 1), got {config[name]!r}")
    if not config.weight_decay >= 0:
        raise ValueError(f"config.weight_decay must be >= 0, got {config.weight_decay!r}")
    if isinstance(config.seed, bool) or not isinstance(config.seed, int) or config.seed < 0:
        raise ValueError(f"config.seed must be a non-negative integer, got {config.seed!r}")


def _validate_eval(config: ml_collections.ConfigDict) -> None:
    """The `config.eval` fields the evaluation after training reads, checked before training (a run's
    evaluation would fail only after it): scaling names, training-free method specs, bytes per length (lengths
    that tile them) and, on a tasks config, lengths the task fills without padding, needle depths and examples
    per cell."""
    from posenc.evaluate import SCALINGS, check_lengths_tile  # noqa: PLC0415  (posenc.evaluate imports this module)
    from posenc.training_free import Method  # noqa: PLC0415

    ev = config.eval
    lengths = parse_lengths(ev.lengths, "config.eval.lengths")
    if "scalings" in ev:
        names = [n.strip() for n in str(ev.scalings).split(",") if n.strip()]
        bad = [n for n in names if n not in SCALINGS]
        if bad or not names:
            raise ValueError(f"config.eval.scalings={ev.scalings!r}: {bad} {'is' if len(bad) == 1 else 'are'} not a "
                             f"scaling; give a comma-separated list of {SCALINGS}")
    if "methods" in ev:
        specs = [t for t in str(ev.methods).split(";") if t.strip()]
        if not specs:
            raise ValueError(f"config.eval.methods={ev.methods!r} is empty: give ';'-separated method specs such as "
                             "'none;self_extend,group=4' (posenc/training_free.py), or 'none'")
        for spec in specs:
            try:
                Method.parse(spec)
            except ValueError as e:
                raise ValueError(f"config.eval.methods={ev.methods!r}: {e}") from None
    task = config.get("task")
    if "num_bytes" in ev and (task is None or task.name == "lm"):  # (task evaluation reads examples, not bytes)
        nb, longest = ev.num_bytes, max(lengths)
        if isinstance(nb, bool) or not isinstance(nb, int) or nb <= 0 or nb % longest:
            raise ValueError(f"config.eval.num_bytes must be a positive multiple of the longest of config.eval.lengths "
                             f"({longest}), such as {longest * 8}; got {nb!r}")
        check_lengths_tile(lengths, nb, field="config.eval.lengths", nb_field="config.eval.num_bytes")
    if task is not None and task.name != "lm":  # lengths the task fills without padding (posenc.task_eval)
        check_input_lengths(task.name, lengths, "config.eval.lengths", exact=True)
    if "depths" in ev:
        try:
            depths = [float(d) for d in str(ev.depths).split(",")]
        except ValueError:
            depths = None
        if not depths or not all(0 <= d <= 1 for d in depths):
            raise ValueError(f"config.eval.depths must be comma-separated passkey needle depths in [0, 1] "
                             f"(such as 0,0.5,1), got {ev.depths!r}")
        salts = [depth_salt(d) for d in depths]  # each depth draws its examples from its salt (posenc.task_eval)
        if len(set(salts)) != len(salts):
            raise ValueError(f"config.eval.depths must be distinct to 1e-4 (each draws its own examples), got "
                             f"{ev.depths!r}")
    if "examples" in ev:
        ex = ev.examples
        if isinstance(ex, bool) or not isinstance(ex, int) or ex <= 0:
            raise ValueError(f"config.eval.examples (test examples per cell) must be a positive integer, got {ex!r}")


def validate(config: ml_collections.ConfigDict, training: bool = True) -> ModelConfig:
    """Checks every field a run depends on; returns the `ModelConfig`. Raises ValueError naming the field.
    `training=False` (a trained run loaded for evaluation or as a starting point) leaves out the optimizer's
    fields (warmup, Adam's rates, weight decay, seed), which change nothing there."""

    def positive_int(name):
        value = config[name]
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"config.{name} must be a positive integer, got {value!r}")

    keep = config.keep_checkpoints  # Orbax prunes the older ones as it saves, before the newest is read back
    if training and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 2):
        raise ValueError(f"config.keep_checkpoints must be an integer >= 2 (the newest checkpoint and an older one "
                         f"to fall back to if the newest is corrupt), got {keep!r}")
    for name in ("train_steps", "train_len", "batch_size", "checkpoint_every", "eval_every", "eval_windows",
                 "log_every", "keep_checkpoints"):
        positive_int(name)
    sched = config.get("schedule_steps")
    if sched is not None and (isinstance(sched, bool) or not isinstance(sched, int) or sched <= 0):
        raise ValueError(f"config.schedule_steps must be a positive integer or unset (= train_steps), got {sched!r}")
    if training:
        _validate_optimizer(config)
        check_factors_file(config.model.rope.scaling)  # before model_config reads the file
        if "eval" in config:
            _validate_eval(config)
    if not config.learning_rate > 0:
        raise ValueError(f"config.learning_rate must be > 0, got {config.learning_rate!r}")
    if not 0 <= config.min_lr_ratio <= 1:
        raise ValueError(f"config.min_lr_ratio must be in [0, 1], got {config.min_lr_ratio!r}")
    if not config.grad_clip > 0:
        raise ValueError(f"config.grad_clip must be > 0, got {config.grad_clip!r}")
    if "eval" in config:
        parse_lengths(config.eval.lengths, "config.eval.lengths")
    spec = TaskSpec.from_config(config)  # task.* and positions.*
    stop = stop_accuracy(config)
    if stop is not None and (spec is None or spec.name == "lm" or isinstance(stop, bool) or not 0 < stop <= 1):
        raise ValueError(f"config.task.stop_accuracy must be unset or in (0, 1], for a task with answers "
                         f"(passkey, recall, copy, reverse), got {stop!r} for task "
                         f"{spec.name if spec is not None else None!r}")
    cfg = model_config(config)
    if training:  # a fresh or resumed run (not a saved run loaded): no field it would not apply
        check_scaling_fields(config.model.rope.scaling)
        check_unread_fields(config)
    return cfg


def stop_accuracy(config: ml_collections.ConfigDict) -> float | None:
    """`config.task.stop_accuracy`: the validation exact match at which training stops early (None: never)."""
    return config.task.get("stop_accuracy") if "task" in config else None
