"""LongRoPE's evolutionary search of per-pair (and per-layer) RoPE rescale factors.

Ding et al. 2024, "LongRoPE: Extending LLM Context Window Beyond 2 Million Tokens", arXiv 2402.13753, §3.2
and Algorithm 1; reference code github.com/microsoft/LongRoPE (`evolution/`).

An individual is a vector λ of rescale factors, one per frequency pair (θ_i → θ_i / λ_i), or one vector per
layer `[num_layers, d/2]`, plus n̂, the number of initial positions left unscaled (with the long factors only:
`RopeScaling.unscaled_positions`). Constraints (the paper's search space): 1 ≤ λ_i ≤ `factor_bound` (1.25·s by
default) and λ non-decreasing across pairs (lower frequencies are stretched at least as much as higher ones),
within each layer's vector; n̂ from `n_hat_choices`. The paper and microsoft/LongRoPE search one λ per frequency
pair shared by every layer (§3.2: a factor "for each RoPE dimension"; `evolution/dim_mono`); per-layer vectors are
posenc's extension, after seed 004's description of LongRoPE as searching each layer separately (每层独立搜索),
which the paper does not do.

Algorithm: the initial population holds PI (λ_i = s), NTK-aware (λ_i = θ_i / θ'_i) and YaRN factors (projected
onto the constraints, `repair`), filled up with mutations of them. Each generation keeps the `parents` fittest,
adds `mutations` mutants and `crossovers` children of random parent pairs — none that was evaluated before in
the search (the reference code's `history`) — and evaluates them. The children meet the constraints by
construction, as in the reference code (`evolution/algorithms/dim_mono.py`, `evolution/dim_mono_n/dim_mono_n.py`):
a mutation draws each chosen λ_i inside [λ_{i−1}, λ_{i+1}] (`mutate`), and a crossover child that is not
non-decreasing is drawn again, and after `CROSSOVER_TRIES` tries skipped (`crossover`); nothing is projected.
Fitness is the perplexity at the target length on a search split (the validation split, never the test split).
Everything is seeded; the state is saved every generation and a rerun resumes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import pathlib
import statistics
from typing import Callable, Sequence

import numpy as np
from tqdm.auto import tqdm

from posenc.jobs import write_atomic
from posenc.rope_scaling import RopeScaling, factors_fit, rope_frequencies

# n̂'s choices: 0 and the powers of two up to 128, the paper's set (Table 4: {0, 1, 2, 4, 8, 12, 16, 20, 24, 28, 32,
# 64, 128, 256}) without 12, 20, 24, 28 and 256
N_HAT_CHOICES = (0, 1, 2, 4, 8, 16, 32, 64, 128)
# How the search draws its children and what its n̂ means, saved in its state and its longrope.json: 1 rejected
# only this generation's parents and children, so an individual of an earlier generation could be drawn and
# evaluated again; 2 rejects every individual evaluated before in the search; 3 draws a mutated λ_i inside its
# neighbours' interval and rejects a non-monotone crossover child (1 and 2 projected every child with a
# cumulative maximum, which pushed λ upward), and n̂ applies with the long factors only, its positions without
# the attention factor (`RopeScaling.unscaled_positions`). A state of another version is refused, not resumed
# with other draws.
SEARCH_VERSION = 3
# The search version since which n̂ has its present meaning: a factors file of an earlier version with n̂ > 0
# is refused (`read_factors`), its n̂ having been searched under the other convention.
N_HAT_SINCE_VERSION = 3
# A crossover child that is not non-decreasing is drawn again up to this many times, then the pair is skipped
# (the reference code's `max_crossover_try`, 20 in evolution/default_hyper_params/dim_mono_llama.json).
CROSSOVER_TRIES = 20


@dataclasses.dataclass(frozen=True)
class SearchConfig:
    """Defaults as in the paper (population 64, 40 iterations, 16 mutations, 16 crossovers, 32 parents, p = 0.3,
    λ ≤ 1.25·s); n̂'s choices are a subset of the paper's (`N_HAT_CHOICES`)."""

    population: int = 64
    generations: int = 40
    mutations: int = 16
    crossovers: int = 16
    parents: int = 32
    mutation_prob: float = 0.3
    factor_bound: float = 1.25  # λ ≤ factor_bound · s
    # a mutated λ_i is multiplied by exp(z), z ~ N(0, mutation_scale²) truncated to its neighbours' interval
    mutation_scale: float = 0.1
    n_hat_choices: tuple = N_HAT_CHOICES
    seed: int = 0

    def __post_init__(self):
        for name in ("population", "generations", "parents"):
            if getattr(self, name) < 1:
                raise ValueError(f"SearchConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.mutations < 0 or self.crossovers < 0 or self.mutations + self.crossovers < 1:
            raise ValueError("SearchConfig.mutations and crossovers must be >= 0 and not both 0")
        if self.parents > self.population:
            raise ValueError(f"SearchConfig.parents ({self.parents}) must be <= population ({self.population})")
        if not 0 < self.mutation_prob <= 1:
            raise ValueError(f"SearchConfig.mutation_prob must be in (0, 1], got {self.mutation_prob}")
        if self.factor_bound < 1:
            raise ValueError(f"SearchConfig.factor_bound must be >= 1, got {self.factor_bound}")
        if not (isinstance(self.mutation_scale, (int, float)) and math.isfinite(self.mutation_scale)
                and self.mutation_scale > 0):
            raise ValueError(f"SearchConfig.mutation_scale must be a finite number > 0 (the standard deviation of a "
                             f"mutation's log-step), got {self.mutation_scale!r}")
        choices = self.n_hat_choices
        if (isinstance(choices, (str, bytes)) or not isinstance(choices, Sequence) or not choices
                or not all(_is_count(c) for c in choices)):
            raise ValueError(f"SearchConfig.n_hat_choices must be a non-empty sequence of integers >= 0 (n̂, the "
                             f"initial positions left unscaled; default {N_HAT_CHOICES}), got {choices!r}")


def _is_count(value) -> bool:
    """An integer >= 0 (bool excluded)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and value >= 0


