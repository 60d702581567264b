"""LongRoPE search: constraints, determinism, progress on a toy objective, reload, and no test-split reads."""

import dataclasses
import functools
import json
import math
import shutil

import numpy as np
import pytest

import posenc
from posenc import data, longrope, train, tuning
from posenc.evaluate import Evaluator
from posenc.longrope import Individual, SearchConfig
from posenc.rope_scaling import RopeScaling

BOUND = 5.0
SMALL = SearchConfig(population=12, generations=6, mutations=4, crossovers=4, parents=6, seed=0)


def random_individual(rng, r=8, layers=None):
    shape = (r,) if layers is None else (layers, r)
    return Individual(longrope.repair(rng.uniform(0.5, 7, shape), BOUND), int(rng.choice(longrope.N_HAT_CHOICES)))


@pytest.mark.parametrize("layers", [None, 3])
def test_constraints_hold_after_mutation_and_crossover(layers):
    rng = np.random.default_rng(0)
    crossed = 0
    for _ in range(200):
        a, b = random_individual(rng, layers=layers), random_individual(rng, layers=layers)
        for child in (longrope.mutate(a, rng, SMALL, BOUND), longrope.crossover(a, b, rng)):
            if child is None:  # a crossover whose every try was not monotone: skipped
                continue
            assert longrope.satisfies(child, BOUND, longrope.N_HAT_CHOICES)
            assert child.factors.shape == a.factors.shape
        crossed += longrope.crossover(a, a, rng) is not None  # a parent with itself: always monotone
    assert crossed == 200


def interval_violations(parent, child, bound):
    """The pairs a mutation changed outside [child λ_{i−1}, parent λ_{i+1}] (1 and `bound` at the ends), per row:
    the interval microsoft/LongRoPE's `mutate` draws a chosen pair in, pair after pair."""
    p2, c2 = np.atleast_2d(parent), np.atleast_2d(child)
    lo = np.concatenate([np.ones((len(c2), 1)), c2[:, :-1]], axis=1)
    hi = np.concatenate([p2[:, 1:], np.full((len(p2), 1), bound)], axis=1)
    changed = c2 != p2
    return int(np.sum(changed & ((c2 < lo) | (c2 > hi))))


@pytest.mark.parametrize("layers", [None, 3])
def test_mutation_changes_only_drawn_pairs_inside_their_neighbours_and_is_unbiased(layers):
    """A mutation redraws each chosen λ_i inside its neighbours' interval (microsoft/LongRoPE,
    evolution/algorithms/dim_mono.py `mutate`), within each layer's vector: no pair it did not draw moves (a
    projection by cumulative maximum dragged every later pair up with a raised one), and λ does not drift up
    (from PI's seed it rose by 7% per pair and mutation, 10.8 of 16 pairs changing for 4.8 drawn)."""
    rng = np.random.default_rng(1)
    cfg = SearchConfig()
    seeds = {k: longrope.repair(f, BOUND) for k, f in longrope.seed_factors(32, 1e4, 4.0, 256).items()}
    if layers is not None:  # a per-layer individual: one seed per layer, each row searched within itself
        seeds = {"per_layer": np.stack([seeds["linear"], seeds["ntk"], seeds["yarn"]])}
    for name, f in seeds.items():
        logs, changed = [], []
        for _ in range(2000):
            c = longrope.mutate(Individual(f, 0), rng, cfg, BOUND).factors
            assert longrope.satisfies(Individual(c, 0), BOUND, longrope.N_HAT_CHOICES)
            assert interval_violations(f, c, BOUND) == 0, name
            logs.append(np.log(c / f))
            changed.append(np.sum(c != f) / np.atleast_2d(f).shape[0])
        assert abs(np.mean(logs)) < 0.005, name
        assert np.mean(changed) <= cfg.mutation_prob * 16 * 1.05, name  # at most the pairs drawn (0.3 · 16)
        raised, lowered = np.mean(np.asarray(logs) > 0), np.mean(np.asarray(logs) < 0)
        assert raised < 2 * lowered + 0.01 and lowered < 2 * raised + 0.01, (name, raised, lowered)


def test_crossover_rejects_a_non_monotone_child_instead_of_projecting_it():
    """Each λ_i of a crossover child is one of its parents' λ_i, the child non-decreasing; a mix that is not is
    drawn again, and after `CROSSOVER_TRIES` the pair is skipped (None), as microsoft/LongRoPE's `crossover`
    (evolution/algorithms/dim_mono.py) rejects it: a cumulative maximum raised later pairs to values neither
    parent has there."""
    rng = np.random.default_rng(0)
    a = Individual(np.array([1.0, 4.0, 5.0]), 0)
    b = Individual(np.array([2.0, 2.0, 3.0]), 4)
    for _ in range(300):
        child = longrope.crossover(a, b, rng)
        assert child is not None  # both parents themselves are among the mixes: 20 tries find a monotone one
        assert np.all(np.diff(child.factors) >= 0)
        assert all(c in (x, y) for c, x, y in zip(child.factors, a.factors, b.factors)), child.factors
        assert child.n_hat in (0, 4)
    # 81 of the 2^16 mixes of these are monotone: most crossovers give up
    a = Individual(np.array([1.0] * 8 + [5.0] * 8), 0)
    b = Individual(np.full(16, 3.0), 0)
    children = [longrope.crossover(a, b, rng) for _ in range(200)]
    assert sum(c is None for c in children) > 150
    assert all(np.all(np.diff(c.factors) >= 0) for c in children if c is not None)


