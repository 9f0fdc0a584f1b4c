"""Off-policy corrections (grpo_edu.core.off_policy): hand cases, TRL's sequence mask, bad input."""

import dataclasses
import inspect
import math

import pytest
import torch

from grpo_edu.core.off_policy import (CORRECTIONS, behaviour_clip, correct, decoupled, no_correction, off_policy_loss,
                                      sequence_mask, token_tis)


def _one_token(r_theta_prox, w_prox_behav):
    """One sequence of one token: π_θ/π_prox = r, π_prox/μ = w (log-probs chosen so)."""
    behav = torch.tensor([[-2.0]])
    prox = behav + math.log(w_prox_behav)
    lp = (prox + math.log(r_theta_prox)).requires_grad_()
    return lp, prox, behav, torch.ones(1, 1)


def test_decoupled_clips_against_the_proximal_policy_and_weighs_by_prox_over_behaviour():
    # r = π_θ/π_prox = 1.5 clipped at 1.2 (Â > 0), w = π_prox/μ = 2: loss = −2 · 1.2 · 1 = −2.4
    # (swapping π_prox and μ would clip π_θ/μ = 3 at 1.2 and weigh by 0.5: −0.6)
    lp, prox, behav, mask = _one_token(1.5, 2.0)
    loss, info = off_policy_loss("decoupled", lp, prox, behav, torch.tensor([1.0]), mask, epsilon=0.2)
    assert loss.item() == pytest.approx(-2.4, rel=1e-5)
    assert info["clip_fraction"] == 1.0 and info["weight_mean"] == pytest.approx(2.0, rel=1e-5)
    # AReaL's behav_imp_weight_cap filters a token whose w exceeds it
    loss, info = off_policy_loss("decoupled", lp, prox, behav, torch.tensor([1.0]), mask, cap=1.5)
    assert loss.item() == 0.0 and info["masked_fraction"] == 1.0


def test_behaviour_clip_takes_the_samplers_logprobs_as_pi_old():
    # r = π_θ/μ = 1.5 · 2 = 3, clipped at 1.2 with Â > 0: −1.2, whatever π_prox is
    lp, prox, behav, mask = _one_token(1.5, 2.0)
    loss, info = off_policy_loss("behaviour_clip", lp, prox, behav, torch.tensor([1.0]), mask)
    assert loss.item() == pytest.approx(-1.2, rel=1e-5) and info["clip_fraction"] == 1.0
    (old, weights), _ = behaviour_clip(lp, prox, behav, mask)
    assert weights is None and torch.equal(old, behav)


def test_no_correction_is_the_on_policy_gradient_on_stale_answers():
    lp, prox, behav, mask = _one_token(1.5, 4.0)
    loss, info = off_policy_loss("none", lp, prox, behav, torch.tensor([-0.5]), mask)
    assert loss.item() == pytest.approx(0.5) and info["clip_fraction"] == 0.0
    loss.backward()
    assert lp.grad.item() == pytest.approx(0.5)                  # −Â ∇log π_θ, whatever μ was


def test_token_tis_truncates_the_weight_from_above_only():
    # w = π_prox/μ = 4 and 0.5 on two tokens, C = 2: weights 2 and 0.5 (a cap on the wrong side would give 4 and 2)
    behav = torch.tensor([[-2.0, -1.0]])
    prox = behav + torch.tensor([[math.log(4.0), math.log(0.5)]])
    (old, w), info = token_tis(prox.clone(), prox, behav, torch.ones(1, 2), cap=2.0)
    torch.testing.assert_close(w, torch.tensor([[2.0, 0.5]]))
    assert torch.equal(old, prox) and info["truncated_fraction"] == 0.5 and info["masked_fraction"] == 0.0
    # the loss: r = 1, Â = 1, grpo aggregation: −(2 + 0.5)/2
    loss, _ = off_policy_loss("token_tis", prox.clone().requires_grad_(), prox, behav, torch.tensor([1.0]),
                              torch.ones(1, 2), cap=2.0)
    assert loss.item() == pytest.approx(-1.25, rel=1e-5)


def test_sequence_mask_multiplies_the_token_ratios_and_drops_whole_answers():
    # answer 0: ratios 2 and 1.25 → W = 2.5 ≤ 3, kept; answer 1: 2 and 2 → W = 4 > 3, dropped;
    # answer 2: 1.5, then a masked token with ratio 100 that must not count → W = 1.5
    behav = torch.full((3, 2), -1.0)
    ratios = torch.tensor([[2.0, 1.25], [2.0, 2.0], [1.5, 100.0]])
    prox = behav + ratios.log()
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    (old, W), info = sequence_mask(prox.clone(), prox, behav, mask, cap=3.0)
    torch.testing.assert_close(W, torch.tensor([[2.5], [0.0], [1.5]]))
    assert info["sequences_masked"] == pytest.approx(1 / 3) and info["masked_fraction"] == pytest.approx(2 / 5)


def _trl_sequence_mask(old_per_token_logps, sampling_per_token_logps, completion_mask, clip_min, clip_max):
    """TRL 1.16 GRPOTrainer._generate_and_score_completions, the vLLM IS block in "sequence_mask" mode, its
    statements in order (checked against the installed source by the test below)."""
    mask = completion_mask
    per_token_logps_diff = (old_per_token_logps - sampling_per_token_logps) * mask
    per_token_logps_diff = torch.nan_to_num(per_token_logps_diff, nan=0.0)
    per_sequence_logps_diff = per_token_logps_diff.sum(dim=-1, keepdim=True)
    logps_diff = per_sequence_logps_diff
    vllm_importance_sampling_ratio = torch.exp(logps_diff)
    min_val = clip_min if clip_min is not None else -math.inf
    max_val = clip_max if clip_max is not None else math.inf
    invalid_mis_mask = (vllm_importance_sampling_ratio < min_val) | (vllm_importance_sampling_ratio > max_val)
    return vllm_importance_sampling_ratio.masked_fill(invalid_mis_mask, value=0.0)


