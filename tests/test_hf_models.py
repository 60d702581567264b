"""Hugging Face checkpoints (posenc.hf.load_pretrained): every family's logits against transformers', within
and past the original length, with each checkpoint's own RoPE scaling.

The fixtures (tests/data/hf_models/) are tiny random checkpoints and the logits transformers computed for
them, made by scripts/make_hf_model_reference.py (versions in manifest.json); no torch is needed here.
"""

import json
import pathlib
import shutil

import jax.numpy as jnp
import numpy as np
import pytest

from posenc import hf

DATA = pathlib.Path(__file__).resolve().parent / "data" / "hf_models"
REF = np.load(DATA / "reference.npz")
MANIFEST = json.loads((DATA / "manifest.json").read_text())


@pytest.mark.parametrize("family", MANIFEST["families"])
@pytest.mark.parametrize("which", ["within", "past"])
def test_logits_match_transformers(family, which):
    model = hf.load_pretrained(DATA / family)
    t = MANIFEST["lengths"][which]
    tokens = jnp.asarray(REF["tokens"][:, :t])
    want = REF[f"{family}/{which}"]
    got = np.asarray(model(tokens))
    scale = np.abs(want).max()
    np.testing.assert_allclose(got, want, atol=2e-5 * scale, rtol=2e-5)
    assert scale > 1.0  # the fixtures' logits are not all ~0: a wrong weight shows


def test_the_families_exercise_their_features():
    cfgs = {f: hf.load_pretrained(DATA / f).cfg for f in MANIFEST["families"]}
    assert cfgs["llama"].kv_heads == 2 and cfgs["llama"].rope_scaling.kind == "llama3"
    assert cfgs["mistral"].attn_window == 20 and cfgs["mistral"].kv_heads == 1
    assert cfgs["qwen2"].qkv_bias and cfgs["qwen2"].tie_embeddings and cfgs["qwen2"].rope_scaling.kind == "yarn"
    assert cfgs["qwen3"].qk_norm and cfgs["qwen3"].head_dim == 16
    assert cfgs["phi3"].rotary_dim == 6 and cfgs["phi3"].rope_scaling.kind == "longrope"
    assert cfgs["phi3"].kv_heads == 2  # grouped-query heads through the fused qkv_proj
    neox = cfgs["gpt_neox"]
    assert neox.parallel_residual and neox.norm == "layer" and neox.mlp_act == "gelu" and neox.rotary_dim == 2
    assert neox.qkv_bias and neox.out_bias and neox.mlp_bias
    seq = cfgs["gpt_neox_sequential"]  # the other branch: sequential residual, gelu_new, no attention biases
    assert not seq.parallel_residual and seq.mlp_act == "gelu_tanh" and not (seq.qkv_bias or seq.out_bias)
    assert seq.rotary_dim == 4 and seq.head_dim == 8 and seq.rope_base == 500  # two pairs: base and pairing show
    bias = cfgs["llama_bias"]
    assert bias.qkv_bias and bias.out_bias and bias.mlp_bias and bias.tie_embeddings
    assert bias.kv_heads == 1 and bias.head_dim == 16 and bias.head_dim * bias.num_heads != bias.d_model
    assert (DATA / "llama" / "model.safetensors.index.json").exists()  # the sharded case


def test_bf16_on_request():
    model = hf.load_pretrained(DATA / "qwen2", dtype="bfloat16")
    assert model.embed.embedding[...].dtype == jnp.bfloat16
    assert model.blocks[0].attn.qkv.kernel[...].dtype == jnp.bfloat16
    got = np.asarray(model(jnp.asarray(REF["tokens"][:, :24])))
    want = REF["qwen2/within"]
    assert got.dtype == np.float32
    assert np.abs(got - want).max() < 0.05 * np.abs(want).max()  # bf16 rounding, not another model


