"""CEM sublayers: attention and MLP as descent steps on explicit energies (paper sections 2-2.4).

Both sublayers share one shape (paper Algorithm 1, read as pre-norm; docs/layers.md):

    cache = prepare(h)                 # computed once per layer: keys (= values), or gamma = W h
    x = h                              # x0 = 'h'; x0 = 'rmsnorm': x = RMSNorm(h) (Algorithm 1 literally)
    for t in range(T):                 # within-layer recursion (sec. 2.3)
        u = RMSNorm(x)                 # the same norm (and weight) as the one applied to h
        x = x + eta_t * direction(u)   # direction(u) = -sum_k P_k grad_u E_k(u), closed form

``energy(u, cache)`` evaluates the energy itself from the layer's own parameters, so a test can
differentiate it with autograd and compare with ``direction``. The step is the gradient with
respect to the *normalised* iterate u: the RMSNorm Jacobian is not applied (as in Algorithm 1).
With T = 1, P = I and no KQ diagonal, a CEM sublayer is a weight-tied Transformer sublayer.

Step size eta_t (``*_eta``): a fixed number (the same at every step), ``"1/T"`` (1/steps: T steps
move as far in total as one step of eta = 1), or ``"learned"`` (eta_t = softplus(a_t), one scalar
per layer and step, positive by construction, initialised to 1/T). Where the state starts (``x0``):
``"h"`` keeps the residual stream (x0 = h, output h + sum of the steps); ``"rmsnorm"`` reads
Algorithm 1 literally: x0 = RMSNorm(h), the residual absorbed into the recursion (output x_T, no
separate skip connection). docs/layers.md puts both beside the equations.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from cemlab.models.common import AlibiSlopes, Positions, RMSNorm, causal_alibi, causal_mask, silu_integral
from cemlab.models.config import ModelConfig
from cemlab.models.preconditioners import make_preconditioner
from cemlab.models.kernels import attention_path, causal_block_mask, diagonal_bias_gradient, flash_attention, flex


def _softplus_inverse(y: float) -> float:
    """a with softplus(a) = y (y > 0)."""
    return y + math.log(-math.expm1(-y))


class CEMSublayer(nn.Module):
    """Recursion machinery shared by CEM attention and the CEM MLP.

    ``steps`` (T), ``eta`` (step size) and ``reuse`` (plain reuse of the whole sub-block, which
    re-runs ``prepare`` on the current state: the ablation control) are plain attributes, so the
    number of steps can be changed at test time (``CausalLM.set_recursion_steps``). In the
    ``1/T`` mode the step size follows the steps in use; a learned step size beyond the trained
    steps repeats the last learned value.
    """

    norm: nn.Module
    steps: int = 1
    eta: float = 1.0
    eta_mode: str = "fixed"      # 'fixed' (eta), '1/T' or 'learned' (softplus(eta_raw[t]))
    x0: str = "h"                # 'h' or 'rmsnorm' (see the module docstring)
    reuse: int = 1
    checkpointed: bool = False

    def _set_step_size(self, eta: float | str, x0: str = "h") -> None:
        """Called by subclasses after ``steps`` is set: the step-size mode and where x starts."""
        if x0 not in ("h", "rmsnorm"):
            raise ValueError(f"x0 must be 'h' or 'rmsnorm', got {x0!r}")
        self.x0 = x0
        if eta == "learned":
            self.eta_mode, self.eta = "learned", 1.0 / self.steps
            self.eta_raw = nn.Parameter(torch.full((self.steps,), _softplus_inverse(1.0 / self.steps)))
        elif eta == "1/T":
            self.eta_mode = "1/T"
        else:
            self.eta_mode, self.eta = "fixed", float(eta)

    def step_size(self, t: int) -> float | torch.Tensor:
        """eta_t of recursion step t (0-based)."""
        if self.eta_mode == "learned":
            return F.softplus(self.eta_raw[min(t, self.eta_raw.numel() - 1)])
        if self.eta_mode == "1/T":
            return 1.0 / self.steps
        return self.eta

    def step_sizes(self) -> list[float]:
        """eta_t of every step at the current number of steps (their sum is the total step)."""
        with torch.no_grad():
            return [float(self.step_size(t)) for t in range(self.steps)]

    def prepare(self, h: torch.Tensor, pos: Positions) -> tuple:  # pragma: no cover - abstract
        raise NotImplementedError

    def direction(self, u: torch.Tensor, cache: tuple) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def energy(self, u: torch.Tensor, cache: tuple) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def step(self, x: torch.Tensor, *cache, eta: float | torch.Tensor | None = None) -> torch.Tensor:
        """One descent step x <- x + eta * P (-grad E)(RMSNorm(x)) (eq. 3 / eq. 9, preconditioned eq. 12 / 13)."""
        return x + (self.step_size(0) if eta is None else eta) * self.direction(self.norm(x), cache)

    def forward(self, h: torch.Tensor, pos: Positions, trace: list | None = None) -> torch.Tensor:
        x = h
        for r in range(self.reuse):
            cache = self.prepare(x, pos)
            if self.x0 == "rmsnorm":
                x = self.norm(x)  # Algorithm 1 literally: x0 = RMSNorm(h), the residual absorbed
            if trace is not None and r == 0:
                trace.append(self.energy(self.norm(x), cache).mean())
            for t in range(self.steps):
                eta = self.step_size(t)
                if self.checkpointed and torch.is_grad_enabled():
                    # Only x is kept per step; the step's activations are recomputed in backward.
                    x = checkpoint(self.step, x, *cache, eta=eta, use_reentrant=False)
                else:
                    x = self.step(x, *cache, eta=eta)
                if trace is not None and r == 0:
                    trace.append(self.energy(self.norm(x), cache).mean())
        return x


class CEMAttention(CEMSublayer):
    """Attention as gradient descent on the interaction energy (eq. 1, appendix A):

        E(u_i | h_1..i) = -tau * sum_k log sum_{j<=i} exp( beta_kj . u_i / tau + b_ijk )
        beta_kj = A_k hn_j,   A_k = diag(d_k) + Wq_k^T Wk_k,   hn = RMSNorm(h),   tau = sqrt(D/K)

    Its negative gradient is multi-head attention with tied weights (eq. 4-5): values = keys
    (Wv = Wk) and output projection = query projection transposed (Wo = Wq):

        -grad_u E = sum_k Wq_k^T o_k  [+ sum_k d_k * sum_j alpha_ijk hn_j]   o_k = sum_j alpha_ijk k_j

    The bracketed term is the KQ diagonal's own gradient. Algorithm 1 (the paper's model, the
    default here) puts the diagonal into the scores only and drops that term, so its step is *not*
    the exact gradient when a diagonal is used; ``exact_energy_gradient=True`` adds it.

    Biases b_ijk (appendix A): ALiBi ``-m_k |i-j|`` plus learnable self/other-token biases. A bias
    shared by every j != i is a constant shift of the softmax logits, so only the difference
    ``b_self - b_other`` is identifiable; it is the one learnable scalar per head kept here
    (``self_bias``).

    Reference path (``attn_kernel='reference'``): the scores and o_k come from
    ``scaled_dot_product_attention(q, k, k)`` with the biases as a materialised [K, S, S] float
    mask; the KQ diagonal rides along as D extra query/key channels ``[q_k, d_k * u] . [k_j, hn_j]``.
    Flex path (``'flex'``; ``'auto'`` picks it on CUDA): FlexAttention with ALiBi and the
    self/other bias as a ``score_mod`` and causality as a block mask, so no [K, S, S] tensor
    exists (the self/other bias is a constant there; its gradient comes from the kernel's
    log-sum-exp, ``kernels.diagonal_bias_gradient``, as on the flash path); a ``shared`` diagonal is one [B, S, S] score term per step (one matmul instead of K
    widened heads), read by the ``score_mod``; a ``per_head`` one keeps the D extra channels. Both
    paths leave the output projection y = sum_k P_k Wq_k^T o_k to the preconditioner
    (``Preconditioner.fold`` / ``output``: diag and dplr fold into it, no D x D matrix is formed).
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        a = cfg.attention
        D, K = cfg.d_model, cfg.n_heads
        self.d_model, self.n_heads, self.head_dim = D, K, D // K
        self.tau = math.sqrt(self.head_dim)
        self.norm = RMSNorm(D, cfg.norm_eps)
        self.Wq = nn.Linear(D, D, bias=False)  # W^Q_k stacked by head; also W^O (eq. 5)
        self.Wk = nn.Linear(D, D, bias=False)  # W^K_k stacked by head; also W^V (eq. 5)
        n_diag = {"none": 0, "shared": 1, "per_head": K}[a.kq_diagonal]
        self.kq_diag = nn.Parameter(torch.zeros(n_diag, D)) if n_diag else None  # d_k (sec. 2.3)
        self.exact = a.exact_energy_gradient
        self.use_alibi = a.alibi
        self.self_bias = nn.Parameter(torch.zeros(K)) if a.self_other_bias else None
        self.precond = make_preconditioner(a.precond, K, D, a.precond_rank, cfg.init_std)  # P_k (eq. 12)
        self.steps, self.reuse = a.steps, a.reuse
        self._set_step_size(a.eta, cfg.cem_x0)
        self.checkpointed = cfg.checkpoint_recursion
        self._cfg, self._paths = cfg, {}  # attention.kernel's meaning per device type (``path``)
        self.compiled = True  # whether the run compiles (CausalLM.set_compiled): 'auto' takes flex only then
        self.alibi_slopes = AlibiSlopes(K, a.alibi_max_bias)

    # -- pieces ---------------------------------------------------------------------------------
    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        """[B, S, D] -> [B, K, S, Dh]."""
        B, S, _ = x.shape
        return x.view(B, S, self.n_heads, self.head_dim).transpose(1, 2)

    def score_bias(self, pos: Positions, dtype: torch.dtype, constant: bool = False) -> torch.Tensor | None:
        """b_ijk plus the causal mask, [1, K or 1, S, S]; None when plain causal masking is enough.
        ``constant``: the self/other bias enters detached (the flash path routes its gradient).

        4-d, because SDPA on CPU considers its flash kernel only for a 4-d mask (a 3-d one always
        gets the math kernel); a mask that needs a gradient (learnable self bias) gets math anyway."""
        if not self.use_alibi and self.self_bias is None:
            return None
        bias = (pos.alibi if self.use_alibi else causal_mask(pos.seq_len, pos.device)).to(dtype)
        if self.self_bias is not None:
            eye = torch.eye(pos.seq_len, device=bias.device, dtype=dtype)
            b = self.self_bias.detach() if constant else self.self_bias
            bias = bias + b.to(dtype)[:, None, None] * eye
        return bias[None]

    def path(self, device: torch.device) -> str:
        """'reference', 'flash' or 'flex' on this device (``kernels.attention_path``)."""
        kind = torch.device(device).type
        if kind not in self._paths:
            self._paths[kind] = attention_path(self._cfg, torch.device(device), self.compiled)
        return self._paths[kind]

    def output_weights(self) -> tuple:
        """The output projection y = sum_k P_k Wq_k^T o_k with the preconditioners folded in as their
        kind does it (``Preconditioner.fold``), computed once per layer."""
        return self.precond.fold(self.Wq.weight.view(self.n_heads, self.head_dim, self.d_model))

    # -- the CEM interface ----------------------------------------------------------------------
    def prepare(self, h: torch.Tensor, pos: Positions) -> tuple:
        """Keys (= values) from the normalised input, computed once per layer (Algorithm 1)."""
        hn = self.norm(h)
        k = self._heads(self.Wk(hn))
        # flex: the causal block mask stands where the reference keeps its dense bias
        path = self.path(h.device)
        bias = causal_block_mask(pos, h.device) if path == "flex" else self.score_bias(pos, h.dtype, path == "flash")
        return (hn, k, bias, *self.output_weights())  # the folded output: as many tensors as the kind needs

    def direction(self, u: torch.Tensor, cache: tuple) -> torch.Tensor:
        """sum_k P_k Wq_k^T o_k (eq. 12), plus the diagonal's gradient term when exact."""
        hn, k, bias, *folded = cache
        B, S, D = u.shape
        K, Dh = self.n_heads, self.head_dim
        q = self._heads(self.Wq(u))
        q_ext, k_ext, v = q, k, k  # values = keys (eq. 5)
        path = self.path(u.device)
        if path == "flex":
            o = self.flex_scores(u, hn, q, k, bias)
        else:
            if self.kq_diag is not None:
                # hn_j^T diag(d_k) u_i as D extra channels, so the fused kernel sees one dot product.
                du = (self.kq_diag[:, None, :] * u[:, None]).expand(B, K, S, D)
                hn_k = hn[:, None].expand(B, K, S, D)
                q_ext, k_ext = torch.cat([q, du], -1), torch.cat([k, hn_k], -1)
                if self.exact or path == "flash":  # flash: one head width for q, k and v
                    v = k_ext  # [k_j, hn_j]: also returns sum_j alpha_ijk hn_j
            if path == "flash":
                o = flash_attention(q_ext, k_ext, v, bias, self.self_bias, 1.0 / self.tau)
            else:
                o = F.scaled_dot_product_attention(
                    q_ext, k_ext, v, attn_mask=bias, is_causal=bias is None, scale=1.0 / self.tau
                )
        if o.shape[-1] > Dh:
            o, o_hn = o.split([Dh, D], dim=-1)
        y = self.precond.output(o.transpose(1, 2), tuple(folded))  # sum_k P_k Wq_k^T o_k, o: [B, S, K, Dh]
        if self.exact and self.kq_diag is not None:
            g = self.kq_diag * o_hn.transpose(1, 2)  # [B, S, K, D]: d_k * sum_j alpha_ijk hn_j
            y = y + self.precond.apply(g).sum(-2)
        return y

    def flex_scores(self, u: torch.Tensor, hn: torch.Tensor, q: torch.Tensor, k: torch.Tensor, block_mask):
        """o_k = sum_j alpha_ijk v_j by FlexAttention, [B, K, S, Dh (+ D when exact)]: the same
        scores as the reference path, with the biases computed inside the kernel (``score_mod``)."""
        B, S, D = u.shape
        K = self.n_heads
        q_ext, k_ext, v = q, k, k
        diag_scores = None
        if self.kq_diag is not None:
            hn_k = hn[:, None].expand(B, K, S, D)
            if self.kq_diag.shape[0] == 1:  # shared d: hn_j^T diag(d) u_i / tau, one [B, S, S] term
                # (1/tau folded in before the matmul: inductor's CPU flex kernel reads a captured
                # tensor only when it is a realised buffer such as a matmul's output)
                diag_scores = (self.kq_diag[0] * (u / self.tau)) @ hn.transpose(-1, -2)
            else:  # per head: D extra channels, as in the reference path (no [K, S, S] tensor)
                du = (self.kq_diag[:, None, :] * u[:, None]).expand(B, K, S, D)
                q_ext, k_ext = torch.cat([q, du], -1), torch.cat([k, hn_k], -1)
            if self.exact:
                v = torch.cat([k, hn_k], -1)
        slopes = self.alibi_slopes(q.device, q.dtype) if self.use_alibi else None
        self_bias = self.self_bias.to(q.dtype) if self.self_bias is not None else None
        # The self/other bias goes into the kernel as a constant and gets its gradient beside it
        # (kernels.diagonal_bias_gradient): through score_mod, the kernel's backward summed that
        # gradient over every score into K numbers, a training step 40x slower at 86m on an H200
        # (2.04 s against 0.049 s; docs/performance.md).
        live = self_bias is not None and self_bias.requires_grad and torch.is_grad_enabled()
        held = self_bias.detach() if live else self_bias

        def score_mod(score, b, h, q_idx, kv_idx):
            if slopes is not None:  # ALiBi: -m_k (i - j); j > i is masked by the block mask
                score = score - slopes[h] * (q_idx - kv_idx)
            if held is not None:
                score = score + torch.where(q_idx == kv_idx, held[h], 0.0)
            if diag_scores is not None:
                score = score + diag_scores[b, q_idx, kv_idx]
            return score

        q_ext, k_ext, v = q_ext.contiguous(), k_ext.contiguous(), v.contiguous()
        if not live:
            return flex(q_ext, k_ext, v, score_mod, block_mask, 1.0 / self.tau)
        o, lse = flex(q_ext, k_ext, v, score_mod, block_mask, 1.0 / self.tau, lse=True)
        extra = diag_scores.diagonal(dim1=-2, dim2=-1)[:, None] if diag_scores is not None else None
        return diagonal_bias_gradient(o, lse, q_ext, k_ext, v, self_bias, 1.0 / self.tau, extra)

    def energy(self, u: torch.Tensor, cache: tuple, per_head: bool = False) -> torch.Tensor:
        """E(u_i | h_1..i) for every position, [B, S] (or [B, K, S] per head), eq. 1 with biases."""
        hn, k = cache[0], cache[1]
        bias = cache[2]
        if isinstance(bias, torch.Tensor) and self.path(u.device) == "flash" and self.self_bias is not None:
            # the flash cache holds the self/other bias by value: add zero that carries its gradient
            live = (self.self_bias - self.self_bias.detach()).to(bias.dtype)[:, None, None]
            bias = bias + live * torch.eye(u.shape[1], device=bias.device, dtype=bias.dtype)
        elif bias is not None and not isinstance(bias, torch.Tensor):  # flex cache: build the dense bias
            S = u.shape[1]
            alibi = causal_alibi(S, self.alibi_slopes(u.device, u.dtype), u.device, u.dtype) if self.use_alibi else None
            bias = self.score_bias(Positions(seq_len=S, device=u.device, alibi=alibi), u.dtype)
        q = self._heads(self.Wq(u))
        s = q @ k.transpose(-1, -2)  # beta_kj . u_i restricted to the low-rank part: k_j . q_i
        if self.kq_diag is not None:
            du = self.kq_diag[:, None, :] * u[:, None]  # [B, K or 1, S, D]
            s = s + du @ hn[:, None].transpose(-1, -2)
        s = s / self.tau
        if bias is None:
            bias = causal_mask(u.shape[1], device=s.device, dtype=s.dtype)
        E = -self.tau * torch.logsumexp(s + bias, dim=-1)  # [B, K, S]
        return E if per_head else E.sum(1)