def test_sequence_mask_equals_trls_own_code():
    from trl import GRPOConfig as TRLConfig
    from trl.trainer import grpo_trainer

    source = inspect.getsource(grpo_trainer.GRPOTrainer)
    for line in ("per_token_logps_diff = (old_per_token_logps - sampling_per_token_logps) * mask",
                 "per_sequence_logps_diff = per_token_logps_diff.sum(dim=-1, keepdim=True)",
                 "vllm_importance_sampling_ratio = torch.exp(logps_diff)",
                 "vllm_importance_sampling_ratio = vllm_importance_sampling_ratio.masked_fill(",
                 "per_token_loss = per_token_loss * inputs[\"importance_sampling_ratio\"]"):
        assert line in source, line
    defaults = {f.name: f.default for f in dataclasses.fields(TRLConfig)}
    assert defaults["vllm_importance_sampling_mode"] == "sequence_mask"
    assert defaults["vllm_importance_sampling_clip_max"] == 3.0 and defaults["vllm_importance_sampling_clip_min"] is None

    g = torch.Generator().manual_seed(0)
    behav = torch.randn(64, 7, generator=g) * 0.5 - 1.5
    prox = behav + torch.randn(64, 7, generator=g) * 0.4                 # some answers above C = 3, some below
    mask = (torch.rand(64, 7, generator=g) > 0.2).float()
    trl = _trl_sequence_mask(prox, behav, mask, None, 3.0)
    (_, ours), _ = sequence_mask(prox.clone(), prox, behav, mask, cap=3.0)
    assert 0 < int((trl == 0).sum()) < 64                                 # the mask binds on some answers, not all
    torch.testing.assert_close(ours, trl)
    (_, ours), _ = sequence_mask(prox.clone(), prox, behav, mask, cap=3.0, floor=0.5)
    torch.testing.assert_close(ours, _trl_sequence_mask(prox, behav, mask, 0.5, 3.0))


def test_every_correction_is_on_policy_when_the_sampler_is_the_trainer():
    # μ = π_prox = π_θ: every weight 1, r = 1, the loss is the plain GRPO loss −mean Â
    lp = torch.full((2, 3), -1.0, requires_grad=True)
    adv, mask = torch.tensor([1.5, -0.5]), torch.ones(2, 3)
    for name in CORRECTIONS:
        loss, info = off_policy_loss(name, lp, lp.detach(), lp.detach(), adv, mask)
        assert loss.item() == pytest.approx(-0.5), name
        assert info["masked_fraction"] == 0 and info["log_ratio_std"] == 0 and info["kl_behaviour"] == 0, name


@pytest.mark.parametrize("name, cap", [("token_tis", 1.0), ("sequence_mask", 0.5), ("decoupled", 1.0),
                                       ("token_tis", float("nan"))])
def test_a_cap_at_or_below_one_is_refused_by_name(name, cap):
    lp = torch.zeros(1, 2)
    with pytest.raises(ValueError, match=r"cap: is .* above 1"):
        correct(name, lp, lp, lp, torch.ones(1, 2), cap=cap)


def test_bad_names_and_shapes_are_refused():
    lp = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="off_policy_correction"):
        correct("tis", lp, lp, lp, torch.ones(2, 3))
    with pytest.raises(ValueError, match="behaviour_logprobs: shape"):
        no_correction(lp, lp, torch.zeros(2, 2), torch.ones(2, 3))
    with pytest.raises(ValueError, match="logprobs: must be a"):
        decoupled(torch.zeros(3), torch.zeros(3), torch.zeros(3), torch.ones(3))


@pytest.mark.parametrize("name", sorted(CORRECTIONS))
@pytest.mark.parametrize("bad", [float("-inf"), float("inf"), float("nan")])
def test_non_finite_behaviour_logprobs_at_masked_positions_leave_the_loss_finite(name, bad):
    # a padded position (mask 0) may hold anything: −inf from a masked softmax, NaN from a sampler's padding
    torch.manual_seed(0)
    lp = torch.randn(3, 4).requires_grad_()
    prox = lp.detach() + 0.01
    behav = prox - 0.05
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.float32)
    clean, _ = off_policy_loss(name, lp, prox, behav, torch.tensor([1.0, -1.0, 0.5]), mask)
    behav_bad = behav.masked_fill(mask == 0, bad)
    loss, info = off_policy_loss(name, lp, prox, behav_bad, torch.tensor([1.0, -1.0, 0.5]), mask)
    assert torch.isfinite(loss) and loss.item() == pytest.approx(clean.item(), abs=1e-6)
    assert math.isfinite(info["log_ratio_std"]) and math.isfinite(info["kl_behaviour"])
    loss.backward()
    assert torch.isfinite(lp.grad).all()


@pytest.mark.parametrize("bad", [float("-inf"), float("nan")])
def test_non_finite_behaviour_logprobs_on_active_tokens_are_refused_by_name(bad):
    lp = torch.zeros(2, 3)
    behav = torch.full((2, 3), -1.0)
    behav[1, 1] = bad
    with pytest.raises(ValueError, match=r"^behaviour_logprobs: is NaN or ±inf at 1 active token\(s\).*\(1, 1\)"):
        correct("token_tis", lp, lp, behav, torch.ones(2, 3))
