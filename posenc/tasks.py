"""Synthetic retrieval and algorithmic tasks as data sources, and randomized positions.

Every task is byte-level (the model and vocabulary are the LM's) and every example is a deterministic
function of (seed, step, row) or, for evaluation, of (seed, length, depth, index). An example is a token
sequence whose *answer* tokens are the only ones the loss counts (`weights`); sequences shorter than the
batch's length are padded at the end with `PAD` (weight 0, and causal attention keeps padding from
affecting earlier positions).

Tasks (`config.task.name`):
  * `passkey` — the prompt of Landmark Attention (Mohtashami & Jaggi 2023, arXiv 2305.16300) and YaRN
    (Peng et al. 2023, arXiv 2309.00071): filler, then "The pass key is NNNNN. Remember it. NNNNN is the pass
    key." on a line of its own at a depth in [0, 1] of the filler (cut at that byte, as Landmark's code cuts
    its repeated filler), more filler, then "What is the pass key? The pass key is" on a new line, answered by
    " NNNNN" (5 digits). Filler (`task.filler`): `repeat`, the papers' repeated sentence, or
    `shakespeare`, a window of the bundled corpus' split (harder: digits and look-alike text occur).
    Against their code (`generate_prompt` of epfml/landmark-attention llama/run_test.py, copied by
    jquesnelle/yarn eval/passkey.py): no first line of task description ("There is an important info hidden
    inside a lot of irrelevant text. ..."); the filler after the needle continues the stream where the part
    before it was cut (theirs starts the sentence again); keys 10000–99999 (theirs randint(1, 50000)). At depth
    0 and 1 a prompt is theirs without the task line, byte for byte.
  * `recall` — multi-query associative recall (MQAR, Arora et al. 2023, arXiv 2312.04927) in the Zoology
    layout: n key–value pairs of one byte each, "a3K7x0" (keys ASCII letters, distinct within a sequence;
    values digits), ";", then n keys drawn from the pairs with replacement, each answered by its value: "x"
    **0** "a" **3** "x" **0**. Each query is one induction step (find the key, copy the byte after it), and
    half of a sequence's targets past ";" are answers. Queries drawn with replacement leave no shortcut:
    with every key queried once (version 2), a 4-layer model learned to answer the one pair not yet queried
    (the last query 100%, the others near chance; pilot recall1b-rope-4l) instead of matching keys.
    (Version 3 of the task, VERSIONS.)
  * `copy` / `reverse` — a string of printable ASCII, "|", and the string again (reversed), as in
    Kazemnejad et al. 2023 (arXiv 2305.19466) and Ruoss et al. 2023 (arXiv 2305.16843).

Splits never share keys: each example's key (the pass key; the whole pair list; the string) falls in
exactly one split by a hash of its bytes (`key_split`: 10% test, 10% validation, 80% train), and generators
draw until the key lies in the requested split. Shakespeare filler comes from the corpus split of the same
name.

Randomized positions (Ruoss et al. 2023, `config.positions.randomize`): each sequence's positions are a
sorted random subset of [0, max_position) (`random_positions`), so that a model trained on length N has
seen every position up to max_position; the learned table then has max_position rows. The sequence is the
example, not the padded row: an example of n + 1 tokens (n inputs; the last token is a target only) draws
n + 1 positions, as a test example of n + 1 tokens does in `posenc.task_eval`, and its padding repeats the
last one (padding targets weigh 0, and causal attention keeps them out of the example's predictions). The
paper draws for each sequence of its own length in the same way (its batches hold one length each).
POSITIONS_VERSION says how they are drawn; a run records it (config.positions.version).
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Callable

import numpy as np

from posenc import data

TASKS = ("passkey", "recall", "copy", "reverse")
ALGORITHMIC = ("copy", "reverse", "recall")  # the tasks of Kazemnejad et al. / Ruoss et al. (lengths up to train_len)
FILLERS = ("repeat", "shakespeare")
SPLITS = data.SPLITS
PAD = 0  # the padding byte (weight 0)
# How randomized positions are drawn (config.positions.version): 1, once per padded row of train_len inputs, an
# example of n inputs taking the first n (short examples then only saw low positions, unlike their test examples);
# 2, per example, n + 1 positions for its n + 1 tokens (`batch`). A randomized run of another version can neither
# resume nor be tested (`check_positions_version`).
POSITIONS_VERSION = 2
# The layout each generator makes. A run records its task's version (config.task.version); training refuses to
# resume, and evaluation to test, a run whose version is not the one generated now (`check_version`).
# recall 1: "ab=12," pairs with two-letter keys and a quarter of the keys queried; 2: one-byte pairs, every key
# queried once; 3: one-byte pairs, n queries drawn with replacement (`recall`).
VERSIONS = {"lm": 1, "passkey": 1, "recall": 3, "copy": 1, "reverse": 1}

PASSKEY_FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
PASSKEY_NEEDLE = "\nThe pass key is {key}. Remember it. {key} is the pass key.\n"
PASSKEY_QUESTION = "\nWhat is the pass key? The pass key is"
PASSKEY_ANSWER = " {key}"
PASSKEY_DIGITS = 5
COPY_ALPHABET = np.array([c for c in range(33, 127) if c != ord("|")], np.int32)  # printable ASCII but the separator
RECALL_KEYS = np.frombuffer(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", np.uint8)
RECALL_VALUES = np.frombuffer(b"0123456789", np.uint8)
RECALL_MIN_PAIRS = 2


def key_split(key: bytes) -> str:
    """The split an example's key belongs to: a fixed hash of its bytes, 10% test, 10% validation, 80% train."""
    bucket = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") % 10
    return "test" if bucket == 0 else "validation" if bucket == 1 else "train"