@dataclasses.dataclass(frozen=True)
class Individual:
    factors: np.ndarray  # [r] or [num_layers, r]
    n_hat: int

    def key(self) -> tuple:
        return (self.n_hat, tuple(np.round(self.factors, 4).reshape(-1)))

    def digest(self) -> str:
        """A short fingerprint of `key()` (16 hex digits), as the search state records the evaluated individuals."""
        return hashlib.sha256(repr(self.key()).encode()).hexdigest()[:16]

    def to_json(self) -> dict:
        return {"factors": self.factors.tolist(), "n_hat": int(self.n_hat)}

    @classmethod
    def from_json(cls, d: dict) -> "Individual":
        return cls(np.asarray(d["factors"], np.float64), int(d["n_hat"]))


def repair(factors: np.ndarray, bound: float) -> np.ndarray:
    """Projects λ onto the constraints: within [1, bound] and non-decreasing along the pairs (last axis), by a
    cumulative maximum. For the seeds only (PI, NTK and YaRN are within them but for rounding, a factor above the
    bound aside); the search's children meet the constraints by construction (`mutate`, `crossover`)."""
    return np.maximum.accumulate(np.clip(factors, 1.0, bound), axis=-1)


def satisfies(ind: Individual, bound: float, n_hat_choices: Sequence[int]) -> bool:
    f = ind.factors
    return bool(np.all(f >= 1.0 - 1e-12) and np.all(f <= bound + 1e-12) and np.all(np.diff(f, axis=-1) >= -1e-12)
                and ind.n_hat in n_hat_choices)


def seed_factors(rotary_dim: int, base: float, factor: float, original_max_len: int) -> dict[str, np.ndarray]:
    """λ of PI, NTK-aware and YaRN at scale s: λ_i = θ_i / θ'_i."""
    theta = rope_frequencies(rotary_dim, base=base)[0]
    out = {}
    for kind in ("linear", "ntk", "yarn"):
        sc = RopeScaling(kind, factor, original_max_len=original_max_len)
        out[kind] = theta / rope_frequencies(rotary_dim, base=base, scaling=sc)[0]
    return out


_NORMAL = statistics.NormalDist()
_cdf = np.vectorize(_NORMAL.cdf, otypes=[np.float64])
_inv_cdf = np.vectorize(_NORMAL.inv_cdf, otypes=[np.float64])


