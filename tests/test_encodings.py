"""The encoding interface: one registry, one lookup, no name comparisons outside it, and every encoding
through the whole model (gradients to its parameters, chunked = whole, translation behaviour)."""

import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from posenc.encoding import Encoding
from posenc.encodings import ENCODINGS, POSENCS, get_encoding
from posenc.model import ModelConfig, Transformer

ROOT = pathlib.Path(__file__).resolve().parent.parent
TINY = dict(d_model=32, num_layers=2, num_heads=2, mlp_dim=64, max_len=16)
RELATIVE = {"none", "rope", "xpos", "p_rope", "local_global", "alibi", "t5", "kerple", "fire", "cope"}


def make(name, **kw):
    model = Transformer(ModelConfig(posenc=name, **{**TINY, **kw}), rngs=nnx.Rngs(0))
    for block in model.blocks:  # sharpen attention so that positions matter at init
        block.attn.qkv.kernel[...] = block.attn.qkv.kernel[...] * 8
    rng = np.random.default_rng(1)
    for param in jax.tree.leaves(nnx.state(model.encoding, nnx.Param), is_leaf=lambda x: isinstance(x, nnx.Variable)):
        if not np.any(param[...]):  # CoPE's e starts at 0 (NoPE: nothing here could fail); FIRE's MLP biases too
            param[...] = jnp.asarray(rng.normal(size=param[...].shape), param[...].dtype)
    return model


def test_registry_lookup_and_interface():
    assert set(POSENCS) >= {"none", "sinusoidal", "learned", "rope", "xpos", "p_rope", "alibi", "t5", "kerple", "fire"}
    for name, cls in ENCODINGS.items():
        assert issubclass(cls, Encoding) and cls.name == name and cls.paper, name
        assert get_encoding(name) is cls
    with pytest.raises(ValueError, match=r"model.posenc must be one of \('none', 'sinusoidal'.*got 'cubic'"):
        get_encoding("cubic")
    with pytest.raises(ValueError, match=r"model.t5: unknown option\(s\) \['buckets'\]"):
        ModelConfig(posenc="t5", encoding_options=(("buckets", 8),))


WHOLE_NUMBER_OPTIONS = [(name, key) for name, cls in ENCODINGS.items() for key, (default, _) in cls.options.items()
                        if isinstance(default, int) and not isinstance(default, bool)]


def test_the_whole_number_options_are_known():
    assert set(WHOLE_NUMBER_OPTIONS) >= {("cope", "npos_max"), ("fire", "width"), ("t5", "num_buckets"),
                                         ("t5", "max_distance"), ("local_global", "window")}


@pytest.mark.parametrize("name,key", WHOLE_NUMBER_OPTIONS, ids=lambda v: v)
def test_whole_number_options_refuse_floats_and_booleans_naming_the_field(name, key):
    """A float would reach an array shape (an obscure TypeError naming no field) or a mask (`i − j < 4.5`)."""
    default = ENCODINGS[name].options[key][0]
    for bad in (default + 0.5, float(default), True):
        with pytest.raises(ValueError, match=rf"model\.{name}\.{key} must be"):
            ModelConfig(posenc=name, encoding_options=((key, bad),))
    ModelConfig(posenc=name, encoding_options=((key, default),))


@pytest.mark.parametrize("posenc,field,key", [("rope", "model.rope.base", "rope_base"),
                                               ("sinusoidal", "model.sinusoidal_base", "sinusoidal_base")])
@pytest.mark.parametrize("bad", [0.0, -1.0, float("inf"), float("nan")])
def test_frequency_bases_must_be_finite_and_positive(posenc, field, key, bad):
    """An infinite base would fail later, inside the frequencies, without naming the field."""
    with pytest.raises(ValueError, match=rf"{re.escape(field)} must be a finite number > 0, got {bad!r}"):
        ModelConfig(posenc=posenc, **{**TINY, key: bad})


def test_no_pipeline_compares_encoding_names():
    """Only the registry and the encodings' own modules may know names: everything else asks the class."""
    own = {f"{cls.__module__.split('.')[-1]}.py" for cls in ENCODINGS.values()} | {"encodings.py", "encoding.py"}
    pattern = re.compile(r"posenc\s*(==|!=|in)\s*[\"'(]|[\"'](rope|alibi|learned|sinusoidal|t5|kerple|fire|xpos)[\"']\s*(==|!=)")
    offenders = []
    for path in [*(ROOT / "posenc").glob("*.py"), *(ROOT / "scripts").glob("*.py"), *(ROOT / "experiments").rglob("*.py")]:
        if path.parent.name == "posenc" and path.name in own:
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                offenders.append(f"{path.name}:{i}: {line.strip()}")
    assert not offenders, offenders