@dataclasses.dataclass(frozen=True)
class Example:
    """One sequence: `tokens [T]` int32 and the boolean `answer [T]` marking the answer tokens."""

    tokens: np.ndarray
    answer: np.ndarray
    key: bytes

    def __post_init__(self):
        if self.tokens.shape != self.answer.shape:
            raise ValueError(f"tokens {self.tokens.shape} and answer {self.answer.shape} differ in shape")


def min_length(task: str) -> int:
    """The shortest sequence a task can make (tokens)."""
    check_task(task)
    if task == "passkey":
        return len(PASSKEY_NEEDLE.format(key="0" * PASSKEY_DIGITS)) + len(PASSKEY_QUESTION) + PASSKEY_DIGITS + 1
    if task == "recall":
        return 4 * RECALL_MIN_PAIRS + 1
    return 3


def max_length(task: str) -> int | None:
    """The longest sequence a task can make (tokens; None: no limit). Recall's one-byte keys are distinct, so it
    holds at most len(RECALL_KEYS) pairs: 4 · 52 + 1 tokens, and the 3 a length's remainder pads."""
    check_task(task)
    return 4 * len(RECALL_KEYS) + 4 if task == "recall" else None


def layout_step(task: str) -> int:
    """The step between the input lengths L whose examples `task` fills without padding (L + 1 tokens): 2 for
    copy and reverse (2n + 1 tokens: n inputs, "|", n answers), 4 for recall (4n + 1), 1 for passkey."""
    check_task(task)
    return {"recall": 4, "copy": 2, "reverse": 2}.get(task, 1)


def check_input_lengths(task: str, lengths, field: str = "lengths", exact: bool = False) -> None:
    """Raises a ValueError naming `field` unless every input length L (an example of L + 1 tokens, the last only
    a target) is one that `task` can make in bytes; with `exact` (evaluation), also one that it fills without
    padding (`layout_step`), so that a row's length is the length its examples use."""
    lo, hi = min_length(task) - 1, max_length(task)
    bad = [n for n in lengths if n < lo or (hi is not None and n + 1 > hi)]
    if bad:
        span = f"[{lo}, {hi - 1}]" if hi is not None else f">= {lo}"
        raise ValueError(f"{field}: task {task!r} takes input lengths {span} (an example of L inputs has L + 1 "
                         f"tokens), got {bad}")
    step = layout_step(task)
    padded = [n for n in lengths if n % step] if exact else []
    if padded:
        raise ValueError(f"{field}: task {task!r} fills an example without padding at input lengths that are "
                         f"multiples of {step}, got {padded}: a padded example would be scored under a length it does "
                         "not use")


def check_version(task: str, version: int | None, run: str = "the run") -> None:
    """Raises a ValueError unless `version` (a run's config.task.version; None for a run recorded before the
    field, that is version 1) is the layout `task` is generated in now (VERSIONS)."""
    got = 1 if version is None else version
    if got != VERSIONS[task]:
        raise ValueError(f"{run} was trained on {task!r} layout version {got} (task.version); posenc generates "
                         f"version {VERSIONS[task]} now (posenc.tasks.VERSIONS), so it can neither resume nor be "
                         "tested on this task")