def _draw_within(x: np.ndarray, lo: np.ndarray, hi: np.ndarray, sigma: float, u: np.ndarray) -> np.ndarray:
    """x · exp(σz), z ~ N(0, 1) truncated so that the result lies in [lo, hi] (lo ≤ x ≤ hi), by the inverse CDF of
    the uniform draws `u` in [0, 1): a step of scale σ in log λ, centred on x and confined to the interval."""
    a, b = np.log(lo / x) / sigma, np.log(hi / x) / sigma  # a ≤ 0 ≤ b
    pa, pb = _cdf(a), _cdf(b)
    p = np.clip(pa + u * (pb - pa), 1e-300, 1 - 1e-16)  # inside (0, 1): inv_cdf's domain
    z = np.clip(_inv_cdf(p), a, b)
    return np.clip(x * np.exp(sigma * z), lo, hi)


def mutate(ind: Individual, rng: np.random.Generator, cfg: SearchConfig, bound: float) -> Individual:
    """A mutant of `ind`: each λ_i drawn with probability `cfg.mutation_prob` is redrawn inside [λ_{i−1}, λ_{i+1}]
    (1 for the first pair's lower end, `bound` for the last pair's upper end), pair after pair, so that λ stays
    non-decreasing and within [1, bound] and no other pair changes, within each layer's vector (the last axis) of
    a per-layer individual. As microsoft/LongRoPE's `mutate` (evolution/algorithms/dim_mono.py,
    `mutate_valid_alpha` in evolution/dim_mono_n/dim_mono_n.py), which draws uniformly on a 0.01 grid of that
    interval; here the draw is a log-normal step of scale `cfg.mutation_scale` around λ_i truncated to the
    interval (continuous λ; no drift up or down where the interval is symmetric in log λ). n̂ is redrawn from
    `cfg.n_hat_choices` with probability `cfg.mutation_prob`.

    `ind` must meet the constraints (`satisfies`), as the seeds do after `repair` and every child after this.
    """
    rows = np.array(ind.factors, np.float64).reshape(-1, ind.factors.shape[-1])  # [layers or 1, r]: a copy
    r = rows.shape[-1]
    drawn = rng.random(rows.shape) < cfg.mutation_prob
    u = rng.random(rows.shape)
    for i in range(r):  # in order: pair i's interval uses pair i − 1 as already mutated, as the reference does
        k = drawn[:, i]
        if k.any():
            lo = rows[k, i - 1] if i > 0 else np.ones(k.sum())
            hi = rows[k, i + 1] if i < r - 1 else np.full(k.sum(), float(bound))
            rows[k, i] = _draw_within(rows[k, i], lo, hi, cfg.mutation_scale, u[k, i])
    n_hat = int(rng.choice(cfg.n_hat_choices)) if rng.random() < cfg.mutation_prob else ind.n_hat
    return Individual(rows.reshape(ind.factors.shape), n_hat)


def crossover(a: Individual, b: Individual, rng: np.random.Generator) -> Individual | None:
    """A child taking each λ_i (each entry, per layer too) from `a` or `b` with probability 1/2, and n̂ from
    either; a child that is not non-decreasing along every layer's vector is drawn again, up to
    `CROSSOVER_TRIES` times, after which None (the pair is skipped). As microsoft/LongRoPE's `crossover`
    (evolution/algorithms/dim_mono.py), which rejects such a child (`not np.all(np.diff(new_factors) >= 0)`)
    and gives up after `max_crossover_try` tries, instead of projecting it. Two parents within [1, bound] give a
    child within them."""
    for _ in range(CROSSOVER_TRIES):
        pick = rng.random(a.factors.shape) < 0.5
        factors = np.where(pick, a.factors, b.factors)
        n_hat = a.n_hat if rng.random() < 0.5 else b.n_hat
        if np.all(np.diff(factors, axis=-1) >= 0):
            return Individual(factors, n_hat)
    return None


def initial_population(seeds: Sequence[Individual], cfg: SearchConfig, bound: float,
                       rng: np.random.Generator) -> list[Individual]:
    """The seeds (projected onto the constraints, `repair`), filled up to `cfg.population` with distinct mutants
    of them (each λ_i drawn with probability at least 1/2)."""
    population, seen = [], set()
    for ind in seeds:
        ind = Individual(repair(ind.factors, bound), ind.n_hat)
        if ind.key() not in seen:
            seen.add(ind.key())
            population.append(ind)
    parents = list(population)
    tries = 0
    while len(population) < cfg.population and tries < 100 * cfg.population:
        tries += 1
        child = mutate(parents[rng.integers(len(parents))], rng,
                       dataclasses.replace(cfg, mutation_prob=max(cfg.mutation_prob, 0.5)), bound)
        if child.key() not in seen:
            seen.add(child.key())
            population.append(child)
    return population[: cfg.population]


