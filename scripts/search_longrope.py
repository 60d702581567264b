r"""Search LongRoPE rescale factors for a trained RoPE run (Ding et al. 2024, arXiv 2402.13753).

    python scripts/search_longrope.py --workdir=runs/default --target_len=1024 \
        [--population=64 --generations=40 --mutations=16 --crossovers=16 --parents=32 --mutation_prob=0.3] \
        [--per_layer] [--seed=0] [--out=DIR]

Stage 1 searches long factors and n̂ for perplexity at --target_len on the validation split; --per_layer
adds a per-layer search seeded from the best shared vector; stage 2 searches short factors that restore
perplexity at the original length (n̂ applies with the long factors only). The factors rescale the
unscaled RoPE frequencies: a run trained or fine-tuned with a RoPE scaling of its own
(config.model.rope.scaling.kind other than 'none') is refused. --num_bytes is checked against both
lengths before any stage runs. The population is saved every generation in --out (default
<workdir>/longrope_<target_len>) and a rerun resumes (a state of another posenc.longrope.SEARCH_VERSION is
refused: use a fresh --out). The result, <out>/longrope.json, is used by
`eval_extrapolation.py --scalings=longrope --longrope=<out>/longrope.json`, by generation through
`generate.py --scaling=longrope --longrope=<out>/longrope.json`, and by training through
`--config.model.rope.scaling.kind=longrope --config.model.rope.scaling.factors_file=<out>/longrope.json`.
"""

import json

from absl import app, flags, logging

from posenc import malloc
from posenc.longrope import SearchConfig, search_run

_WORKDIR = flags.DEFINE_string("workdir", None, "Trained RoPE run.")
_HF = flags.DEFINE_string("hf_model", None, "A Hugging Face checkpoint directory instead of --workdir (lengths and "
                          "--num_bytes in its tokens; searched on the validation split of --text).")
_TEXT = flags.DEFINE_string("text", None, "With --hf_model: its corpus (as data.path; default the bundled one).")
_TARGET = flags.DEFINE_integer("target_len", None, "Target context length.", required=True)
_POP = flags.DEFINE_integer("population", 64, "Population size.")
_GENS = flags.DEFINE_integer("generations", 40, "Generations (iterations).")
_MUT = flags.DEFINE_integer("mutations", 16, "Mutants per generation.")
_CROSS = flags.DEFINE_integer("crossovers", 16, "Crossover children per generation.")
_PARENTS = flags.DEFINE_integer("parents", 32, "Parents kept per generation.")
_PROB = flags.DEFINE_float("mutation_prob", 0.3, "Per-factor mutation probability.")
_BOUND = flags.DEFINE_float("factor_bound", 1.25, "lambda_i <= factor_bound * s.")
_PER_LAYER = flags.DEFINE_bool("per_layer", False, "Also search per-layer factors.")
_SHORT_GENS = flags.DEFINE_integer("short_generations", None, "Generations of stage 2 (default: --generations).")
_NUM_BYTES = flags.DEFINE_integer("num_bytes", None, "Validation bytes per fitness evaluation, at both lengths: a "
                                  "multiple of --target_len and of the run's original length (default 4 windows "
                                  "of each).")
_SEED = flags.DEFINE_integer("seed", 0, "Search seed.")
_OUT = flags.DEFINE_string("out", None, "Output directory.")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    malloc.keep_buffers()  # before JAX starts its threads: posenc/malloc.py
    logging.set_verbosity(logging.ERROR)
    if bool(_WORKDIR.value) == bool(_HF.value):
        raise app.UsageError("give exactly one of --workdir=RUN and --hf_model=DIR")
    if _TEXT.value and not _HF.value:
        raise app.UsageError("--text is the corpus of a --hf_model checkpoint; a --workdir run is searched on its own "
                             "corpus (config.data.path): leave --text out")
    for flag, default in ((_NUM_BYTES, "4 windows of each length"), (_SHORT_GENS, "--generations")):
        if flag.value is not None and flag.value <= 0:
            raise app.UsageError(f"--{flag.name} must be a positive integer (or left out for {default}), "
                                 f"got {flag.value}")
    if _TARGET.value <= 0:
        raise app.UsageError(f"--target_len must be a positive integer (a length in tokens), got {_TARGET.value}")
    cfg = SearchConfig(population=_POP.value, generations=_GENS.value, mutations=_MUT.value, crossovers=_CROSS.value,
                       parents=_PARENTS.value, mutation_prob=_PROB.value, factor_bound=_BOUND.value, seed=_SEED.value)
    result = search_run(_WORKDIR.value or _HF.value, _TARGET.value, cfg, per_layer=_PER_LAYER.value, out=_OUT.value,
                        num_bytes=_NUM_BYTES.value, short_generations=_SHORT_GENS.value, hf_model=bool(_HF.value),
                        text=_TEXT.value)
    summary = {k: v for k, v in result.items() if k not in ("short_factor", "long_factor")}
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    app.run(main)