def test_seed_factors_are_pi_ntk_yarn():
    """The initial population's λ_i = θ_i / θ'_i (LongRoPE §3.2): PI λ_i = s; NTK-aware b' = b · s^(d/(d−2)), so
    λ_i = s^(2i/(d−2)), from 1 at i = 0 to s at i = d/2 − 1; YaRN θ'_i = θ_i / s · γ_i + θ_i · (1 − γ_i), so
    λ_i = 1 / (γ_i / s + 1 − γ_i), with the ramp γ_i = clip((i − low) / (high − low), 0, 1) between the pairs that
    turn β_fast = 32 and β_slow = 1 times in L: for d = 32, b = 10⁴, L = 256, dim(r) = 32 · ln(256 / (2π r)) /
    (2 ln 10⁴) gives low = ⌊0.42⌋ = 0 and high = ⌈6.44⌉ = 7."""
    d, s = 32, 4.0
    seeds = longrope.seed_factors(d, 10000.0, s, 256)
    i = np.arange(d // 2)
    np.testing.assert_allclose(seeds["linear"], s, rtol=1e-15)
    np.testing.assert_allclose(seeds["ntk"], s ** (2 * i / (d - 2)), rtol=1e-12)
    gamma = np.clip((i - 0) / (7 - 0), 0, 1)
    np.testing.assert_allclose(seeds["yarn"], 1 / (gamma / s + 1 - gamma), rtol=1e-12)
    assert seeds["yarn"][0] == 1.0 and np.all(seeds["yarn"][7:] == pytest.approx(s, rel=1e-12))
    for f in seeds.values():  # within the search space as they are: repair changes none of them
        np.testing.assert_array_equal(longrope.repair(f, 1.25 * s), np.clip(f, 1.0, None))


def toy_fitness(target):
    def fitness(population):
        return [float(np.sum((ind.factors - target) ** 2) + 0.01 * abs(ind.n_hat - 8)) for ind in population]

    return fitness


def test_fitness_improves_towards_a_known_optimum_and_is_deterministic(tmp_path):
    target = np.linspace(1.5, 4.0, 8)  # feasible: non-decreasing within [1, 5]
    seeds = [Individual(np.full(8, 4.0), 0), Individual(np.ones(8), 0)]
    cfg = dataclasses.replace(SMALL, generations=30)
    scored = []
    fitness = toy_fitness(target)
    best, score, history = longrope.search(lambda pop: scored.append(len(pop)) or fitness(pop), seeds, cfg, BOUND,
                                           progress=False)
    assert [h["evaluated"] for h in history] == scored  # the count the fair tuning budget copies
    assert history[-1]["best"] < 0.25 * history[0]["best"]
    assert all(h2["best"] <= h1["best"] for h1, h2 in zip(history, history[1:]))  # elitist: never worse
    assert longrope.satisfies(best, BOUND, longrope.N_HAT_CHOICES)
    again = longrope.search(toy_fitness(target), seeds, cfg, BOUND, progress=False)
    np.testing.assert_array_equal(again[0].factors, best.factors)
    assert again[1] == score
    other = longrope.search(toy_fitness(target), seeds, dataclasses.replace(cfg, seed=1), BOUND, progress=False)
    assert not np.array_equal(other[0].factors, best.factors)


def test_interrupted_search_resumes_to_the_same_result(tmp_path):
    target = np.linspace(1.5, 4.0, 8)
    seeds = [Individual(np.full(8, 4.0), 0)]
    full = longrope.search(toy_fitness(target), seeds, SMALL, BOUND, tmp_path / "a.json", progress=False)
    longrope.search(toy_fitness(target), seeds, dataclasses.replace(SMALL, generations=3), BOUND, tmp_path / "b.json",
                    progress=False)  # "interrupted" after 3 generations
    resumed = longrope.search(toy_fitness(target), seeds, SMALL, BOUND, tmp_path / "b.json", progress=False)
    np.testing.assert_array_equal(resumed[0].factors, full[0].factors)
    assert resumed[2] == full[2]


def test_bad_search_config():
    with pytest.raises(ValueError, match="parents"):
        SearchConfig(population=4, parents=8)
    with pytest.raises(ValueError, match="mutation_prob"):
        SearchConfig(mutation_prob=0.0)
    for scale in (0, 0.0, -0.1, math.nan, math.inf, "0.1"):
        with pytest.raises(ValueError, match=r"SearchConfig.mutation_scale must be a finite number > 0"):
            SearchConfig(mutation_scale=scale)
    for choices in ((), [], (-4,), (0, 4.0), (True,), "48", None, 4):
        with pytest.raises(ValueError, match=r"SearchConfig.n_hat_choices must be a non-empty sequence of integers "
                                             r">= 0 .*default \(0, 1, 2, 4"):
            SearchConfig(n_hat_choices=choices)
    SearchConfig(n_hat_choices=(8,), mutation_scale=0.5)  # valid


def test_seeds_take_an_n_hat_of_the_choices():
    """A seed's n̂ outside n_hat_choices is refused (the best of a search could be one); search_run gives its seeds
    the smallest choice."""
    seeds = [Individual(np.full(8, 4.0), 0)]
    with pytest.raises(ValueError, match=r"seeds with n̂ = \[0\] outside SearchConfig.n_hat_choices=\(8,\)"):
        longrope.search(toy_fitness(np.full(8, 4.0)), seeds, SearchConfig(n_hat_choices=(8,)), BOUND, progress=False)
    best, _, _ = longrope.search(toy_fitness(np.full(8, 4.0)), [Individual(np.full(8, 4.0), 8)],
                                 dataclasses.replace(SMALL, n_hat_choices=(8, 16)), BOUND, progress=False)
    assert best.n_hat in (8, 16)


@pytest.fixture(scope="module")
def rope_run(tmp_path_factory, cache_dir):
    root = tmp_path_factory.mktemp("lr")
    config = train.load_config_file("configs/default.py", "tiny")
    config.data.cache_dir = cache_dir
    config.train_steps = 4
    train.train_and_evaluate(config, str(root / "run"))
    return str(root / "run")


def test_search_run_never_reads_the_test_split_and_reloads(rope_run, tmp_path, monkeypatch):
    real = data.load_corpus

    class NoTest:
        def __init__(self, corpus):
            self.validation, self.train, self.source = corpus.validation, corpus.train, corpus.source
            self.sha256 = corpus.sha256

        @property
        def test(self):
            raise AssertionError("the LongRoPE search read the test split")

        def split(self, name):
            return getattr(self, name)

    monkeypatch.setattr(data, "load_corpus", lambda *a, **k: NoTest(real(*a, **k)))
    cfg = SearchConfig(population=4, generations=2, mutations=2, crossovers=2, parents=2)
    calls = []
    real_nll = Evaluator.nll
    monkeypatch.setattr(Evaluator, "nll", lambda self, *a, **k: calls.append(np.size(a[0])) or real_nll(self, *a, **k))
    result = longrope.search_run(rope_run, 64, cfg, per_layer=True, out=str(tmp_path), short_generations=1,
                                 progress=False)
    assert result["evaluations"] == len(calls) == tuning.longrope_evaluations(tmp_path / "longrope.json")
    # the bytes each evaluation scored, at the target (stage 1) and the training length (stage 2), as recorded
    assert set(calls) == {tuning.longrope_bytes(tmp_path / "longrope.json", n) for n in (64, 32)} == {256, 128}
    assert result["per_layer"] is True and result["search_split"] == "validation"
    assert result["search_version"] == longrope.SEARCH_VERSION
    saved = json.loads((tmp_path / "longrope.json").read_text())
    sc = longrope.scaling_from_json(tmp_path / "longrope.json")
    assert sc.kind == "longrope" and sc.factor == 2.0 and sc.original_max_len == 32
    long = np.asarray(saved["long_factor"])
    inv = posenc.rope_frequencies(16, scaling=sc, seq_len=64)[0]
    np.testing.assert_allclose(inv, posenc.rope_frequencies(16)[0] / long, rtol=1e-12)  # same frequencies
    assert np.asarray(saved["short_factor"]).shape == long.shape
    for stage in ("stage1_shared.json", "stage1_per_layer.json", "stage2_short.json"):
        assert (tmp_path / stage).exists()
    monkeypatch.undo()
    from posenc import evaluate as ev  # noqa: PLC0415

    rows = ev.evaluate([rope_run], [32, 64], ["none", "longrope"], num_bytes=128, progress=False,
                       longrope_file=str(tmp_path / "longrope.json"))["rows"]
    by = {(r["scaling"], r["length"], r["protocol"]): r for r in rows}
    assert by[("longrope", 64, "nonoverlap")]["status"] == "ok"
    check_stage_1(rope_run, result, sc)
    check_stage_2(rope_run, tmp_path, result, sc)


def check_stage_1(rope_run, result, sc):
    """The saved long factors, n̂ and attention factor reproduce the fitness stage 1 recorded for them (the
    per-layer search's best, this search's result): the perplexity exp(mean NLL) at the target length 64 on its
    windows (4 · 64 validation bytes), under the scaling as evaluation reads it from longrope.json."""
    from posenc.evaluate import load_run, run_stream  # noqa: PLC0415

    run = load_run(rope_run)
    x64, y64 = data.eval_windows(run_stream(run, "validation")[0], length=64, num_bytes=4 * 64)
    assert sc.attention_factor == pytest.approx(math.sqrt(1 + math.log(2.0) / math.log(32)), rel=1e-15)
    assert sc.unscaled_positions == result["unscaled_positions"]
    ppl = np.exp(Evaluator(run).nll(x64, y64, sc).mean())
    assert ppl == pytest.approx(result["stage1_per_layer"]["ppl"], rel=1e-6)
    assert result["stage1_per_layer"]["ppl"] <= result["stage1_shared"]["ppl"]  # seeded with the shared best


def check_stage_2(rope_run, out, result, sc):
    """Stage 2 searched the short factors, and they are what applies at L = 32: its individuals scored
    differently (a stage 2 that scored every one with the same factors would not); the saved scaling reproduces
    its recorded perplexity on its windows (4 · 32 validation bytes), where n̂ plays no part; and swapping the long
    factors in at L changes the NLL (a switch to the long factors at L would not); and its result is no worse
    there than its seed, the unscaled θ (short factors all ones)."""
    from posenc.evaluate import load_run, run_stream  # noqa: PLC0415

    scores = strict_json(out / "stage2_short.json")["scores"]
    assert len(set(scores)) > 1, scores  # not a constant fitness
    run = load_run(rope_run)
    x32, y32 = data.eval_windows(run_stream(run, "validation")[0], length=32, num_bytes=4 * 32)
    ev = Evaluator(run)
    nll = ev.nll(x32, y32, sc)
    assert np.exp(nll.mean()) == pytest.approx(result["stage2_short"]["ppl"], rel=1e-6)
    for n_hat in (0, 8):
        np.testing.assert_array_equal(nll, ev.nll(x32, y32, dataclasses.replace(sc, unscaled_positions=n_hat)))
    swapped = dataclasses.replace(sc, short_factor=sc.long_factor)
    assert not np.allclose(nll, ev.nll(x32, y32, swapped), rtol=1e-6, atol=0)
    # stage 2 restores the original length from its seed, all ones (θ itself): never worse than it (elitism)
    ones = dataclasses.replace(sc, short_factor=np.ones_like(sc.short_factor))
    assert result["stage2_short"]["ppl"] <= np.exp(ev.nll(x32, y32, ones).mean()) * (1 + 1e-6)


def test_num_bytes_checked_for_both_stages_before_any_search(rope_run, tmp_path, monkeypatch):
    """`num_bytes` must tile stage 1's windows (target_len) and stage 2's (the original length L = 32) and fit the
    validation split: checked before any stage runs and before --out is made, so no search is lost to it."""
    cfg = SearchConfig(population=2, generations=1, mutations=1, crossovers=1, parents=2)
    monkeypatch.setattr(Evaluator, "nll", lambda *a, **k: pytest.fail("a fitness was evaluated"))
    out = tmp_path / "out"
    for num_bytes, match in (
            (144, r"num_bytes=144 \(--num_bytes\) must be a multiple of both the target length 48 .* original "
                  r"length 32 .* of 96"),
            (96 * 10**7, r"num_bytes=960000000 \(--num_bytes\) is more than the validation split holds: \d+ bytes, so "
                    r"at most \d+ \(a multiple of 96"),
            (0, r"num_bytes \(--num_bytes\) must be a positive integer"),
            (96.0, r"num_bytes \(--num_bytes\) must be a positive integer")):
        with pytest.raises(ValueError, match=match):
            longrope.search_run(rope_run, 48, cfg, out=str(out), num_bytes=num_bytes, progress=False)
        assert not out.exists()


def test_search_run_seeds_take_the_smallest_n_hat_choice(rope_run, tmp_path, monkeypatch):
    seen = []

    def search(fitness, seeds, cfg, *a, **k):
        seen.extend(ind.n_hat for ind in seeds)
        raise KeyboardInterrupt  # stop before any evaluation

    monkeypatch.setattr(longrope, "search", search)
    with pytest.raises(KeyboardInterrupt):
        longrope.search_run(rope_run, 64, dataclasses.replace(SMALL, n_hat_choices=(16, 2)), out=str(tmp_path),
                            progress=False)
    assert seen == [2, 2, 2]


def test_an_out_under_the_home_directory_is_written_there(rope_run, tmp_path, monkeypatch):
    """--out=~/… reaches search_run as written (the shell expands no `~` after `--out=`): the search's folder is
    made under $HOME, not as a directory named `~` in the working directory."""
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir(), cwd.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)

    def search(*a, **k):
        raise KeyboardInterrupt  # stop once the folder is made, before any evaluation

    monkeypatch.setattr(longrope, "search", search)
    with pytest.raises(KeyboardInterrupt):
        longrope.search_run(rope_run, 64, SMALL, out="~/lr", progress=False)
    assert (home / "lr").is_dir() and not (cwd / "~").exists()


