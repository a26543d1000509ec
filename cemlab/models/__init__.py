"""cemlab's model library: pure PyTorch (no Lightning, Ray or MLflow, no other cemlab package).

- ``cemlab.models.config``: ``ModelConfig`` and its size ``PRESETS``, ``GPRegressorConfig`` (pydantic).
- ``build_model(cfg)``: a causal LM (``CausalLM``) from a ``ModelConfig``.
- ``count_parameters(model)``, ``flops_per_token(cfg, seq_len)``: accounting.
- ``cemlab.models.cem``: CEM attention and MLP, each with its explicit ``energy``.
- ``cemlab.models.hf``: conversion of Llama baselines to and from Hugging Face ``LlamaForCausalLM``.
- ``cemlab.models.gp``: the GP study's regressor (``GPRegressor``), recursive CEM MLPs.
"""

from cemlab.models.accounting import count_parameters, flops_per_token
from cemlab.models.cem import CEMAttention, CEMMLP
from cemlab.models.model import Block, CausalLM, build_model

__all__ = ["build_model", "CausalLM", "Block", "CEMAttention", "CEMMLP", "count_parameters", "flops_per_token"]