def check_positions_version(version: int | None, run: str = "the run") -> None:
    """Raises a ValueError unless `version` (a randomized run's config.positions.version; None for a run recorded
    before the field, that is version 1) is how positions are drawn now (POSITIONS_VERSION)."""
    got = 1 if version is None else version
    if got != POSITIONS_VERSION:
        if version is None:
            raise ValueError(f"{run} has positions.randomize without positions.version: a run from before the field "
                             f"(its positions drawn by version 1) can neither resume nor be tested, since posenc draws "
                             f"version {POSITIONS_VERSION} now (posenc.tasks.POSITIONS_VERSION); a new config sets "
                             f"positions.version={POSITIONS_VERSION} with positions.randomize, as configs/tasks.py's "
                             "randomize variant does")
        raise ValueError(f"{run} was trained with randomized positions drawn by version {got} "
                         f"(positions.version); posenc draws version {POSITIONS_VERSION} now "
                         "(posenc.tasks.POSITIONS_VERSION), so it can neither resume nor be tested")


def check_task(task: str, filler: str = "repeat") -> None:
    if task not in TASKS:
        raise ValueError(f"task.name must be one of {TASKS}, got {task!r}")
    if filler not in FILLERS:
        raise ValueError(f"task.filler must be one of {FILLERS}, got {filler!r}")