@pytest.mark.parametrize("name", POSENCS)
def test_every_encoding_is_causal_chunk_invariant_and_trains_its_parameters(name):
    model = make(name)
    graphdef, state = nnx.split(model)
    forward = jax.jit(lambda graphdef, s, x: nnx.merge(graphdef, s)(x), static_argnums=0)
    x = jnp.asarray(np.random.default_rng(0).integers(0, 256, size=(2, 16)))
    logits = forward(graphdef, state, x)
    changed = x.at[:, 10].set((x[:, 10] + 1) % 256)
    np.testing.assert_allclose(forward(graphdef, state, changed)[:, :10], logits[:, :10], atol=1e-5)  # the past ignores the future
    cfg = model.cfg
    for layout in ({"attn_chunk": 5, "attn_key_block": 3}, {"attn_block": 4}):  # key tiles (CoPE: whole rows)
        other = nnx.eval_shape(lambda: Transformer(ModelConfig(posenc=name, **{**TINY, **layout}), rngs=nnx.Rngs(0)))
        np.testing.assert_allclose(forward(nnx.graphdef(other), state, x), logits, atol=2e-5)  # the same parameters
    grads = jax.jit(jax.grad(lambda s: jnp.sum(nnx.merge(graphdef, s)(x) ** 2)))(state)
    own = jax.tree.leaves(nnx.state(model.encoding, nnx.Param))
    for leaf in jax.tree.leaves(grads["encoding"]) if own else []:
        assert np.isfinite(leaf).all()
    if own:  # a learned encoding's parameters get a gradient
        assert max(float(jnp.abs(g).max()) for g in jax.tree.leaves(grads["encoding"])) > 0, name
    assert cfg.encoding is ENCODINGS[name]


@pytest.mark.parametrize("name", POSENCS)
def test_relative_encodings_are_translation_invariant(name):
    """Shifting every position by 5 changes nothing for relative encodings — the seeds' ⟨f(q,m), f(k,n)⟩ =
    g(q, k, m−n) at model level — and changes absolute ones. FIRE is relative only up to its normaliser
    ψ(max(L, i)), which is constant while i < L."""
    model = make(name, max_len=32)
    x = jnp.asarray(np.random.default_rng(0).integers(0, 256, size=(2, 16)))
    base, shifted = model(x, jnp.arange(16)[None]), model(x, jnp.arange(5, 21)[None])
    assert np.allclose(base, shifted, atol=1e-4) == (name in RELATIVE), name


def test_readme_lists_every_encoding_with_its_paper():
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## The encodings"):readme.index("### Adding an encoding")]
    for name, cls in ENCODINGS.items():
        row = [line for line in table.splitlines() if line.startswith(f"| `{name}` |")]
        assert row and cls.paper.split(",")[0] in row[0], name


def test_the_readme_walkthrough_adds_an_encoding(monkeypatch):
    """The README's example encoding, registered as the walkthrough says, trains through the model."""
    readme = (ROOT / "README.md").read_text()
    walkthrough = readme[readme.index("### Adding an encoding"):]
    code = walkthrough[walkthrough.index("```python") + len("```python"):walkthrough.index("```", walkthrough.index("```python") + 9)]
    namespace = {"Encoding": Encoding, "nnx": nnx, "jnp": jnp}
    exec(compile("\n".join(line[3:] if line.startswith("   ") else line for line in code.splitlines()), "README", "exec"),
         namespace)
    cls = namespace["LogBias"]
    monkeypatch.setitem(ENCODINGS, cls.name, cls)
    model = make("logbias", encoding_options=(("init", 0.5),))
    x = jnp.asarray(np.random.default_rng(0).integers(0, 256, size=(2, 16)))
    graphdef, state = nnx.split(model)
    grads = jax.grad(lambda s: jnp.sum(nnx.merge(graphdef, s)(x) ** 2))(state)
    assert float(jnp.abs(grads["encoding"]["w"][...]).max()) > 0
    np.testing.assert_allclose(model.encoding.w[...], 0.5)
