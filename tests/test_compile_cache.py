"""Compile paid once per sweep: torch.compile's on-disk caches live under the runs folder
(``cemlab.train.trainer.use_compile_cache``), and a reused worker's next trial compiles anew
(``trial_scope`` resets dynamo) and is served from them when its shapes are the same.

CPU inductor stands in for the GPU here: the FX graph cache is the same code on both (on a GPU it
also holds the Triton kernels). The model is one linear layer, trained one step: the cheapest
graph with a forward and a backward; the first CPU compile in a process still takes tens of
seconds on the 2-core machine (the C++ toolchain's one-time checks), later ones about a second.
"""

from __future__ import annotations

import os

import pytest
import torch


def _train_step(width: int) -> dict[str, int]:
    """One compiled training step of a fresh ``Linear(width, width)``: inductor's cache counters."""
    from torch._dynamo.utils import counters

    counters["inductor"].clear()
    layer = torch.nn.Linear(width, width)
    x = torch.randn(4, width, requires_grad=True)
    torch.compile(layer)(x).square().sum().backward()
    return {k: v for k, v in counters["inductor"].items() if k.startswith("fxgraph_cache")}


@pytest.mark.slow
def test_a_trial_of_the_same_shapes_is_served_from_the_runs_folders_compile_cache(tmp_path, monkeypatch):
    from cemlab.sweeps.trial.job import trial_scope
    from cemlab.train.trainer import COMPILE_CACHE_ENV, use_compile_cache

    monkeypatch.setenv("CEMLAB_RUNS_DIR", str(tmp_path / "runs"))
    for var in COMPILE_CACHE_ENV:
        monkeypatch.delenv(var, raising=False)
    inductor = tmp_path / "runs" / "compile-cache" / "inductor"
    torch._dynamo.reset()   # nothing this process compiled before counts
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with trial_scope():   # trial 1 of a reused worker: compiles, fills the cache
            assert use_compile_cache() == {"TORCHINDUCTOR_CACHE_DIR": str(inductor),
                                           "TRITON_CACHE_DIR": str(tmp_path / "runs" / "compile-cache" / "triton")}
            first = _train_step(8)
        assert os.environ.get("TORCHINDUCTOR_CACHE_DIR") != str(inductor)   # the trial's environment went with it
        assert first.get("fxgraph_cache_miss", 0) >= 2 and not first.get("fxgraph_cache_hit")  # forward, backward
        assert any((inductor / "fxgraph").rglob("*")), "nothing was written under the runs folder's compile cache"

        with trial_scope():   # trial 2, same shapes: dynamo compiles again (reset), inductor reads the cache
            use_compile_cache()
            second = _train_step(8)
        assert second.get("fxgraph_cache_hit", 0) >= 2 and not second.get("fxgraph_cache_miss"), second

        with trial_scope():   # another shape is compiled, not served
            use_compile_cache()
            other = _train_step(12)
        assert other.get("fxgraph_cache_miss", 0) >= 2 and not other.get("fxgraph_cache_hit"), other

        # a cache the user named is kept; inductor's default, which inductor itself exports, is not
        monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
        assert use_compile_cache()["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "mine")
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir

        monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", default_cache_dir())
        assert use_compile_cache()["TORCHINDUCTOR_CACHE_DIR"] == str(inductor)
    finally:
        torch.set_num_threads(threads)