def _draw(rng: np.random.Generator, split: str, make: Callable[[np.random.Generator], bytes]) -> bytes:
    """Draws keys with `make(rng)` until one lies in `split` (expected 1.25 draws for train, 10 otherwise)."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    while True:
        key = make(rng)
        if key_split(key) == split:
            return key


def _example(parts: list[tuple[bytes | np.ndarray, bool]], length: int, key: bytes) -> Example:
    tokens = np.concatenate([np.frombuffer(p, np.uint8) if isinstance(p, bytes) else p for p, _ in parts]).astype(np.int32)
    answer = np.concatenate([np.full(len(p), a, bool) for p, a in parts])
    if len(tokens) > length:
        raise AssertionError(f"built {len(tokens)} tokens for length {length}")
    pad = length - len(tokens)
    return Example(np.pad(tokens, (0, pad), constant_values=PAD), np.pad(answer, (0, pad)), key)


class PromptTooShort(ValueError):
    """A passkey prompt of `length` tokens cannot hold its needle, question and answer (`need` tokens)."""

    def __init__(self, length: int, need: int):
        super().__init__(f"passkey needs length >= {need} tokens, got {length}")
        self.length, self.need = length, need


def byte_encode(text: str | bytes) -> np.ndarray:
    """Bytes as token ids (the byte-level models' encoder)."""
    raw = text.encode("utf-8") if isinstance(text, str) else text
    return np.frombuffer(raw, np.uint8).astype(np.int32)


def filler_stream(filler: str, *, corpus: data.Corpus | None = None, split: str = "train", min_tokens: int = 0,
                  encode: Callable = byte_encode) -> np.ndarray:
    """The token stream passkey filler is cut from: the repeated sentence (at least `min_tokens` long), or
    the `split` of the corpus, each tokenized as one text (`encode.text` where the encoder has it, as
    posenc.task_eval.TokenEncoder: a checkpoint's tokens; bytes otherwise)."""
    check_task("passkey", filler)
    whole = getattr(encode, "text", encode)
    if filler == "repeat":
        reps = min_tokens // len(whole(PASSKEY_FILLER)) + 1
        stream = whole(PASSKEY_FILLER * reps)
        while len(stream) < min_tokens:  # a tokenizer may merge across the sentences
            reps += 1 + reps // 4
            stream = whole(PASSKEY_FILLER * reps)
        return stream
    if corpus is None:
        raise ValueError("task.filler='shakespeare' needs the corpus")
    text = corpus.split(split)
    return text if encode is byte_encode else whole(bytes(text))


def passkey(rng: np.random.Generator, length: int, *, split: str = "train", depth: float | None = None,
            filler: str = "repeat", corpus: data.Corpus | None = None, stream: np.ndarray | None = None,
            encode: Callable = byte_encode) -> Example:
    """A passkey prompt of exactly `length` tokens with the needle at `depth` ∈ [0, 1] of the filler (random
    if None). The filler is cut from `stream` (default `filler_stream(filler, corpus=corpus, split=split)`):
    from its start for `repeat`, at a random offset for `shakespeare`. `encode` turns text into tokens
    (bytes; a Hugging Face tokenizer's ids for `posenc.task_eval` on a checkpoint)."""
    check_task("passkey", filler)
    if depth is not None and not 0.0 <= depth <= 1.0:
        raise ValueError(f"depth must be in [0, 1], got {depth!r}")
    key = _draw(rng, split, lambda r: str(r.integers(10 ** (PASSKEY_DIGITS - 1), 10 ** PASSKEY_DIGITS)).encode())
    needle = encode(PASSKEY_NEEDLE.format(key=key.decode()))
    question, answer = encode(PASSKEY_QUESTION), encode(PASSKEY_ANSWER.format(key=key.decode()))
    n = length - len(needle) - len(question) - len(answer)
    if n < 0:
        raise PromptTooShort(length, length - n)
    if stream is None:
        stream = filler_stream(filler, corpus=corpus, split=split, min_tokens=n)
    if len(stream) < n:
        raise ValueError(f"the passkey filler stream has {len(stream)} tokens, fewer than the {n} a prompt of "
                         f"{length} needs")
    start = int(rng.integers(0, len(stream) - n + 1)) if filler == "shakespeare" else 0
    text = stream[start:start + n].astype(np.int32)
    d = rng.uniform() if depth is None else depth
    cut = int(round(d * n))
    return _example([(text[:cut], False), (needle, False), (text[cut:], False), (question, False), (answer, True)],
                    length, key)


def recall(rng: np.random.Generator, length: int, *, split: str = "train") -> Example:
    """MQAR within `length` tokens: n = (length − 1) // 4 one-byte key–value pairs, ";", and n keys drawn from
    them with replacement, each followed by its value (the answer): 4n + 1 ≤ length tokens, n ≤ 52 keys."""
    if length < min_length("recall"):
        raise ValueError(f"recall needs length >= {min_length('recall')} tokens, got {length}")
    n = (length - 1) // 4
    if n > len(RECALL_KEYS):
        raise ValueError(f"recall at length {length} needs {n} distinct one-byte keys; there are {len(RECALL_KEYS)} "
                         f"(length <= {4 * len(RECALL_KEYS) + 4})")

    def make(r):
        keys = RECALL_KEYS[r.choice(len(RECALL_KEYS), size=n, replace=False)]
        values = RECALL_VALUES[r.integers(0, len(RECALL_VALUES), size=n)]
        return np.stack([keys, values], axis=1).tobytes()

    key = _draw(rng, split, make)
    parts: list[tuple[bytes, bool]] = [(key + b";", False)]
    for q in rng.integers(0, n, size=n):
        parts += [(key[2 * q:2 * q + 1], False), (key[2 * q + 1:2 * q + 2], True)]
    return _example(parts, length, key)


def copy(rng: np.random.Generator, length: int, *, split: str = "train", reverse: bool = False) -> Example:
    """A string of (length − 1) // 2 printable characters, "|", and the string (reversed) as the answer."""
    if length < min_length("copy"):
        raise ValueError(f"copy needs length >= {min_length('copy')} tokens, got {length}")
    n = (length - 1) // 2
    key = _draw(rng, split, lambda r: bytes(COPY_ALPHABET[r.integers(0, len(COPY_ALPHABET), size=n)].astype(np.uint8)))
    return _example([(key + b"|", False), (key[::-1] if reverse else key, True)], length, key)


def make_example(task: str, rng: np.random.Generator, length: int, *, split: str = "train",
                 depth: float | None = None, filler: str = "repeat", corpus: data.Corpus | None = None,
                 stream: np.ndarray | None = None, encode: Callable = byte_encode) -> Example:
    """One example of `task` (see the module docstring) of `length` tokens (`stream`, `encode`: passkey's)."""
    check_task(task, filler)
    if depth is not None and task != "passkey":
        raise ValueError(f"depth applies to the passkey task only, not {task!r}")
    if task == "passkey":
        return passkey(rng, length, split=split, depth=depth, filler=filler, corpus=corpus, stream=stream,
                       encode=encode)
    if task == "recall":
        return recall(rng, length, split=split)
    return copy(rng, length, split=split, reverse=task == "reverse")


def random_positions(rng: np.random.Generator, length: int, max_position: int) -> np.ndarray:
    """A sorted random subset of `length` distinct positions of [0, max_position) (Ruoss et al. 2023)."""
    if length > max_position:
        raise ValueError(f"positions.max_position={max_position} must be >= the sequence length {length}")
    return np.sort(rng.choice(max_position, size=length, replace=False)).astype(np.int32)


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """What a run trains on: `config.task` and `config.positions` (see configs/tasks.py)."""

    name: str = "passkey"  # TASKS, or 'lm' for plain text windows
    filler: str = "repeat"
    min_len: int | None = None  # shortest training example; None: train_len for passkey, the task's minimum else
    lm_ratio: float = 0.0  # fraction of a batch's rows that are LM text windows (every target counts)
    prompt_weight: float = 0.0  # loss weight of a task row's non-answer targets (0: only the answer counts)
    randomize: bool = False
    max_position: int | None = None
    version: int | None = None  # config.task.version (VERSIONS)
    positions_version: int | None = None  # config.positions.version (POSITIONS_VERSION)

    @classmethod
    def from_config(cls, config) -> "TaskSpec | None":
        """The run's task, or None for a plain LM run without randomized positions (configs/default.py)."""
        task, pos = config.get("task"), config.get("positions")
        if task is None and pos is None:
            return None
        spec = cls(name=task.name if task else "lm", filler=task.get("filler", "repeat") if task else "repeat",
                   min_len=task.get("min_len") if task else None, lm_ratio=task.get("lm_ratio", 0.0) if task else 0.0,
                   prompt_weight=task.get("prompt_weight", 0.0) if task else 0.0,  # checked as given (`check`)
                   version=task.get("version") if task else VERSIONS["lm"],
                   randomize=bool(pos.randomize) if pos else False, max_position=pos.get("max_position") if pos else None,
                   positions_version=pos.get("version") if pos else None)
        spec.check(config.train_len, config.model.posenc, scaling_kind(config))
        return spec

    def check(self, train_len: int, posenc: str, scaling_kind: str = "none") -> None:
        """Raises a ValueError naming the field for values this run cannot use (`scaling_kind`: the run's
        `model.rope.scaling.kind`)."""
        from posenc.encodings import get_encoding  # noqa: PLC0415

        if self.name != "lm":
            if self.name not in TASKS:
                raise ValueError(f"task.name must be one of {('lm',) + TASKS}, got {self.name!r}")
            check_task(self.name, self.filler)
            check_version(self.name, self.version, "this config")
            lo = min_length(self.name) - 1  # input tokens
            if self.min_len is not None and not lo <= self.min_len <= train_len:
                raise ValueError(f"task.min_len must be in [{lo}, train_len={train_len}] for task {self.name!r}, "
                                 f"got {self.min_len!r}")
            if train_len < lo:
                raise ValueError(f"train_len={train_len} is shorter than task {self.name!r}'s shortest example ({lo})")
            check_input_lengths(self.name, [train_len], "train_len")
        for field in ("prompt_weight", "lm_ratio"):
            value = getattr(self, field)
            if (isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating))
                    or not 0.0 <= value <= 1.0):
                raise ValueError(f"task.{field} must be a number in [0, 1], got {value!r}")
        if self.randomize:
            kind = get_encoding(posenc).position_kind
            if kind in ("none", "contextual"):
                raise ValueError(f"positions.randomize needs an encoding that takes positions; posenc={posenc!r} "
                                 f"({kind}) does not")
            if not isinstance(self.max_position, int) or self.max_position <= train_len:
                raise ValueError(f"positions.max_position must be an integer > train_len={train_len} with "
                                 "positions.randomize (an example of train_len inputs has train_len + 1 tokens, each "
                                 f"drawn a position), got {self.max_position!r}")
            check_positions_version(self.positions_version, "this config")
            if scaling_kind != "none":
                raise ValueError(f"positions.randomize needs model.rope.scaling.kind='none', got {scaling_kind!r}: "
                                 "a randomized-positions run is tested without scalings (posenc.task_eval), and a "
                                 "dynamic kind would train every example at the scale of positions.max_position")

    def shortest(self, train_len: int) -> int:
        """The shortest training example (input tokens): `min_len`, else train_len for passkey and the task's
        minimum for the others."""
        if self.min_len is not None:
            return self.min_len
        return train_len if self.name in ("passkey", "lm") else min_length(self.name) - 1