class CEMMLP(CEMSublayer):
    """The MLP as gradient descent on the element-wise energy (eq. 7-11):

        xi(u_i | h_i) = -gamma_i . phi(V u_i),   gamma_i = W hn_i,   phi(z) = int_0^z SiLU

    One step is a gated MLP whose down projection is the transpose of the projection inside the
    nonlinearity (eq. 11: W^d^T = W^u = V, W^g = W):

        x <- x + eta * P V^T( (W hn) * SiLU(V u) )        (eq. 13)

    gamma = W hn is computed once per layer; each recursion step costs two matmuls with V.
    ``d_hidden`` is D_v (x1.5 of the Llama MLP width when parameter-matched).
    """

    def __init__(self, d_model: int, d_hidden: int, steps: int = 1, eta: float | str = 1.0,
                 precond: str = "none", precond_rank: int = 16, norm_eps: float = 1e-6,
                 reuse: int = 1, checkpointed: bool = False, init_std: float = 0.02, x0: str = "h"):
        super().__init__()
        self.d_model, self.d_hidden = d_model, d_hidden
        self.norm = RMSNorm(d_model, norm_eps)
        self.W = nn.Linear(d_model, d_hidden, bias=False)  # gamma = W hn (the "gate" of eq. 6, W^g)
        self.V = nn.Linear(d_model, d_hidden, bias=False)  # inside SiLU (W^u); V^T is the down projection
        self.precond = make_preconditioner(precond, 1, d_model, precond_rank, init_std)  # P_mlp (eq. 13)
        self.steps, self.reuse, self.checkpointed = steps, reuse, checkpointed
        self._set_step_size(eta, x0)

    @classmethod
    def from_config(cls, cfg: ModelConfig) -> "CEMMLP":
        m = cfg.mlp
        return cls(cfg.d_model, cfg.cem_mlp_width, steps=m.steps, eta=m.eta, precond=m.precond,
                   precond_rank=m.precond_rank, norm_eps=cfg.norm_eps, reuse=m.reuse,
                   checkpointed=cfg.checkpoint_recursion, init_std=cfg.init_std, x0=cfg.cem_x0)

    def prepare(self, h: torch.Tensor, pos: Positions | None = None) -> tuple:
        return (self.W(self.norm(h)),)

    def direction(self, u: torch.Tensor, cache: tuple) -> torch.Tensor:
        (gamma,) = cache
        y = (gamma * F.silu(self.V(u))) @ self.V.weight  # V^T (gamma * phi'(V u)), eq. 8
        return self.precond.apply(y.unsqueeze(-2)).squeeze(-2)  # P V^T (...), eq. 13

    def energy(self, u: torch.Tensor, cache: tuple) -> torch.Tensor:
        """xi(u_i | h_i) for every position, [...] (eq. 7)."""
        (gamma,) = cache
        return -(gamma * silu_integral(self.V(u))).sum(-1)