def test_errors_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match="no config.json"):
        hf.load_pretrained(tmp_path)
    bad = tmp_path / "bad"
    shutil.copytree(DATA / "mistral", bad)
    config = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**config, "model_type": "falcon"}))
    with pytest.raises(ValueError, match="model_type='falcon' is not supported; supported"):
        hf.load_pretrained(bad)
    (bad / "config.json").write_text(json.dumps({**config, "hidden_act": "relu"}))
    with pytest.raises(ValueError, match="hidden_act='relu'"):
        hf.load_pretrained(bad)
    (bad / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 1}))
    with pytest.raises(ValueError, match="no place for: \\['model.layers.1"):
        hf.load_pretrained(bad)
    (bad / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 3}))
    with pytest.raises(ValueError, match="no tensor 'model.layers.2"):
        hf.load_pretrained(bad)
    (bad / "config.json").write_text(json.dumps({k: v for k, v in config.items() if k != "rms_norm_eps"}))
    with pytest.raises(ValueError, match="no rms_norm_eps"):  # transformers saves it; its default differs by family
        hf.load_pretrained(bad)
    with pytest.raises(ValueError, match="dtype must be"):
        hf.load_pretrained(DATA / "mistral", dtype="float16")


def test_tokenize_counts_every_byte_of_the_text():
    tok = hf.load_tokenizer(DATA / "llama")
    text = "Où est la clé ? — ça va.\n  Fin."
    ids, nbytes = hf.tokenize(tok, text)
    assert len(ids) == len(nbytes) and nbytes.sum() == len(text.encode("utf-8"))
    assert nbytes.max() > 1  # 'é', 'ç', '—' are one (unknown) token of several bytes


def test_tokenizer_config_flags_decide_the_special_tokens_as_in_transformers(tmp_path):
    """transformers rebuilds the post-processor from tokenizer_config.json's add_bos_token / add_eos_token when
    either is set (TokenizersBackend.update_post_processor), whatever tokenizer.json's own adds: a BOS template
    in tokenizer.json under add_bos_token=false adds nothing, and add_bos_token=true adds the BOS that
    tokenizer_config.json (or special_tokens_map.json) names. Without the flags, tokenizer.json decides."""
    from tokenizers.processors import TemplateProcessing

    ckpt = tmp_path / "ckpt"
    shutil.copytree(DATA / "llama", ckpt)
    plain = hf.load_tokenizer(ckpt)
    text = plain.encode("Hello", add_special_tokens=False).ids
    bos, eos = plain.token_to_id("#"), plain.token_to_id("%")
    with_bos = hf.load_tokenizer(ckpt)
    with_bos.post_processor = TemplateProcessing(single="# $A", special_tokens=[("#", bos)])
    with_bos.save(str(ckpt / "tokenizer.json"))
    assert hf.prompt_ids(hf.load_tokenizer(ckpt), "Hello")[0].tolist() == [bos, *text]  # no config: the file's
    config = ckpt / "tokenizer_config.json"
    config.write_text(json.dumps({"add_bos_token": False, "bos_token": "#"}))
    ids, lead = hf.prompt_ids(hf.load_tokenizer(ckpt), "Hello")
    assert lead == 0 and ids.tolist() == text
    config.write_text(json.dumps({"add_bos_token": True, "add_eos_token": True,
                                  "bos_token": {"content": "#", "special": True}}))
    (ckpt / "special_tokens_map.json").write_text(json.dumps({"eos_token": "%"}))
    ids, lead = hf.prompt_ids(hf.load_tokenizer(ckpt), "Hello")
    assert lead == 1 and ids.tolist() == [bos, *text, eos]
    assert hf.tokenize(hf.load_tokenizer(ckpt), "Hello")[0].tolist() == text  # evaluation: never special tokens
    # a flag left out takes the tokenizer class's default: a Llama tokenizer adds its BOS unless told not to
    config.write_text(json.dumps({"tokenizer_class": "LlamaTokenizerFast", "add_eos_token": True, "bos_token": "#"}))
    assert hf.prompt_ids(hf.load_tokenizer(ckpt), "Hello")[0].tolist() == [bos, *text, eos]
    config.write_text(json.dumps({"tokenizer_class": "GPTNeoXTokenizer", "add_eos_token": True, "bos_token": "#"}))
    assert hf.prompt_ids(hf.load_tokenizer(ckpt), "Hello")[0].tolist() == [*text, eos]
    config.write_text(json.dumps({"add_bos_token": True}))
    (ckpt / "special_tokens_map.json").unlink()
    with pytest.raises(ValueError, match=r"add_bos_token is true but bos_token=None is not a token"):
        hf.load_tokenizer(ckpt)