@pytest.mark.parametrize("scaling", [RopeScaling("linear", 2.0, original_max_len=16),
                                     RopeScaling("yarn", 2.0, original_max_len=16),
                                     RopeScaling("linear", 1.0, original_max_len=16, dynamic=True)],
                         ids=["linear", "yarn", "dynamic_linear"])
def test_a_run_with_a_rope_scaling_of_its_own_is_refused_before_any_search(rope_run, tmp_path, monkeypatch, scaling):
    """The search scores θ_i / λ_i of the unscaled frequencies in place of the run's own scaling: a run fine-tuned
    with PI or YaRN (its model.rope.scaling) would be searched on frequencies it was not trained with, so it is
    refused, naming the field and its kind, before any fitness evaluation and before --out is made."""
    from posenc import evaluate  # noqa: PLC0415

    real = evaluate.load_run

    def scaled(workdir, name=None):
        run = real(workdir, name)
        run.cfg = dataclasses.replace(run.cfg, rope_scaling=scaling)  # as restored from a fine-tuned run's config
        return run

    monkeypatch.setattr(evaluate, "load_run", scaled)
    monkeypatch.setattr(Evaluator, "nll", lambda *a, **k: pytest.fail("a fitness was evaluated"))
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=rf"config.model.rope.scaling.kind='{scaling.kind}'\), whose frequencies the "
                                         r"searched factors would replace.*kind 'none'"):
        longrope.search_run(rope_run, 64, SMALL, out=str(out), progress=False)
    assert not out.exists()



