r"""One pilot run of the length-generalization tasks, recorded in this folder. From the repository root:

    python experiments/length_generalization/pilot/run_pilot.py --name=copy-none-4l --task=copy --posenc=none \
        --set=model.num_layers=4 --set=task.stop_accuracy=0.99 [--runs=runs/lengthgen_pilot] [--examples=100]

Trains configs/tasks.py's `task=<task>,posenc=<posenc>` with the `--set` overrides (resuming, in
<runs>/<name>), scores validation exact match at the config's `eval.lengths` (`posenc.task_eval.evaluate_tasks`,
no scaling: a pilot chooses settings, and the test split is the experiment's), and records the run in runs.json
(its overrides, validation accuracy by length, CPU and XLA threads; a run of the same name is replaced; pilots
recorded before they scored validation hold test accuracy) and its training curve as <name>.jsonl. The experiment's report
(../report.py) renders every pilot.
"""

from __future__ import annotations

import json
import pathlib
import sys

from absl import app, flags

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))

from posenc import jobs  # noqa: E402
from posenc.config import parse_value, with_fields  # noqa: E402
from posenc.task_eval import evaluate_tasks  # noqa: E402
from posenc.tasks import TASKS, VERSIONS  # noqa: E402
from posenc.timing import cpu_model  # noqa: E402
from posenc.train import load_config_file, train_and_evaluate  # noqa: E402



def define_flags() -> None:
    """The command's flags (defined only when run as a command: the tests import this module beside run.py)."""
    flags.DEFINE_string("name", None, "The pilot's name (its runs/ folder and its row).", required=True)
    flags.DEFINE_enum("task", None, list(TASKS), "The task.", required=True)
    flags.DEFINE_string("posenc", "rope", "The encoding (configs/tasks.py's posenc=).")
    flags.DEFINE_multi_string("set", [], "field=value overrides of the config (values as Python literals).")
    flags.DEFINE_string("runs", "runs/lengthgen_pilot", "Where the run goes.")
    flags.DEFINE_integer("examples", 100, "Test examples per length.")


def parse_overrides(items: list[str]) -> dict:
    """`["a.b=4", "c=true"]` -> {"a.b": 4, "c": True} (`posenc.config.parse_value`)."""
    out = {}
    for item in items:
        field, sep, value = item.partition("=")
        if not sep or not field:
            raise ValueError(f"--set: {item!r} is not field=value")
        out[field] = parse_value(value)
    return out


def pilot_config(task: str, posenc: str, overrides: dict):
    """configs/tasks.py for `task` and `posenc` with `overrides` set; `positions.randomize=true` selects the
    config's randomize variant (its positions.max_position and positions.version), as the recorded pilots ran."""
    randomize = overrides.get("positions.randomize", False)
    if not isinstance(randomize, bool):
        raise ValueError(f"--set 'positions.randomize' must be true or false, got {randomize!r}")
    rest = {k: v for k, v in overrides.items() if k != "positions.randomize"}
    config = load_config_file(str(ROOT / "configs" / "tasks.py"),
                              f"task={task},posenc={posenc}" + (",randomize" if randomize else ""))
    return with_fields(config, rest, "--set")


def record(folder: pathlib.Path, entry: dict, curve: str) -> None:
    """Writes <name>.jsonl and replaces (or appends) the run's entry in runs.json, atomically."""
    path = folder / "runs.json"
    pilot = json.loads(path.read_text())
    pilot["runs"] = [r for r in pilot["runs"] if r["name"] != entry["name"]] + [entry]
    jobs.write_atomic(folder / f"{entry['name']}.jsonl", curve)
    jobs.write_atomic(path, json.dumps(pilot, indent=1) + "\n")


def main(argv):
    del argv
    f = flags.FLAGS
    overrides = parse_overrides(f.set)
    config = pilot_config(f.task, f.posenc, overrides)
    workdir = pathlib.Path(f.runs) / f.name
    train_and_evaluate(config, str(workdir))
    lengths = [int(n) for n in str(config.eval.lengths).split(",")]
    # validation examples: a pilot chooses settings, and the test split is the experiment's
    rows = evaluate_tasks([str(workdir)], lengths, examples=f.examples, split="validation", progress=False)["rows"]
    accuracy = {str(r["length"]): r["accuracy"] for r in rows if r["scaling"] == "none"}
    entry = {"name": f.name, "task": f.task, "task_version": VERSIONS[f.task], "posenc": f.posenc, "overrides": overrides,
             "validation_accuracy_by_length": accuracy, "threads": jobs.threads(), "cpu": cpu_model()}
    record(HERE, entry, (workdir / "metrics.jsonl").read_text())
    print(json.dumps(entry))


if __name__ == "__main__":
    define_flags()
    app.run(main)
