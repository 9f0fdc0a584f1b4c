"""Per-token estimators of KL(π_θ ‖ π_ref), the "don't forget your roots" term.

GRPO keeps the policy π_θ close to the frozen starting model π_ref by adding β·KL to the
loss (DeepSeekMath, eq. 4). The exact KL needs a sum over the whole vocabulary; from the
sampled token alone we can only *estimate* it (J. Schulman, "Approximating KL
Divergence", 2020). With the log-ratio ``log_r = log π_ref(o_t) − log π_θ(o_t)`` and
tokens sampled from π_θ:

=====  ====================================  =========  ===========  ================
kind   per-token value                       unbiased   can be < 0   variance
=====  ====================================  =========  ===========  ================
k1     −log_r = log π_θ − log π_ref          yes        yes          high
k2     ½·(log_r)²                            no         no           low
k3     exp(log_r) − log_r − 1                yes        no           low
=====  ====================================  =========  ===========  ================

GRPO (DeepSeekMath eq. 4) uses k3; so do TRL (``per_token_kl``) and verl
(``kl_loss_type="low_var_kl"``, which also clamps k3 to [−10, 10]; grpo_edu does not clamp).

Works on numpy arrays and torch tensors alike (the same kind comes back), any shape.
"""

from grpo_edu.common import _checks

KINDS = ("k1", "k2", "k3")


def _exp(x):
    if _checks.is_torch(x):
        return x.exp()
    import numpy as np

    return np.exp(x)


def kl_estimate(logprobs, ref_logprobs, kind="k3"):
    """Per-token KL estimate between π_θ (``logprobs``) and π_ref (``ref_logprobs``).

    Both are log-probabilities of the *sampled* tokens, same shape, e.g. (N, T).
    Returns that shape; average it over active tokens yourself (or let ``grpo_loss`` do it).
    """
    _checks.choice("kind", kind, KINDS)
    if tuple(getattr(logprobs, "shape", ())) != tuple(getattr(ref_logprobs, "shape", ())):
        _checks.fail("ref_logprobs", f"shape {tuple(getattr(ref_logprobs, 'shape', ()))} does not match "
                     f"logprobs shape {tuple(getattr(logprobs, 'shape', ()))}",
                     "pass the reference log-probs of the same tokens, one per token")
    log_r = ref_logprobs - logprobs          # log(π_ref / π_θ)
    if kind == "k1":
        return -log_r                        # k1 = log π_θ − log π_ref
    if kind == "k2":
        return 0.5 * log_r ** 2              # k2 = ½ (log π_θ − log π_ref)²
    return _exp(log_r) - log_r - 1           # k3 = π_ref/π_θ − log(π_ref/π_θ) − 1  ≥ 0
