"""What the KL estimators do when they sit inside a loss and are differentiated (lesson 04b).

``grpo_edu.core.kl`` judges k1, k2 and k3 by their *values*: how well the per-token number
estimates KL(π_θ ‖ π_ref). But β·k is added to the loss and differentiated, with the
sampled tokens held fixed. What trains the model is the expected *gradient*

    E_{x∼π_θ}[ ∇_θ k(x) ]        (the sampling distribution is not differentiated)

and it is not the gradient of the quantity the value estimates. With ρ = π_ref/π_θ:

=====  ============================  ===============================================
kind   ∇_θ k(x)                      expectation over x ∼ π_θ
=====  ============================  ===============================================
k1     ∇ log π_θ(x)                  0: as a loss term k1 only adds noise
k2     log(π_θ/π_ref)·∇ log π_θ(x)   ∇ KL(π_θ ‖ π_ref), the reverse KL
k3     (1 − ρ)·∇ log π_θ(x)          ∇ KL(π_ref ‖ π_θ), the *forward* KL
r·k3   −log ρ · ∇ log π_θ(x) at r=1  ∇ KL(π_θ ‖ π_ref): TRL's ``use_bias_correction_kl``
=====  ============================  ===============================================

(r = π_θ/π_θold has value 1 on-policy but a gradient ∇ log π_θ, which is what changes the
last row.) Everything here is exact, on a softmax "policy" over V tokens: expectations are
sums over the vocabulary, gradients come from autograd.
"""

import torch

from grpo_edu.common import _checks
from grpo_edu.core.kl import KINDS, kl_estimate


def _logits(x, arg):
    t = torch.as_tensor(x, dtype=torch.float64)
    if t.ndim != 1 or t.numel() < 2:
        _checks.fail(arg, f"must be a 1-D tensor of at least 2 values, got shape {tuple(t.shape)}",
                     "pass one value per token of the vocabulary, shape (V,)")
    return t


def _checked_ref(ref_logprobs, z):
    ref = _logits(ref_logprobs, "ref_logprobs")
    if ref.shape != z.shape:
        _checks.fail("ref_logprobs", f"shape {tuple(ref.shape)} does not match logits {tuple(z.shape)}",
                     "pass log π_ref for every token of the same vocabulary")
    return ref


def estimator_gradient(logits, ref_logprobs, kind="k3", *, ratio_weighted=False, tokens=None):
    """∇_logits of the KL estimator as a loss term, averaged over tokens x ∼ π_θ = softmax(logits).

    ``tokens=None``: the exact expectation Σ_x π_θ(x)·∇k(x), with π_θ(x) held fixed as the
    sampling weight. ``tokens`` (n,): the mean of ∇k over those sampled tokens instead.
    ``ratio_weighted``: differentiate r·k (r = π_θ/π_θold, value 1 here, since π_θold = π_θ),
    as TRL's default ``use_bias_correction_kl=True`` does with k3.
    Returns ``(grad, info)``: grad (V,) and ``info["value"]``, the estimator's mean value.
    """
    _checks.choice("kind", kind, KINDS)
    z = _logits(logits, "logits").clone().requires_grad_(True)
    ref = _checked_ref(ref_logprobs, z)
    logprobs = z.log_softmax(-1)                                   # log π_θ, (V,)
    k = kl_estimate(logprobs, ref, kind=kind)                      # k(x) for every token, (V,)
    if ratio_weighted:
        k = k * (logprobs - logprobs.detach()).exp()               # r·k; r = π_θ/π_θold = 1 in value
    if tokens is None:
        weights = logprobs.exp().detach()                          # π_θ(x) as fixed sampling weights
    else:
        t = torch.as_tensor(tokens, dtype=torch.long)
        weights = torch.bincount(t, minlength=z.numel()).to(torch.float64) / t.numel()   # share of each token
    surrogate = (weights * k).sum()                                # E[k] (exact) or the sample mean
    (grad,) = torch.autograd.grad(surrogate, z)
    return grad, {"value": surrogate.item()}


def kl_gradients(logits, ref_logprobs):
    """The exact gradients, w.r.t. the logits, of the two KL divergences between π_θ and π_ref.

    Returns ``(reverse, info)``: ``reverse`` = ∇ KL(π_θ ‖ π_ref) (V,), the divergence GRPO's
    penalty is meant to control; ``info["forward"]`` = ∇ KL(π_ref ‖ π_θ); ``info["reverse_kl"]``
    and ``info["forward_kl"]``, their values.
    """
    z = _logits(logits, "logits").clone().requires_grad_(True)
    ref = _checked_ref(ref_logprobs, z)
    logprobs = z.log_softmax(-1)                                   # (V,)
    reverse_kl = (logprobs.exp() * (logprobs - ref)).sum()         # Σ π_θ log(π_θ/π_ref)
    forward_kl = (ref.exp() * (ref - logprobs)).sum()              # Σ π_ref log(π_ref/π_θ)
    (reverse,) = torch.autograd.grad(reverse_kl, z, retain_graph=True)
    (forward,) = torch.autograd.grad(forward_kl, z)
    return reverse, {"forward": forward, "reverse_kl": reverse_kl.item(), "forward_kl": forward_kl.item()}
