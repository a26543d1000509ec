"""The learning-rate search's Optuna sampler fits its budget of 8-12 samples per cell.

Optuna's TPE starts with 10 random trials by default, so a cell of 8 samples was random search
under another name; the sampler cemlab builds (``LrSearch.make_sampler``) lets its model choose
most samples. Checked on a smooth valley in log learning rate (the shape of a loss-vs-lr curve)
with a known optimum, against random search with the same seeds and budget.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

LO, HI = 5e-4, 8e-3


def _search_error(sampler, optimum: float, samples: int) -> float:
    """|log(best sampled lr) - log(optimum)| after ``samples`` trials, the centre first (as the runner)."""
    import optuna

    study = optuna.create_study(sampler=sampler)
    study.enqueue_trial({"lr": math.sqrt(LO * HI)})
    study.optimize(lambda t: (math.log(t.suggest_float("lr", LO, HI, log=True)) - math.log(optimum)) ** 2,
                   n_trials=samples)
    return abs(math.log(study.best_params["lr"]) - math.log(optimum))


def test_startup_trials_are_fewer_than_the_samples():
    from cemlab.sweeps.sweepfile.schema import LrSearch

    s = LrSearch(lr=(LO, HI), samples=8)
    assert [s.startup(n) for n in (3, 8, 12, 40)] == [2, 2, 3, 10]
    assert LrSearch(lr=(LO, HI), samples=8, startup_trials=4).startup(8) == 4
    sampler = s.make_sampler(8, seed=0)
    assert type(sampler).__name__ == "GPSampler" and sampler._n_startup_trials == 2
    assert LrSearch(lr=(LO, HI), samples=8, sampler="tpe").make_sampler(8, 0)._n_startup_trials == 2


@pytest.mark.slow
def test_the_budgeted_sampler_finds_the_optimum_far_better_than_random_search():
    import optuna

    from cemlab.sweeps.sweepfile.schema import LrSearch

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    search = LrSearch(lr=(LO, HI), samples=8)
    errors = {"cemlab": [], "random": [], "tpe-default": []}
    for rep in range(5):
        optimum = math.exp(np.random.RandomState(rep).uniform(math.log(LO * 1.5), math.log(HI / 1.5)))
        errors["cemlab"].append(_search_error(search.make_sampler(8, seed=rep), optimum, 8))
        errors["random"].append(_search_error(optuna.samplers.RandomSampler(seed=rep), optimum, 8))
        errors["tpe-default"].append(_search_error(optuna.samplers.TPESampler(seed=rep), optimum, 8))
    mean = {k: float(np.mean(v)) for k, v in errors.items()}
    print("\nmean |log lr error| over 5 valleys, 8 samples:", {k: round(v, 4) for k, v in mean.items()})
    # Optuna's default TPE with 8 samples draws exactly what random search draws (10 startup trials).
    assert errors["tpe-default"] == errors["random"]
    assert mean["cemlab"] < 0.25 * mean["random"]