def scaling_kind(config) -> str:
    """A run config's `model.rope.scaling.kind` ('none' where it has no RoPE scaling fields)."""
    rope = config.model.get("rope") or {}
    return (rope.get("scaling") or {}).get("kind", "none")


def batch(spec: TaskSpec, corpus: data.Corpus, rng: np.random.Generator, *, batch_size: int, length: int,
          split: str = "train") -> dict[str, np.ndarray]:
    """`inputs`, `targets`, `weights` `[B, length]` (weight 1 on answer targets and on every target of an LM
    row) and, with randomized positions, `positions` `[B, length]`, drawn from `rng`. Task examples have
    between `spec.shortest(length)` and `length` input tokens (padded to `length`). Randomized positions are
    drawn per example (the module docstring): n + 1 for an example of n inputs, its first n the inputs',
    the last repeated over the padding."""
    lo = spec.shortest(length)
    x = np.zeros((batch_size, length), np.int32)
    y = np.zeros((batch_size, length), np.int32)
    w = np.zeros((batch_size, length), np.float32)
    pos = np.zeros((batch_size, length), np.int32)
    text = corpus.split(split)
    for b in range(batch_size):
        if spec.name == "lm" or (spec.lm_ratio and rng.uniform() < spec.lm_ratio):
            start = int(rng.integers(0, len(text) - length))
            window = text[start:start + length + 1].astype(np.int32)
            x[b], y[b], w[b] = window[:-1], window[1:], 1.0
            n = length
        else:
            n = int(rng.integers(lo, length + 1))
            ex = make_example(spec.name, rng, n + 1, split=split, filler=spec.filler, corpus=corpus)
            x[b, :n], y[b, :n] = ex.tokens[:-1], ex.tokens[1:]
            w[b, :n] = np.where(ex.answer[1:], 1.0, np.where(ex.tokens[1:] == PAD, 0.0, spec.prompt_weight))
        if spec.randomize:
            drawn = random_positions(rng, n + 1, spec.max_position)
            pos[b, :n], pos[b, n:] = drawn[:-1], drawn[-1]
    out = {"inputs": x, "targets": y, "weights": w}
    if spec.randomize:
        out["positions"] = pos
    return out


