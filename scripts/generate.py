r"""Sample a continuation from a trained run with a KV cache.

    python scripts/generate.py --workdir=runs/default --prompt="ROMEO." --max_new_tokens=300 \
        [--temperature=0.8 --top_k=40 --seed=0] [--scaling=yarn --factor=4]

Prints the prompt and its continuation. With --scaling (RoPE runs), the frequencies are rescaled at
inference time (factor default: (prompt + max_new_tokens) / L0, L0 the run's original length).
"""

import numpy as np
from absl import app, flags, logging

from posenc import data, decode
from posenc.evaluate import SCALINGS, load_run, scaling_for

_WORKDIR = flags.DEFINE_string("workdir", None, "Trained run.", required=True)
_PROMPT = flags.DEFINE_string("prompt", "ROMEO.", "Prompt text (UTF-8 bytes).")
_MAX_NEW = flags.DEFINE_integer("max_new_tokens", 300, "Bytes to generate.")
_TEMPERATURE = flags.DEFINE_float("temperature", 0.8, "Sampling temperature (0 = greedy).")
_TOP_K = flags.DEFINE_integer("top_k", 0, "Sample from the k most likely bytes (0 = all).")
_SEED = flags.DEFINE_integer("seed", 0, "Sampling seed.")
_SCALING = flags.DEFINE_enum("scaling", "run", SCALINGS, "RoPE scaling at inference time ('run': the run's own).")
_FACTOR = flags.DEFINE_float("factor", None, "Fixed scaling factor.")
_LONGROPE = flags.DEFINE_string("longrope", None, "LongRoPE JSON (scripts/search_longrope.py) for --scaling=longrope.")
_CACHE = flags.DEFINE_integer("cache_size", None, "KV cache slots (default prompt + max_new_tokens).")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.ERROR)
    run = load_run(_WORKDIR.value)
    prompt = data.encode(_PROMPT.value)[None]
    total = prompt.shape[1] + _MAX_NEW.value
    scaling = scaling_for(run, _SCALING.value, total, _FACTOR.value, _LONGROPE.value)
    out = decode.generate(run.graphdef, run.params, prompt, _MAX_NEW.value, temperature=_TEMPERATURE.value,
                          top_k=_TOP_K.value, seed=_SEED.value, scaling=scaling, cache_size=_CACHE.value)
    print(data.decode(np.asarray(out[0])))


if __name__ == "__main__":
    app.run(main)