def search(fitness: Callable[[list[Individual]], Sequence[float]], seeds: Sequence[Individual], cfg: SearchConfig,
           bound: float, state_path: str | pathlib.Path | None = None, desc: str = "LongRoPE search",
           progress: bool = True, meta: dict | None = None) -> tuple[Individual, float, list[dict]]:
    """Minimises `fitness` (lower is better, e.g. perplexity) over individuals.

    Args:
      fitness: scores a list of individuals.
      seeds: starting individuals (PI / NTK / YaRN factors, or the best shared vector tiled per layer), each
        with an n̂ of `cfg.n_hat_choices`.
      cfg: the search's hyperparameters.
      bound: the upper limit of every λ_i.
      state_path: JSON saved after every generation (population, fitness, history, RNG state, the digests of
        every individual evaluated, SEARCH_VERSION); a search whose state exists resumes from it.
      meta: what the search is for (run, target length, bound, settings), saved with the state; resuming
        a state saved with other values is a ValueError naming them.

    Returns:
      (best individual, its fitness, history: one {generation, best, mean, evaluated} per generation, where
      `evaluated` counts the individuals scored in it and a non-finite best or mean is None, as in the
      saved state, which is strict JSON).
    """
    bad = [ind.n_hat for ind in seeds if ind.n_hat not in cfg.n_hat_choices]
    if bad:
        raise ValueError(f"seeds with n̂ = {bad} outside SearchConfig.n_hat_choices={tuple(cfg.n_hat_choices)}: give "
                         "the seeds an n̂ of the choices")
    state_path = pathlib.Path(state_path) if state_path else None
    if state_path and state_path.exists():
        state = _saved_state(state_path, meta)
        population = [Individual.from_json(d) for d in state["population"]]
        scores = [math.inf if v is None else v for v in state["scores"]]  # (_save writes a lost individual's as null)
        evaluated = set(state["evaluated"])
        history = state["history"]
        rng = np.random.default_rng()
        rng.bit_generator.state = state["rng"]
        start = state["generation"] + 1
    else:
        rng = np.random.default_rng(cfg.seed)
        population = initial_population(seeds, cfg, bound, rng)
        scores = list(map(float, fitness(population)))
        evaluated = {ind.digest() for ind in population}
        history = [_history_row(0, scores, len(population))]
        start = 1
        _save(state_path, population, scores, history, rng, 0, meta, evaluated)
    bar = tqdm(range(start, cfg.generations + 1), initial=start - 1, total=cfg.generations, desc=desc,
               disable=not progress or None, dynamic_ncols=True)
    for generation in bar:
        order = np.argsort(scores, kind="stable")
        parents = [population[i] for i in order[: cfg.parents]]
        parent_scores = [scores[i] for i in order[: cfg.parents]]
        seen = set(evaluated)  # every individual evaluated so far, parents included
        children: list[Individual] = []
        tries = 0
        while len(children) < cfg.mutations and tries < 100 * max(cfg.mutations, 1):
            tries += 1
            child = mutate(parents[rng.integers(len(parents))], rng, cfg, bound)
            if child.digest() not in seen:
                seen.add(child.digest())
                children.append(child)
        tries = 0
        target = cfg.mutations + cfg.crossovers
        while len(children) < target and tries < 100 * max(cfg.crossovers, 1) and len(parents) > 1:
            tries += 1
            i, j = rng.choice(len(parents), size=2, replace=False)
            child = crossover(parents[i], parents[j], rng)
            if child is not None and child.digest() not in seen:
                seen.add(child.digest())
                children.append(child)
        child_scores = list(map(float, fitness(children))) if children else []
        evaluated |= {ind.digest() for ind in children}
        population, scores = parents + children, parent_scores + child_scores
        history.append(_history_row(generation, scores, len(children)))
        bar.set_postfix(best=f"{min(scores):.4f}")
        _save(state_path, population, scores, history, rng, generation, meta, evaluated)
    bar.close()
    best = int(np.argmin(scores))
    return population[best], scores[best], history


_META_DEFAULTS = {"per_layer": False, "hf_model": False, "text": None, "search_version": 1}


def _versioned(meta: dict | None) -> dict:
    return {**(meta or {}), "search_version": SEARCH_VERSION}


