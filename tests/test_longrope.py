"""LongRoPE search: constraints, determinism, progress on a toy objective, reload, and no test-split reads."""

import dataclasses
import json
import math
import shutil

import numpy as np
import pytest

import posenc
from posenc import data, longrope, train, tuning
from posenc.evaluate import Evaluator
from posenc.longrope import Individual, SearchConfig

BOUND = 5.0
SMALL = SearchConfig(population=12, generations=6, mutations=4, crossovers=4, parents=6, seed=0)


def random_individual(rng, r=8, layers=None):
    shape = (r,) if layers is None else (layers, r)
    return Individual(longrope.repair(rng.uniform(0.5, 7, shape), BOUND), int(rng.choice(longrope.N_HAT_CHOICES)))


@pytest.mark.parametrize("layers", [None, 3])
def test_constraints_hold_after_mutation_and_crossover(layers):
    rng = np.random.default_rng(0)
    for _ in range(200):
        a, b = random_individual(rng, layers=layers), random_individual(rng, layers=layers)
        for child in (longrope.mutate(a, rng, SMALL, BOUND), longrope.crossover(a, b, rng, BOUND)):
            assert longrope.satisfies(child, BOUND, longrope.N_HAT_CHOICES)
            assert child.factors.shape == a.factors.shape


def test_seed_factors_are_pi_ntk_yarn():
    seeds = longrope.seed_factors(32, 10000.0, 4.0, 256)
    np.testing.assert_allclose(seeds["linear"], 4.0)
    assert seeds["ntk"][0] == pytest.approx(1.0) and seeds["ntk"][-1] == pytest.approx(4.0)
    assert np.all(np.diff(seeds["yarn"]) >= -1e-12) and seeds["yarn"][-1] == pytest.approx(4.0)


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
    assert result["per_layer"] in (True, False) and result["search_split"] == "validation"
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
    assert by[("longrope", 32, "nonoverlap")]["nll"] != by[("none", 32, "nonoverlap")]["nll"] or \
        np.allclose(saved["short_factor"], 1.0)  # at L <= 32 the short factors apply



def test_saved_factors_load_through_the_config(rope_run, tmp_path):
    """training / generation read a search result via model.rope.scaling.factors_file."""
    from posenc.config import model_config  # noqa: PLC0415

    path = tmp_path / "longrope.json"
    path.write_text(json.dumps({"factor": 2.0, "original_max_len": 32, "attention_factor": 1.1,
                                "short_factor": [1.0] * 8, "long_factor": list(np.linspace(1, 2, 8)),
                                "unscaled_positions": 4}))
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
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[1] / "experiments" / "longrope" / "run.py"
    spec = importlib.util.spec_from_file_location("longrope_experiment", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
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