def test_saved_factors_load_through_the_config(rope_run, tmp_path):
    """training / generation read a search result via model.rope.scaling.factors_file."""
    from posenc.config import model_config  # noqa: PLC0415

    path = tmp_path / "longrope.json"
    path.write_text(json.dumps({"factor": 2.0, "original_max_len": 32, "attention_factor": 1.1,
                                "short_factor": [1.0] * 8, "long_factor": list(np.linspace(1, 2, 8)),
                                "unscaled_positions": 4, "search_version": longrope.SEARCH_VERSION}))
    config = train.load_config_file("configs/default.py", "posenc=longrope,tiny")
    config.model.rope.scaling.factors_file = str(path)
    cfg = model_config(config)
    assert cfg.rope_scaling == longrope.scaling_from_json(path)
    assert cfg.rope_scaling.unscaled_positions == 4 and cfg.rope_scaling.attention_factor == 1.1
    config.model.rope.scaling.attention_factor = 1.3
    with pytest.raises(ValueError, match=r"attention_factor=1.3 disagrees with 1.1 in factors_file="):
        model_config(config)
    config.model.rope.scaling.attention_factor = None
    config.model.rope.scaling.factors_file = str(tmp_path / "missing.json")
    with pytest.raises(ValueError, match="factors_file=.*does not exist"):
        model_config(config)