def _saved_state(state_path: pathlib.Path, meta: dict | None) -> dict:
    """The search state saved at `state_path`, refused (ValueError naming each setting) when its meta differs from
    `meta` in any of `meta`'s keys."""
    try:
        state = json.loads(state_path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"search state {state_path} is not valid JSON ({e}); remove it to restart that "
                         "stage") from None
    saved = {**_META_DEFAULTS, **state.get("meta", {})}  # a state saved before a key was recorded had its default
    differ = {k: (saved.get(k), v) for k, v in _versioned(meta).items() if saved.get(k) != v}
    if "search_version" in differ:
        raise ValueError(f"{state_path} was saved by search version {saved['search_version']} "
                         f"(posenc.longrope.SEARCH_VERSION is {SEARCH_VERSION}: its children are drawn otherwise); "
                         "remove it to restart that stage")
    if differ:
        raise ValueError(f"{state_path.parent} holds another search ({state_path.name}): "
                         + "; ".join(f"{k}={a!r} there, {b!r} now" for k, (a, b) in differ.items())
                         + ". Use another --out, or the same settings to resume it.")
    return state


def saved_versions(out: str | pathlib.Path) -> dict[str, int | None]:
    """The search version of each search file in the folder `out` (a `search_run` --out): its stage states
    (`stage*.json`, meta.search_version) and its result (`longrope.json`, search_version); 1 where none is
    recorded (as `_META_DEFAULTS`), None for a file that is not a JSON object. Those differing from
    `SEARCH_VERSION` are what `search_run` refuses to resume (a stage) or what it would overwrite (the result)."""
    out = pathlib.Path(out)
    versions = {}
    for path in sorted(out.glob("stage*.json")) + [out / "longrope.json"]:
        if not path.is_file():
            continue
        try:
            d = json.loads(path.read_text())
        except json.JSONDecodeError:
            d = None
        if not isinstance(d, dict):
            versions[path.name] = None
            continue
        record = d if path.name == "longrope.json" else d.get("meta") or {}  # a stage state keeps it in its meta
        versions[path.name] = record.get("search_version", 1) if isinstance(record, dict) else None
    return versions


def _finite(x: float) -> float | None:
    """`x`, or None for a non-finite score (an individual whose NLLs were not finite): JSON has no Infinity."""
    return x if math.isfinite(x) else None


def _history_row(generation: int, scores: list[float], evaluated: int) -> dict:
    """A generation's line of the search history (as saved: a non-finite best or mean is null)."""
    return {"generation": generation, "best": _finite(min(scores)), "mean": _finite(float(np.mean(scores))),
            "evaluated": evaluated}


def _save(path, population, scores, history, rng, generation, meta, evaluated):
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps({"generation": generation, "population": [p.to_json() for p in population],
                                   "scores": [_finite(v) for v in scores], "history": history,
                                   "rng": rng.bit_generator.state, "meta": _versioned(meta),
                                   "evaluated": sorted(evaluated)}, allow_nan=False))


def longrope_attention_factor(factor: float, original_max_len: int) -> float:
    return 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original_max_len))


def _check_num_bytes(num_bytes: int | None, target_len: int, orig: int, available: int) -> None:
    """Raises a ValueError naming `num_bytes` (--num_bytes) unless it is None or a positive integer that both
    stages' windows tile (a multiple of `target_len` and of the original length `orig`) and the validation split
    (`available` bytes, one more than the targets) holds; with None, each stage's default of 4 windows must fit."""
    lcm = math.lcm(target_len, orig)
    if num_bytes is None:
        need = 4 * target_len
        if need + 1 > available:
            raise ValueError(f"the validation split has {available} bytes: too few for the default num_bytes of 4 "
                             f"windows of target_len={target_len} (+1); give num_bytes (--num_bytes) a multiple of "
                             f"{lcm} below {available}")
        return
    if isinstance(num_bytes, bool) or not isinstance(num_bytes, (int, np.integer)) or num_bytes <= 0:
        raise ValueError(f"num_bytes (--num_bytes) must be a positive integer (or unset for 4 windows of each "
                         f"length), got {num_bytes!r}")
    if num_bytes % target_len or num_bytes % orig:
        raise ValueError(f"num_bytes={num_bytes} (--num_bytes) must be a multiple of both the target length "
                         f"{target_len} (stage 1's windows) and the original length {orig} (stage 2's), i.e. of "
                         f"{lcm}")
    if num_bytes + 1 > available:
        raise ValueError(f"num_bytes={num_bytes} (--num_bytes) is more than the validation split holds: {available} "
                         f"bytes, so at most {(available - 1) // lcm * lcm} (a multiple of {lcm}: of the target "
                         f"length {target_len} and the original length {orig})")


