"""cemlab's model library: pure PyTorch (no Lightning, Ray or MLflow, no other cemlab package).

- ``cemlab.models.config``: ``ModelConfig`` and its size ``PRESETS``, ``GPRegressorConfig`` (pydantic).
- ``build_model(cfg)``: a causal LM (``CausalLM``) from a ``ModelConfig``.
- ``count_parameters(model)``, ``flops_per_token(cfg, seq_len)``: accounting.
- ``cemlab.models.cem``: CEM attention and MLP, each with its explicit ``energy``.
- ``cemlab.models.hf``: conversion of Llama baselines to and from Hugging Face ``LlamaForCausalLM``.
- ``cemlab.models.gp``: the GP study's regressor (``GPRegressor``), recursive CEM MLPs.
"""

# The names are imported when first used (PEP 562), so that importing a light submodule (a config)
# does not load torch through this package.
# Its own copy of cemlab/lazy.py: this pure PyTorch library imports nothing else of cemlab.
import importlib

_EXPORTS = {
    "count_parameters": "cemlab.models.accounting",
    "flops_per_token": "cemlab.models.accounting",
    "CEMAttention": "cemlab.models.cem",
    "CEMMLP": "cemlab.models.cem",
    "Block": "cemlab.models.model",
    "CausalLM": "cemlab.models.model",
    "build_model": "cemlab.models.model",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