def test_a_factors_file_that_does_not_fit_the_evaluated_run_is_refused(rope_run, tmp_path):
    """`--longrope` applied to another run than it was searched on (evaluate, generate: `scaling_for`): per-layer
    factors of another depth are refused (under jit the layer index into them is clamped, so a deeper run's extra
    layers took the last row without an error), as are factors of another rotary dimension and factors searched
    for another original length (they switch to the long factors at their own L0)."""
    from posenc import evaluate as ev  # noqa: PLC0415

    run = ev.load_run(rope_run)
    layers, r, base = run.cfg.num_layers, run.cfg.rotary_dim // 2, run.base_len
    path = tmp_path / "longrope.json"

    def write(rows, length=base):
        shape = (r,) if rows is None else (rows, r)
        path.write_text(json.dumps({"factor": 2.0, "original_max_len": length, "short_factor": np.ones(shape).tolist(),
                                    "long_factor": np.full(shape, 1.5).tolist(),
                                    "search_version": longrope.SEARCH_VERSION}))

    for rows in (None, layers):  # fits: one vector, or one per layer
        write(rows)
        sc = ev.scaling_for(run, "longrope", 2 * base, longrope_file=str(path))
        assert sc == longrope.scaling_from_json(path)
    for rows in (layers + 1, layers - 1):
        write(rows)
        with pytest.raises(ValueError, match=rf"--longrope='.*longrope.json' holds LongRoPE factors of shape "
                                             rf"\({rows}, {r}\), which do not fit run 'run': it takes \[{r}\] .* "
                                             rf"\[{layers}, {r}\]"):
            ev.scaling_for(run, "longrope", 2 * base, longrope_file=str(path))
    path.write_text(json.dumps({"factor": 2.0, "original_max_len": base, "short_factor": [1.0] * (r + 1),
                                "long_factor": [1.5] * (r + 1)}))
    with pytest.raises(ValueError, match=rf"shape \({r + 1},\), which do not fit run 'run'"):
        ev.scaling_for(run, "longrope", 2 * base, longrope_file=str(path))
    write(None, length=2 * base)
    with pytest.raises(ValueError, match=rf"was searched for original length {2 * base} .* but run 'run' was "
                                         rf"trained at {base}"):
        ev.scaling_for(run, "longrope", 4 * base, longrope_file=str(path))
    with pytest.raises(ValueError, match="original length"):  # refused before any cell is scored
        ev.check_scalings_apply([run], ["longrope"], longrope_file=str(path))


def test_a_run_reads_the_factors_it_was_trained_with_or_refuses(tmp_path, cache_dir):
    """The config names the factors file by its path: a run records the file's SHA-256, and resuming or
    evaluating it after the file changed is an error, not a run labelled the same with other factors."""
    from posenc import checkpoint  # noqa: PLC0415

    path = tmp_path / "longrope.json"
    factors = {"factor": 2.0, "original_max_len": 32, "short_factor": [1.0] * 8, "long_factor": [1.5] * 8}
    path.write_text(json.dumps(factors))
    config = train.load_config_file("configs/default.py", "posenc=longrope,tiny")
    config.model.rope.scaling.factors_file = str(path)
    config.train_steps, config.data.cache_dir = 4, str(cache_dir)
    train.train_and_evaluate(config, str(tmp_path / "run"))
    assert checkpoint.read_run_info(tmp_path / "run")["rope_factors"]["path"] == str(path)
    checkpoint.restore_params(tmp_path / "run")  # the same factors: loads
    path.write_text(json.dumps({**factors, "long_factor": [1.7] * 8}))
    with pytest.raises(ValueError, match="factors_file=.* now holds other factors than the run was trained with"):
        checkpoint.restore_params(tmp_path / "run")
    config.train_steps, config.schedule_steps = 8, 4  # going on at the final learning rate: the same run
    with pytest.raises(train.RunMismatchError, match="now holds other factors"):
        train.train_and_evaluate(config, str(tmp_path / "run"))