def search_run(workdir: str, target_len: int, cfg: SearchConfig, *, per_layer: bool = False, out: str | None = None,
               num_bytes: int | None = None, short_generations: int | None = None,
               progress: bool = True, hf_model: bool = False, text: str | None = None) -> dict:
    """Both stages of LongRoPE on a trained RoPE run; returns (and writes to `out`) the scaling JSON.

    Stage 1 searches long factors (and n̂) for perplexity at `target_len`; with `per_layer`, a second
    search starts from the best shared vector tiled over the layers. Stage 2 searches short factors
    (no n̂: n̂ applies with the long factors only, as in microsoft/LongRoPE, where only the long search has a
    start-token count, evolution/dim_mono_n/dim_mono_n.py) that restore perplexity at the original length.
    Fitness uses the validation split: `num_bytes` of it per evaluation at both lengths (default 4 windows of
    each), checked before any stage runs. With `hf_model`, `workdir` is a Hugging Face checkpoint directory,
    searched on the validation split of the corpus `text` in its own tokens (lengths and `num_bytes` in tokens;
    perplexity per token).

    The search starts from the unscaled frequencies θ_i (its seeds are PI, NTK and YaRN of them, and the model
    is scored with θ_i / λ_i alone), so a run trained or fine-tuned with a RoPE scaling of its own
    (model.rope.scaling.kind other than 'none'; a checkpoint's rope_scaling or rope_parameters) is refused:
    the factors would replace the frequencies it was trained with.

    Raises:
      ValueError: a run with a RoPE scaling of its own (naming the field and its kind); `target_len` not above
        the run's original length; `num_bytes` not a positive multiple of both lengths, or more than the
        validation split holds; a saved stage of another search in `out`.
    """
    from posenc import data  # noqa: PLC0415
    from posenc.evaluate import Evaluator, hf_run, load_run, run_stream  # noqa: PLC0415

    run = hf_run(workdir, text) if hf_model else load_run(workdir)
    cfg_model = run.cfg
    if not cfg_model.encoding.takes_rope_scaling:
        raise ValueError(f"LongRoPE needs a run whose encoding takes a RoPE scaling; {workdir!r} has "
                         f"posenc={cfg_model.posenc!r}")
    own = cfg_model.rope_scaling.kind
    if own != "none":
        field = ("the rope_scaling (rope_parameters) of its config.json: kind" if hf_model
                 else "config.model.rope.scaling.kind")
        raise ValueError("LongRoPE searches rescale factors λ of the unscaled RoPE frequencies (θ_i → θ_i / λ_i) "
                         f"and applies them in place of a run's own scaling; {workdir!r} was trained with a RoPE "
                         f"scaling ({field}={own!r}), whose frequencies the searched factors would replace. Search a "
                         "run trained without one (kind 'none')")
    orig = run.base_len
    if target_len <= orig:
        raise ValueError(f"target_len={target_len} must exceed the run's original length {orig}")
    s = target_len / orig
    search_split = run_stream(run, "validation")[0]  # never the test split
    _check_num_bytes(num_bytes, target_len, orig, len(search_split))  # before any stage (and any folder)
    out_dir = pathlib.Path(out or pathlib.Path(workdir) / f"longrope_{target_len}").expanduser()
    out_dir.mkdir(parents=True, exist_ok=True)
    evaluator = Evaluator(run)
    af = longrope_attention_factor(s, orig)

    def make_fitness(length: int):
        nb = num_bytes or 4 * length
        x, y = data.eval_windows(search_split, length=length, num_bytes=nb)

        def fitness(population: list[Individual]) -> list[float]:
            scores = []
            for ind in population:
                factors = ind.factors
                sc = RopeScaling("longrope", s, original_max_len=orig, short_factor=np.ones_like(factors),
                                 long_factor=factors, attention_factor=af,
                                 unscaled_positions=ind.n_hat if length > orig else 0)
                if length <= orig:  # stage 2: these factors act as the short ones
                    sc = dataclasses.replace(sc, short_factor=sc.long_factor, long_factor=sc.short_factor)
                try:
                    scores.append(float(np.exp(evaluator.nll(x, y, sc).mean())))
                except FloatingPointError:  # non-finite NLLs: this individual loses, the search goes on
                    scores.append(math.inf)
            return scores

        return fitness

    bound = cfg.factor_bound * s
    meta = {"run": str(pathlib.Path(workdir).expanduser().resolve()), "step": run.step, "target_len": target_len,
            "num_bytes": num_bytes, "per_layer": per_layer, "hf_model": hf_model, "text": text,
            # and every search setting but the generations, which a rerun may extend
            **{k: v for k, v in json.loads(json.dumps(dataclasses.asdict(cfg))).items() if k != "generations"}}
    # stage 1's shared search is the same with or without `per_layer` (a per-layer search may resume a shared
    # one's); the per-layer stage and stage 2, whose factors take its shape, record it
    shared_meta = {k: v for k, v in meta.items() if k != "per_layer"}
    stage_meta = {"stage1_shared.json": shared_meta, "stage1_per_layer.json": meta, "stage2_short.json": meta}
    for name, m in stage_meta.items():  # every saved stage checked before any is run
        if (out_dir / name).exists():
            _saved_state(out_dir / name, m)
    long_fitness, short_fitness = make_fitness(target_len), make_fitness(orig)  # both stages' windows, first
    seed_n_hat = min(cfg.n_hat_choices)  # the smallest choice: 0 by default (PI, NTK and YaRN scale every position)
    seeds = [Individual(f, seed_n_hat)
             for f in seed_factors(cfg_model.rotary_dim, cfg_model.rope_base, s, orig).values()]
    best, best_ppl, history = search(long_fitness, seeds, cfg, bound,
                                     out_dir / "stage1_shared.json", "stage 1 (shared)", progress, shared_meta)
    result = {"target_len": target_len, "factor": s, "original_max_len": orig, "attention_factor": af,
              "bytes_per_evaluation": {str(n): num_bytes or 4 * n for n in (target_len, orig)},
              "stage1_shared": {"ppl": _finite(best_ppl), "history": history}}
    if per_layer:
        tiled = Individual(np.tile(best.factors, (cfg_model.num_layers, 1)), best.n_hat)
        layer_seeds = [tiled] + [Individual(np.tile(f.factors, (cfg_model.num_layers, 1)), f.n_hat) for f in seeds]
        best_l, best_l_ppl, history_l = search(long_fitness, layer_seeds, cfg, bound,
                                               out_dir / "stage1_per_layer.json", "stage 1 (per layer)", progress,
                                               meta)
        result["stage1_per_layer"] = {"ppl": _finite(best_l_ppl), "history": history_l}
        # elitism and the tiled shared vector in its first population: never worse on the search split
        best, best_ppl = best_l, best_l_ppl
    short_cfg = dataclasses.replace(cfg, generations=short_generations or cfg.generations, n_hat_choices=(0,))
    short_seeds = [Individual(np.ones_like(best.factors), 0)]
    short_best, short_ppl, short_history = search(short_fitness, short_seeds, short_cfg,
                                                  max(1.0, cfg.factor_bound), out_dir / "stage2_short.json",
                                                  "stage 2 (short)", progress, meta)
    result["stage2_short"] = {"ppl": _finite(short_ppl), "history": short_history}
    stages = [result["stage1_shared"], result.get("stage1_per_layer"), result["stage2_short"]]
    counts = [h.get("evaluated") for st in stages if st for h in st["history"]]
    if None not in counts:  # (a search resumed from a state saved before the count was kept has none)
        result["evaluations"] = sum(counts)  # every stage's fitness evaluations on validation
    result.update(search_version=SEARCH_VERSION, short_factor=short_best.factors.tolist(),
                  long_factor=best.factors.tolist(),
                  unscaled_positions=int(best.n_hat), per_layer=best.factors.ndim == 2, search_split="validation")
    write_atomic(out_dir / "longrope.json", json.dumps(result, indent=1, allow_nan=False))
    return result


