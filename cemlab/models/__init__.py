"""cemlab's model library: pure PyTorch (no Lightning, Ray or MLflow).

- ``build_model(cfg)``: a causal LM (``CausalLM``) from a ``ModelConfig`` (``cemlab.models.config``).
- ``count_parameters(model)``, ``flops_per_token(cfg, seq_len)``: accounting.
- ``cemlab.models.cem``: CEM attention and MLP, each with its explicit ``energy``.
- ``cemlab.models.hf``: conversion of Llama baselines to and from Hugging Face ``LlamaForCausalLM``.
"""

from cemlab.models.accounting import count_parameters, flops_per_token
from cemlab.models.cem import CEMAttention, CEMMLP
from cemlab.models.model import Block, CausalLM, build_model

__all__ = ["build_model", "CausalLM", "Block", "CEMAttention", "CEMMLP", "count_parameters", "flops_per_token"]