def test_search_rerun_into_an_out_of_another_target_refuses(rope_run, tmp_path):
    cfg = SearchConfig(population=4, generations=1, mutations=2, crossovers=2, parents=2)
    longrope.search_run(rope_run, 64, cfg, out=str(tmp_path), short_generations=1, progress=False)
    with pytest.raises(ValueError, match=r"holds another search \(stage1_shared.json\): target_len=64 there, 128 now"):
        longrope.search_run(rope_run, 128, cfg, out=str(tmp_path), short_generations=1, progress=False)
    with pytest.raises(ValueError, match="per_layer=False there, True now"):  # stage 2's factors take its shape
        longrope.search_run(rope_run, 64, cfg, per_layer=True, out=str(tmp_path), short_generations=1, progress=False)
    with pytest.raises(ValueError, match="mutation_prob=0.3 there, 0.5 now"):
        longrope.search_run(rope_run, 64, SearchConfig(population=4, generations=1, mutations=2, crossovers=2,
                                                       parents=2, mutation_prob=0.5),
                            out=str(tmp_path), short_generations=1, progress=False)
    # a per-layer search in another --out resumes the shared stage 1 copied from this one (experiments/longrope)
    layer_out = tmp_path / "per_layer"
    layer_out.mkdir()
    shutil.copy(tmp_path / "stage1_shared.json", layer_out)
    layered = longrope.search_run(rope_run, 64, cfg, per_layer=True, out=str(layer_out), short_generations=1,
                                  progress=False)
    assert layered["stage1_shared"]["history"] == json.loads((tmp_path / "longrope.json").read_text())[
        "stage1_shared"]["history"] and layered["per_layer"]
    # more generations are the same search, resumed
    longer = longrope.search_run(rope_run, 64, SearchConfig(population=4, generations=2, mutations=2, crossovers=2,
                                                            parents=2), out=str(tmp_path), short_generations=1,
                                 progress=False)
    assert [h["generation"] for h in longer["stage1_shared"]["history"]] == [0, 1, 2]


