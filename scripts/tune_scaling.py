r"""Tune the hand-set RoPE scaling rules on validation with the LongRoPE search's budget, then score on test.

    python scripts/tune_scaling.py --workdir=RUN --target_len=1024 --longrope=DIR/longrope.json \
        [--rules=linear,ntk,dynamic_ntk,yarn,dynamic_yarn] [--test_lengths=256,1024,4096] \
        [--test_num_bytes=32768] --out=DIR
    python scripts/tune_scaling.py --workdir=RUN --target_len=1024 --budget=180 --out=DIR

Each rule's free parameters (posenc/tuning.py: PI's and NTK's factor, YaRN's betas and attention factor)
get `--budget` validation evaluations at --target_len — by default as many as the LongRoPE search of
--longrope spent, each scoring as many validation bytes as one of the search's evaluations at --target_len
(its `bytes_per_evaluation`) — a seeded random search whose first point is the rule's default. The winner on validation
and the default are then scored on the test split (--test_num_bytes; by default as many bytes as one validation
evaluation, which for a search's few windows is a noisy test: each result keeps its 95% interval). Writes
DIR/<rule>_<target_len>.json per rule and prints a table; a rerun resumes from the point records under DIR.
"""

from absl import app, flags, logging

from posenc import malloc, tuning
from posenc.config import parse_lengths

_WORKDIR = flags.DEFINE_string("workdir", None, "The trained RoPE run.", required=True)
_TARGET = flags.DEFINE_integer("target_len", None, "The length the rules are tuned for.", required=True)
_RULES = flags.DEFINE_list("rules", ["linear", "ntk", "dynamic_ntk", "yarn", "dynamic_yarn"],
                           f"Rules to tune, of {tuning.RULES}.")
_BUDGET = flags.DEFINE_integer("budget", None, "Validation evaluations per rule (default: --longrope's count).")
_LONGROPE = flags.DEFINE_string("longrope", None, "A LongRoPE result (scripts/search_longrope.py's longrope.json) "
                                "whose number of evaluations is the budget.")
_NUM_BYTES = flags.DEFINE_integer("num_bytes", None, "Bytes scored per evaluation (default: as many as each "
                                  "evaluation of --longrope's search at --target_len, else 8 windows).")
_TEST_LENGTHS = flags.DEFINE_list("test_lengths", [], "Test lengths besides --target_len.")
_TEST_NUM_BYTES = flags.DEFINE_integer("test_num_bytes", None, "Test bytes scored at each length (default: as "
                                       "many as each validation evaluation).")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the random search.")
_OUT = flags.DEFINE_string("out", None, "Output directory.", required=True)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    malloc.keep_buffers()  # before JAX starts its threads: posenc/malloc.py
    logging.set_verbosity(logging.ERROR)
    if (_BUDGET.value is None) == (_LONGROPE.value is None):
        raise app.UsageError("give exactly one of --budget=N and --longrope=FILE (whose evaluation count is the budget)")
    if _BUDGET.value is not None and _BUDGET.value <= 0:
        raise app.UsageError(f"--budget (validation evaluations per rule) must be a positive integer, got {_BUDGET.value}")
    if _TARGET.value <= 0:
        raise app.UsageError(f"--target_len (the length the rules are tuned for) must be a positive integer, got "
                             f"{_TARGET.value}")
    if _NUM_BYTES.value is not None and _NUM_BYTES.value <= 0:
        raise app.UsageError(f"--num_bytes must be a positive integer (or left out for its default), got "
                             f"{_NUM_BYTES.value}")
    if _TEST_NUM_BYTES.value is not None and _TEST_NUM_BYTES.value <= 0:
        raise app.UsageError(f"--test_num_bytes must be a positive integer (or left out for its default), got "
                             f"{_TEST_NUM_BYTES.value}")
    for rule in _RULES.value:
        tuning.check_rule(rule)
    budget = _BUDGET.value if _BUDGET.value is not None else tuning.longrope_evaluations(_LONGROPE.value)
    source = "given" if _BUDGET.value is not None else f"LongRoPE search {_LONGROPE.value}"
    test_lengths = parse_lengths(_TEST_LENGTHS.value, "--test_lengths") if _TEST_LENGTHS.value else []
    t = _TARGET.value
    num_bytes = _NUM_BYTES.value
    if num_bytes is None and _LONGROPE.value is not None:
        try:
            num_bytes = tuning.longrope_bytes(_LONGROPE.value, t)  # evaluations as large as the search's
        except ValueError as e:
            raise app.UsageError(str(e)) from None
    print(f"budget: {budget} validation evaluations per rule ({source}); bits per byte at {t}")
    print("| rule | evaluations | default val | tuned val | default test | tuned test | tuned point |")
    print("|---|---|---|---|---|---|---|")
    for rule in _RULES.value:
        r = tuning.tune(_WORKDIR.value, rule, t, budget, _OUT.value, seed=_SEED.value, num_bytes=num_bytes,
                        test_lengths=test_lengths, test_num_bytes=_TEST_NUM_BYTES.value, budget_source=source)
        d, b = r["default"], r["best"]
        fmt = lambda v: "–" if v is None else f"{v:.4f}"  # noqa: E731
        print(f"| {rule} | {r['evaluations']} | {fmt(d['val_bpb'])} | {fmt(b['val_bpb'])} | "
              f"{fmt(d['test_bpb'][str(t)])} | {fmt(b['test_bpb'][str(t)])} | {b['point']} |")


if __name__ == "__main__":
    app.run(main)