def read_factors(path: str | pathlib.Path, what: str = "--longrope") -> dict:
    """The JSON written by `search_run` (`longrope.json`), checked for the keys a scaling needs and for its
    search version.

    A file records the `search_version` that wrote it (none: version 1, as `_META_DEFAULTS`). One written before
    `N_HAT_SINCE_VERSION` with `unscaled_positions` > 0 is refused: its n̂ was searched when n̂ also applied at
    lengths <= original_max_len and its positions took the attention factor, so it would be read under another
    convention than it was searched under. One with no n̂ (unscaled_positions 0) reads the same under both and
    is accepted (its factors were searched by the older draws, but mean what they meant). A file of a later
    version than `SEARCH_VERSION` is refused (this code does not know its conventions).

    Raises:
      ValueError: naming `what` and the path, when the file is missing, not JSON, lacks a key, or was written by
        a search version it cannot be read under (naming the version and saying to rerun the search).
    """
    p = pathlib.Path(path).expanduser()
    if not p.is_file():
        raise ValueError(f"{what}={str(path)!r} does not exist (scripts/search_longrope.py writes <out>/longrope.json)")
    try:
        d = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{what}={str(path)!r} is not valid JSON ({e}); is it truncated? Rerun "
                         "scripts/search_longrope.py to rewrite it") from None
    missing = [k for k in ("short_factor", "long_factor") if k not in d] if isinstance(d, dict) else ["a JSON object"]
    if missing:
        raise ValueError(f"{what}={str(path)!r} has no {', '.join(map(repr, missing))} "
                         "(expected the longrope.json of scripts/search_longrope.py)")
    version, n_hat = d.get("search_version", 1), d.get("unscaled_positions", 0)
    if not _is_count(version) or version < 1:
        raise ValueError(f"{what}={str(path)!r} has search_version={version!r}: expected a positive integer "
                         f"(posenc.longrope.SEARCH_VERSION is {SEARCH_VERSION})")
    if version > SEARCH_VERSION:
        raise ValueError(f"{what}={str(path)!r} was written by LongRoPE search version {version}, later than this "
                         f"code's (posenc.longrope.SEARCH_VERSION = {SEARCH_VERSION}): read it with the code that "
                         "wrote it, or rerun scripts/search_longrope.py")
    if version < N_HAT_SINCE_VERSION and n_hat:
        raise ValueError(f"{what}={str(path)!r} was written by LongRoPE search version {version} with "
                         f"unscaled_positions={n_hat}: its n̂ was searched when n̂ applied at every length and its "
                         "positions took the attention factor, and since version "
                         f"{N_HAT_SINCE_VERSION} it applies with the long factors only, without it. Rerun "
                         "scripts/search_longrope.py (into a fresh --out) to search it again")
    return d