def train_batch(spec: TaskSpec, corpus: data.Corpus, *, seed: int, step: int, batch_size: int,
                length: int) -> dict[str, np.ndarray]:
    """The training batch of `step`: a pure function of (seed, step), so a resumed run sees the same data."""
    return batch(spec, corpus, np.random.default_rng([seed, step, 1]), batch_size=batch_size, length=length)


def validation_batch(spec: TaskSpec, corpus: data.Corpus, *, seed: int, batch_size: int,
                     length: int) -> dict[str, np.ndarray]:
    """Fixed validation examples (keys and filler of the validation split) at `length`, task rows only."""
    return batch(dataclasses.replace(spec, lm_ratio=0.0, prompt_weight=0.0), corpus, np.random.default_rng([seed, 3]),
                 batch_size=batch_size, length=length, split="validation")


def depth_salt(depth: float | None) -> int:
    """The seed word of a needle depth's evaluation examples (depth to 1e-4; 10001 for none)."""
    return int(round(depth * 10000)) if depth is not None else 10001


def eval_examples(task: str, *, length: int, n: int, seed: int = 0, split: str = "test", depth: float | None = None,
                  filler: str = "repeat", corpus: data.Corpus | None = None, stream: np.ndarray | None = None,
                  encode: Callable = byte_encode) -> list[Example]:
    """`n` examples the model reads in `length` tokens (each has `length + 1`: the last is only a target, as
    in an LM window), a pure function of (task, seed, length, depth, split) — and, for passkey, of the filler
    `stream` and `encode` (a Hugging Face checkpoint's tokens: `posenc.task_eval`)."""
    salt = [depth_salt(depth), SPLITS.index(split)]
    rng = np.random.default_rng([seed, length, *salt, 2])
    try:
        return [make_example(task, rng, length + 1, split=split, depth=depth, filler=filler, corpus=corpus,
                             stream=stream, encode=encode) for _ in range(n)]
    except PromptTooShort as e:  # in input lengths, as the caller gave them (an example of L inputs has L + 1 tokens)
        raise ValueError(f"lengths: passkey in these tokens needs input lengths >= {e.need - 1} (the needle, question "
                         f"and answer of an example), got {length}") from None