def test_evaluate_a_checkpoint_per_token_and_per_byte(tmp_path):
    from posenc import evaluate as ev

    text = tmp_path / "book.txt"
    text.write_text(("Le chêne et le roseau. " * 40 + "Fin — ç'est là.\n") * 60)
    result = ev.evaluate([], [16, 32], None, hf_models=[str(DATA / "qwen2")], text=str(text), num_bytes=128,
                         methods=["none", "self_extend,window=8,group=2"], progress=False)
    rows = [r for r in result["rows"] if r["protocol"] == "nonoverlap"]
    assert {r["scaling"] for r in rows} == {"run"} and all(r["unit"] == "token" for r in rows)
    # the row `run` is the checkpoint's own model: its per-token NLL is transformers' cross-entropy
    model = hf.load_pretrained(DATA / "qwen2")
    from posenc import data

    test_text = bytes(data.load_corpus(str(text)).test).decode("utf-8", errors="replace")  # the last 5%
    ids, nbytes = hf.tokenize(hf.load_tokenizer(DATA / "qwen2"), test_text)
    x, y = ids[:128].reshape(-1, 16), ids[1:129].reshape(-1, 16)
    logits = np.asarray(model(jnp.asarray(x)), np.float64)
    logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) - logits.max(-1, keepdims=True)
    nll = -np.take_along_axis(logp, y[..., None], -1)[..., 0]
    row = next(r for r in rows if r["length"] == 16 and r["method"] == "none")
    assert row["nll"] == pytest.approx(nll.mean(), rel=1e-5)
    assert row["bpb"] == pytest.approx(nll.sum() / nbytes[1:129].sum() / np.log(2), rel=1e-5)
    assert row["bpb"] < row["nll"] / np.log(2)  # multi-byte tokens: fewer bits per byte than per token
    assert result["corpora"][row["corpus"]]["text_bytes"] == int(nbytes[1:129].sum())
    assert ev.markdown_table(result).startswith(f"bpb on 128 test tokens ({int(nbytes[1:129].sum())} bytes)")


def test_scripts_take_hf_model(tmp_path):
    import subprocess
    import sys

    root = DATA.parent.parent.parent
    ev = subprocess.run([sys.executable, "scripts/eval_extrapolation.py", f"--hf_model={DATA / 'llama'}",
                         "--lengths=16,32", "--num_bytes=64", f"--out={tmp_path}", "--method=none", "--method=rerope"],
                        cwd=root, capture_output=True, text=True, timeout=300)
    assert ev.returncode == 0, ev.stderr[-2000:]
    assert "| llama | run | rerope |" in ev.stdout and "tokens" in ev.stdout
    # a tokenizer whose post-processor adds a BOS ('#', as Llama's adds <s>): fed to the model, not printed
    from tokenizers.processors import TemplateProcessing

    from posenc import decode
    from posenc.evaluate import hf_run, scaling_for
    from posenc.training_free import Method

    ckpt = tmp_path / "llama_bos"
    shutil.copytree(DATA / "llama", ckpt)
    tok = hf.load_tokenizer(ckpt)
    bos = tok.token_to_id("#")
    tok.post_processor = TemplateProcessing(single="# $A", special_tokens=[("#", bos)])
    tok.save(str(ckpt / "tokenizer.json"))
    ids, lead = hf.prompt_ids(hf.load_tokenizer(ckpt), "Hello")
    assert lead == 1 and ids[0] == bos and ids[1:].tolist() == tok.encode("Hello", add_special_tokens=False).ids
    gen = subprocess.run([sys.executable, "scripts/generate.py", f"--hf_model={ckpt}", "--prompt=Hello",
                          "--max_new_tokens=40", "--temperature=0", "--method=sinks,num_sinks=2,window=9"],
                         cwd=root, capture_output=True, text=True, timeout=300)
    assert gen.returncode == 0, gen.stderr[-2000:]
    run = hf_run(str(ckpt))
    method = Method.parse("sinks,num_sinks=2,window=9").resolve(run.base_len, len(ids) + 40)
    scaling = scaling_for(run, "run", method.scaling_length(len(ids) + 40), None, None)
    out = np.asarray(decode.generate(run.graphdef, run.params, ids[None], 40, temperature=0.0, scaling=scaling,
                                     method=method)[0])
    assert out[0] == bos and gen.stdout == tok.decode(out[1:].tolist(), skip_special_tokens=False) + "\n"
    assert gen.stdout.startswith("Hello")