def scaling_from_json(path: str | pathlib.Path, what: str = "--longrope") -> RopeScaling:
    """The `longrope` RopeScaling saved by `search_run`."""
    d = read_factors(path, what)
    for key in ("factor", "original_max_len"):
        if key not in d:
            raise ValueError(f"{what}={str(path)!r} has no {key!r}")
    return RopeScaling("longrope", d["factor"], original_max_len=d["original_max_len"], short_factor=d["short_factor"],
                       long_factor=d["long_factor"], attention_factor=d.get("attention_factor"),
                       unscaled_positions=int(d.get("unscaled_positions", 0)))


def scaling_for_run(path: str | pathlib.Path, *, rotary_dim: int, num_layers: int, base_len: int, run: str,
                    what: str = "--longrope") -> RopeScaling:
    """`scaling_from_json(path)`, checked to fit the run it is applied to: factors `[rotary_dim / 2]`, or
    per layer `[num_layers, rotary_dim / 2]`, and `original_max_len` equal to the run's original length
    `base_len` L0.

    A per-layer file of another depth would otherwise run silently: under `jax.jit` the layer index into the
    `[rows, r]` frequencies is clamped, so a deeper run's extra layers take the last row and a shallower run
    ignores the extra rows. A file of another L0 would switch to its long factors at its own L0 and hold λ
    searched for s = target / its L0.

    Raises:
      ValueError: naming `what`, the file and `run`, for a shape or original length the run does not have.
    """
    sc = scaling_from_json(path, what)
    shape, r = np.shape(sc.long_factor), rotary_dim // 2
    if not factors_fit(sc.long_factor, rotary_dim, num_layers):
        raise ValueError(f"{what}={str(path)!r} holds LongRoPE factors of shape {shape}, which do not fit run {run!r}: "
                         f"it takes [{r}] (rotary_dim // 2) or, per layer, [{num_layers}, {r}] (num_layers, "
                         "rotary_dim // 2). Search the run's own factors (scripts/search_longrope.py)")
    if sc.original_max_len != base_len:
        raise ValueError(f"{what}={str(path)!r} was searched for original length {sc.original_max_len} (its "
                         f"factors rescale for s = {sc.factor:g} and switch to the long ones past "
                         f"{sc.original_max_len}), but run {run!r} was trained at {base_len}. Search the run's own "
                         "factors (scripts/search_longrope.py)")
    return sc