def test_an_individual_with_non_finite_scores_loses_and_the_search_goes_on(rope_run, tmp_path, monkeypatch):
    """An individual whose NLLs are not finite (`Evaluator.nll` raises) gets an infinite perplexity instead of
    ending the search (which, resumed, would draw the same individual and end again)."""
    calls, real = [], Evaluator.nll

    def nll(self, *a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise FloatingPointError("non-finite")
        return real(self, *a, **k)

    monkeypatch.setattr(Evaluator, "nll", nll)
    cfg = SearchConfig(population=4, generations=1, mutations=2, crossovers=2, parents=2)
    result = longrope.search_run(rope_run, 64, cfg, out=str(tmp_path), short_generations=1, progress=False)
    state = strict_json(tmp_path / "stage1_shared.json")
    assert result["evaluations"] == len(calls) and math.isfinite(result["stage1_shared"]["ppl"])
    assert state["history"][0]["mean"] is None  # the second of the first population scored inf
    assert strict_json(tmp_path / "longrope.json")["stage1_shared"]["history"] == state["history"]


def strict_json(path):
    """JSON as a strict parser reads it: Infinity and NaN are not JSON."""
    def refuse(name):
        raise ValueError(f"{path} holds {name}")
    return json.loads(path.read_text(), parse_constant=refuse)


def test_a_search_with_lost_individuals_saves_strict_json_and_resumes_to_the_same_result(tmp_path):
    """Individuals with an infinite fitness (non-finite NLLs) are saved as null and read back as infinite: the
    state is strict JSON and an interrupted search resumes to the uninterrupted one's result."""
    target = np.linspace(1.5, 4.0, 8)

    def fitness(population):  # every batch's first individual is lost
        return [math.inf] + list(toy_fitness(target)(population))[1:]

    seeds = [Individual(np.full(8, 4.0), 0)]
    full = longrope.search(fitness, seeds, SMALL, BOUND, tmp_path / "a.json", progress=False)
    longrope.search(fitness, seeds, dataclasses.replace(SMALL, generations=3), BOUND, tmp_path / "b.json",
                    progress=False)
    saved = strict_json(tmp_path / "b.json")
    assert None in saved["scores"] or any(h["mean"] is None for h in saved["history"])
    resumed = longrope.search(fitness, seeds, SMALL, BOUND, tmp_path / "b.json", progress=False)
    np.testing.assert_array_equal(resumed[0].factors, full[0].factors)
    assert resumed[1] == full[1] and resumed[2] == full[2] == strict_json(tmp_path / "a.json")["history"]


def test_factors_file_errors_name_the_field_and_file(tmp_path):
    from posenc.config import model_config  # noqa: PLC0415

    config = train.load_config_file("configs/default.py", "posenc=longrope,tiny")
    with pytest.raises(ValueError, match="kind='longrope' needs model.rope.scaling.factors_file"):
        model_config(config)
    truncated = tmp_path / "longrope.json"
    truncated.write_text('{"factor": 2.0, "short_factor": [1.0, 1.')
    config.model.rope.scaling.factors_file = str(truncated)
    with pytest.raises(ValueError, match=r"factors_file='.*longrope.json' is not valid JSON .*truncated"):
        model_config(config)
    with pytest.raises(ValueError, match=r"--longrope='.*longrope.json' is not valid JSON"):
        longrope.scaling_from_json(truncated)
    truncated.write_text('{"factor": 2.0}')
    with pytest.raises(ValueError, match="has no 'short_factor', 'long_factor'"):
        model_config(config)


def test_longrope_experiment_labels_dynamic_ntk_rows_by_their_recorded_slope():
    """experiments/longrope's cached rows were scored when `dynamic_ntk` meant Hugging Face's slope L / 256: its
    table names them by the factor each row recorded, and plain `dynamic_ntk` only at slope 1."""
    module = load_experiment()
    assert module.row_label("dynamic_ntk", {"factor": 4.0}) == "dynamic_ntk (Hugging Face's slope 4)"
    assert module.row_label("dynamic_ntk", {"factor": 1.0}) == module.row_label("dynamic_ntk", {"factor": None}) == "dynamic_ntk"
    assert module.row_label("yarn", {"factor": 4.0}) == "yarn"


def test_no_individual_is_evaluated_twice_in_a_search_resumed_or_not(tmp_path):
    """As the reference code's `history`: a child evaluated in any earlier generation is never drawn again, across
    an interruption too; a state saved by the earlier search version is refused, not resumed with other draws."""
    target = np.linspace(1.5, 4.0, 8)
    seeds = [Individual(np.full(8, 4.0), 0), Individual(np.ones(8), 0)]
    cfg = dataclasses.replace(SMALL, generations=40, mutation_prob=0.05)  # few changes a child: repeats are likely
    drawn = []
    fitness = toy_fitness(target)

    def recording(population):
        drawn.extend(ind.key() for ind in population)
        return fitness(population)

    longrope.search(recording, seeds, dataclasses.replace(cfg, generations=5), BOUND, tmp_path / "s.json",
                    progress=False)
    longrope.search(recording, seeds, cfg, BOUND, tmp_path / "s.json", progress=False)  # resumed
    assert len(drawn) > 200 and len(set(drawn)) == len(drawn)
    assert len(strict_json(tmp_path / "s.json")["evaluated"]) == len(drawn)
    state = strict_json(tmp_path / "s.json")
    del state["meta"]["search_version"]  # as version 1 saved it
    (tmp_path / "s.json").write_text(json.dumps(state))
    with pytest.raises(ValueError, match="saved by search version 1 .* remove it to restart that stage"):
        longrope.search(recording, seeds, dataclasses.replace(cfg, generations=41), BOUND, tmp_path / "s.json",
                        progress=False, meta={})


def test_a_factors_file_of_an_earlier_search_version_with_an_n_hat_is_refused(tmp_path):
    """A longrope.json searched before n̂ applied with the long factors only, and without the attention factor
    (SEARCH_VERSION 3), was searched under another convention than it would be read under: refused, naming its
    version and saying to rerun the search, for evaluation (--longrope) and training (factors_file). Without an
    n̂ it reads the same under both and is accepted; a file of a later version than this code's is refused."""
    from posenc.config import model_config  # noqa: PLC0415

    path = tmp_path / "longrope.json"
    factors = {"factor": 2.0, "original_max_len": 32, "short_factor": [1.0] * 8, "long_factor": [1.5] * 8}
    config = train.load_config_file("configs/default.py", "posenc=longrope,tiny")
    config.model.rope.scaling.factors_file = str(path)
    for version in (None, 1, 2):
        d = {**factors, "unscaled_positions": 4, **({} if version is None else {"search_version": version})}
        path.write_text(json.dumps(d))
        match = (rf"--longrope='.*longrope.json' was written by LongRoPE search version {version or 1} with "
                 r"unscaled_positions=4: .* Rerun scripts/search_longrope.py")
        with pytest.raises(ValueError, match=match):
            longrope.scaling_from_json(path)
        with pytest.raises(ValueError, match=r"factors_file='.*' was written by LongRoPE search version"):
            model_config(config)
        path.write_text(json.dumps({**d, "unscaled_positions": 0}))  # no n̂: the same either way
        assert longrope.scaling_from_json(path).unscaled_positions == 0
        assert model_config(config).rope_scaling.long_factor == (1.5,) * 8
    path.write_text(json.dumps({**factors, "unscaled_positions": 4, "search_version": longrope.SEARCH_VERSION}))
    assert longrope.scaling_from_json(path).unscaled_positions == 4
    path.write_text(json.dumps({**factors, "search_version": longrope.SEARCH_VERSION + 1}))
    with pytest.raises(ValueError, match=rf"search version {longrope.SEARCH_VERSION + 1}, later than this code's"):
        longrope.scaling_from_json(path)
    path.write_text(json.dumps({**factors, "search_version": "2"}))
    with pytest.raises(ValueError, match=r"search_version='2': expected a positive integer"):
        longrope.scaling_from_json(path)


def test_a_state_of_the_previous_search_version_is_refused(tmp_path):
    """Version 3 draws its children otherwise (mutations inside the neighbours' interval, non-monotone crossover
    children rejected) and its n̂ means another thing: a version-2 state is not resumed."""
    target = np.linspace(1.5, 4.0, 8)
    seeds = [Individual(np.full(8, 4.0), 0)]
    longrope.search(toy_fitness(target), seeds, dataclasses.replace(SMALL, generations=1), BOUND,
                    tmp_path / "s.json", progress=False, meta={"run": "r"})
    state = strict_json(tmp_path / "s.json")
    assert state["meta"]["search_version"] == longrope.SEARCH_VERSION == 3
    assert longrope.saved_versions(tmp_path) == {}  # s.json is no stage*.json
    state["meta"]["search_version"] = 2
    (tmp_path / "stage1_shared.json").write_text(json.dumps(state))
    with pytest.raises(ValueError, match=r"saved by search version 2 \(posenc.longrope.SEARCH_VERSION is 3"):
        longrope.search(toy_fitness(target), seeds, SMALL, BOUND, tmp_path / "stage1_shared.json", progress=False,
                        meta={"run": "r"})
    (tmp_path / "longrope.json").write_text(json.dumps({"short_factor": [1.0], "long_factor": [2.0]}))
    (tmp_path / "stage2_short.json").write_text("{")
    assert longrope.saved_versions(tmp_path) == {"stage1_shared.json": 2, "stage2_short.json": None,
                                                 "longrope.json": 1}
    (tmp_path / "stage2_short.json").write_text(json.dumps({"meta": [3]}))  # a meta that is no object: unreadable
    assert longrope.saved_versions(tmp_path)["stage2_short.json"] is None


@functools.lru_cache(maxsize=None)
def load_experiment():
    """experiments/longrope/run.py as a module, loaded once (its absl flags can be defined once per process)."""
    import importlib.util  # noqa: PLC0415
    import pathlib  # noqa: PLC0415

    path = pathlib.Path(__file__).resolve().parents[1] / "experiments" / "longrope" / "run.py"
    spec = importlib.util.spec_from_file_location("longrope_experiment", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_longrope_experiment_sets_aside_searches_of_another_version(tmp_path):
    """experiments/longrope/run.py resumes the searches under --root: a folder holding a stage or result of another
    search version (which search_run would refuse to resume) is moved aside, named by its versions, and searched
    again; a folder of the current version is resumed as it is."""
    module = load_experiment()
    old, current = tmp_path / "shared_1024", tmp_path / "per_layer_1024"
    old.mkdir()
    current.mkdir()
    (old / "stage1_shared.json").write_text(json.dumps({"meta": {"search_version": 2}}))
    (old / "longrope.json").write_text(json.dumps({"short_factor": [1.0], "long_factor": [2.0]}))  # version 1
    (current / "stage1_shared.json").write_text(json.dumps({"meta": {"search_version": longrope.SEARCH_VERSION}}))
    assert module.set_aside_stale(current) is None and (current / "stage1_shared.json").exists()
    moved = module.set_aside_stale(old)
    assert moved == tmp_path / "shared_1024.search_v1-2" and not old.exists()
    assert sorted(p.name for p in moved.iterdir()) == ["longrope.json", "stage1_shared.json"]
    old.mkdir()
    (old / "stage2_short.json").write_text(json.dumps({"meta": {"search_version": 2}}))
    assert module.set_aside_stale(old) == tmp_path / "shared_1024.search_v2"
    old.mkdir()
    (old / "stage2_short.json").write_text(json.dumps({"meta": {"search_version": 2}}))
    assert module.set_aside_stale(old) == tmp_path / "shared_1024.search_v2.1"  # never over an earlier one
    assert module.set_aside_stale(tmp_path / "missing") is None


def test_longrope_experiment_readme_is_rendered_from_the_committed_results(tmp_path):
    """Fails when a result or run.py's report changed and experiments/longrope/README.md was not rerendered
    (`write_report()` in experiments/longrope/run.py): the README is a function of results/ alone, the search's
    population and generations read from the kept searches, not from the flags of the run that wrote it."""
    import pathlib  # noqa: PLC0415

    module = load_experiment()
    here = pathlib.Path(__file__).resolve().parents[1] / "experiments" / "longrope"
    assert module.render(here / "results") == (here / "README.md").read_text()

    results = tmp_path / "results"
    shutil.copytree(here / "results", results)
    timing = json.loads((results / "timing.json").read_text())
    assert "on a machine whose CPU was not recorded" in module.render(results)  # the committed timing.json
    amd = {"cpu": "AMD EPYC", "cpu_id": {"vendor": "AuthenticAMD", "family": 26, "model": 2, "stepping": 1}, "cores": 2}
    timing["machines"] = {k: amd for k in timing if k.startswith("search/")}
    (results / "timing.json").write_text(json.dumps(timing))
    text = module.render(results).replace("\n", " ")
    assert ("on 2 cores of an AMD EPYC of CPU family 26 (model 2, stepping 1) (each the sitting that ran its search "
            "to the end:") in text
    assert "2-core" not in text and "not recorded" not in text
    module.write_report(results, tmp_path)
    assert (tmp_path / "README.md").read_text().replace("\n", " ") == text

    shared = json.loads((results / "longrope_shared_2048.json").read_text())
    shared["stage1_shared"]["history"] = shared["stage1_shared"]["history"][:5]  # a search of 4 generations
    (results / "longrope_shared_2048.json").write_text(json.dumps(shared))
    with pytest.raises(ValueError, match="other populations or generations .*longrope_shared_2048.json"):
        module.render(results)