def test_sweep_and_longrope_search_take_a_checkpoint(tmp_path):
    from posenc import evaluate as ev
    from posenc import longrope, sweep

    points = sweep.select(sweep.expand(sweep.parse_axes(["factor=1.0,2.0"])))
    records = sweep.run_eval_sweep(str(DATA / "qwen3"), str(tmp_path / "s"), points, lengths=[32], scaling="linear",
                                   num_bytes=64, split="test", progress=False, hf_model=True)
    assert all(r["status"] == "done" for r in records), [r.get("error") for r in records]
    # factor 2 with the checkpoint's own kind = its own scaling = the row `run` of the evaluation
    plain = ev.evaluate([], [32], ["run"], hf_models=[str(DATA / "qwen3")], num_bytes=64, progress=False)["rows"]
    want = next(r["bpb"] for r in plain if r["protocol"] == "nonoverlap")
    assert {r["name"]: r for r in records}["factor=2"]["bpb_L32"] == pytest.approx(want, rel=1e-9)
    cfg = longrope.SearchConfig(population=4, generations=1, mutations=2, crossovers=2, parents=2)
    # a checkpoint without a RoPE scaling of its own (those with one are refused: the next test)
    result = longrope.search_run(str(DATA / "mistral"), 128, cfg, out=str(tmp_path / "lr"), num_bytes=128,
                                 progress=False, hf_model=True)
    assert result["original_max_len"] == 64 and result["factor"] == 2.0
    assert len(result["long_factor"]) == hf.load_pretrained(DATA / "mistral").cfg.rotary_dim // 2


@pytest.mark.parametrize("family,kind", [("llama", "llama3"), ("qwen2", "yarn"), ("qwen3", "linear"),
                                         ("phi3", "longrope")])
def test_longrope_search_refuses_a_checkpoint_with_a_rope_scaling_of_its_own(family, kind, tmp_path):
    """The search rescales the unscaled frequencies in place of a checkpoint's rope_scaling, which its weights
    were trained with: refused, naming the field and the kind it reads as, before --out is made."""
    from posenc import longrope

    cfg = longrope.SearchConfig(population=4, generations=1, mutations=2, crossovers=2, parents=2)
    with pytest.raises(ValueError, match=rf"trained with a RoPE scaling \(the rope_scaling \(rope_parameters\) of its "
                                         rf"config.json: kind='{kind}'\).*kind 'none'"):
        longrope.search_run(str(DATA / family), 256, cfg, out=str(tmp_path / "lr"), num_bytes=256, progress=False,
                            hf_model=True)
    assert not (tmp_path / "lr").exists()


@pytest.mark.parametrize("family", ["llama", "mistral", "qwen3", "gpt_neox"])
def test_cached_decoding_of_a_checkpoint_equals_its_forward(family):
    """Grouped-query heads, a sliding window (Mistral's ring cache), q/k norms, the parallel residual."""
    from flax import nnx

    from posenc import decode

    model = hf.load_pretrained(DATA / family)
    tokens = jnp.asarray(REF["tokens"][:, :40])
    graphdef, params = nnx.split(model)
    got = decode.teacher_forced_logits(graphdef, params, tokens, prefill_len=7)
    np.testing.assert_allclose(np.asarray(got), np.asarray(model(tokens)), atol=1e-4, rtol=1e-4)
    cfg = model.cfg
    slots = cfg.num_layers * (cfg.attn_window or 40)  # Mistral's layers keep a ring of their window
    assert decode.cache_bytes(cfg, 1, 40) == 2 * slots * cfg.kv_heads * cfg.head_dim * 4  # only the kv heads
