r"""Sample a continuation from a trained run with a KV cache.

    python scripts/generate.py --workdir=runs/default --prompt="ROMEO." --max_new_tokens=300 \
        [--temperature=0.8 --top_k=40 --seed=0] [--scaling=yarn --factor=4] [--method=sinks,num_sinks=4]

    python scripts/generate.py --hf_model=~/models/Qwen2.5-0.5B --prompt="Once upon a time" --temperature=0

Prints the prompt and its continuation. A --hf_model prompt is encoded as transformers' `tokenizer(prompt)`
encodes it, with the special tokens its tokenizer adds (Llama's BOS), which are fed but not printed. With --scaling (RoPE runs), the frequencies are rescaled at
inference time (factor default: (prompt + max_new_tokens) / L0, L0 the run's original length). With
--method, a training-free method of posenc/training_free.py (its unset parameters defaulted for the run at
prompt + max_new_tokens); `sinks` and `lm_infinite` decode with a cache of exactly S + R slots, so
--max_new_tokens can be as large as you like at constant memory per token.
"""

import numpy as np
from absl import app, flags, logging

from posenc import data, decode, hf
from posenc.evaluate import FACTOR_SCALINGS, SCALINGS, hf_run, load_run, scaling_for
from posenc.training_free import Method


_WORKDIR = flags.DEFINE_string("workdir", None, "Trained run.")
_HF = flags.DEFINE_string("hf_model", None, "A Hugging Face checkpoint directory instead of a run (its tokenizer.json "
                          "encodes the prompt and decodes the continuation).")
_PROMPT = flags.DEFINE_string("prompt", "ROMEO.", "Prompt text (UTF-8 bytes).")
_MAX_NEW = flags.DEFINE_integer("max_new_tokens", 300, "Tokens to generate (bytes for a posenc run, the checkpoint's tokens for --hf_model).")
_TEMPERATURE = flags.DEFINE_float("temperature", 0.8, "Sampling temperature (0 = greedy).")
_TOP_K = flags.DEFINE_integer("top_k", 0, "Sample from the k most likely tokens (0 = all).")
_SEED = flags.DEFINE_integer("seed", 0, "Sampling seed.")
_SCALING = flags.DEFINE_enum("scaling", "run", SCALINGS, "RoPE scaling at inference time ('run': the run's own).")
_FACTOR = flags.DEFINE_float("factor", None, "Fixed scaling factor.")
_LONGROPE = flags.DEFINE_string("longrope", None, "LongRoPE JSON (scripts/search_longrope.py) for --scaling=longrope.")
_METHOD = flags.DEFINE_string("method", None, "Training-free method spec, such as sinks,num_sinks=4,window=251 or "
                              "self_extend,window=64,group=4 (posenc/training_free.py).")
_CACHE = flags.DEFINE_integer("cache_size", None, "KV cache slots (default prompt + max_new_tokens).")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.ERROR)
    if bool(_WORKDIR.value) == bool(_HF.value):
        raise app.UsageError("give exactly one of --workdir=RUN and --hf_model=DIR")
    if _FACTOR.value is not None and _SCALING.value not in FACTOR_SCALINGS:
        raise app.UsageError(f"--factor={_FACTOR.value} is read only with --scaling in {FACTOR_SCALINGS}, got "
                             f"--scaling={_SCALING.value} (the default 'run' is the run's own scaling)")
    if _FACTOR.value is not None and not _FACTOR.value > 0:
        raise app.UsageError(f"--factor must be > 0 (or left out for (prompt + max_new_tokens) / L0), got {_FACTOR.value}")
    if _LONGROPE.value and _SCALING.value != "longrope":
        raise app.UsageError(f"--longrope is read only with --scaling=longrope, got --scaling={_SCALING.value} (the "
                             "default 'run' is the run's own scaling)")
    run = load_run(_WORKDIR.value) if _WORKDIR.value else hf_run(_HF.value)
    lead = 0  # special tokens ahead of the prompt's text, fed to the model and not printed
    if run.tokenizer is None:
        prompt = data.encode(_PROMPT.value)[None]
    else:
        ids, lead = hf.prompt_ids(run.tokenizer, _PROMPT.value)
        prompt = ids[None]
    total = prompt.shape[1] + _MAX_NEW.value
    method = None
    if _METHOD.value:
        try:
            method = Method.parse(_METHOD.value)
            method.check(run.cfg.encoding, run.cfg)
            method = method.resolve(run.base_len, total)
        except ValueError as e:
            raise app.UsageError(f"--method={_METHOD.value}: {e}") from None
    # under a bounded method, at the longest distance attention sees (as the evaluation)
    scaling = scaling_for(run, _SCALING.value, total if method is None else method.scaling_length(total), _FACTOR.value,
                          _LONGROPE.value)
    out = decode.generate(run.graphdef, run.params, prompt, _MAX_NEW.value, temperature=_TEMPERATURE.value,
                          top_k=_TOP_K.value, seed=_SEED.value, scaling=scaling, cache_size=_CACHE.value,
                          method=method)
    ids = np.asarray(out[0])[lead:]
    print(data.decode(ids) if run.tokenizer is None else run.tokenizer.decode(ids.tolist(), skip_special_tokens=False))


if __name__ == "__main__":
    app.run(main)
