"""The policy-gradient demonstrations of lessons 02 and 04: hand-computed cases and seeded checks."""

import math

import numpy as np
import pytest
import torch

from grpo_edu.core import policy_gradient as pg
from grpo_edu.core.advantages import group_advantages

# --- log_derivative_step -------------------------------------------------------------------

def test_log_derivative_step_hand_computed():
    # π = (1/3, 1/3, 1/3); o = 0, Â = +1: ∂L/∂z = −Â·(onehot − π) = (−2/3, 1/3, 1/3);
    # one step with lr = 1 gives z = (2/3, −1/3, −1/3), so π(0) = 1 / (1 + 2·e^(−1))
    new_logits, info = pg.log_derivative_step([0.0, 0.0, 0.0], 0, 1.0, lr=1.0)
    np.testing.assert_allclose(info["grad"], [-2 / 3, 1 / 3, 1 / 3])
    np.testing.assert_allclose(new_logits, [2 / 3, -1 / 3, -1 / 3])
    assert info["probs_after"][0] == pytest.approx(1 / (1 + 2 * math.exp(-1)))
    assert info["loss"] == pytest.approx(math.log(3))                   # −1 · log(1/3)


@pytest.mark.parametrize("advantage", [1.0, -1.0, 0.3])
def test_log_derivative_step_moves_the_sampled_answer_with_the_sign_of_the_advantage(advantage):
    logits = np.array([1.0, 0.0, -1.0])
    _, info = pg.log_derivative_step(logits, 1, advantage)
    p = np.exp(logits) / np.exp(logits).sum()
    np.testing.assert_allclose(info["grad"], -advantage * (np.eye(3)[1] - p))
    change = info["probs_after"][1] - info["probs_before"][1]
    assert np.sign(change) == np.sign(advantage)
    assert info["probs_after"].sum() == pytest.approx(1.0)


def test_log_derivative_step_checks_its_inputs():
    with pytest.raises(ValueError, match="^answer:"):
        pg.log_derivative_step([0.0, 0.0], 2, 1.0)
    with pytest.raises(ValueError, match="^logits:"):
        pg.log_derivative_step([[0.0, 0.0]], 0, 1.0)
    new_logits, _ = pg.log_derivative_step([0.0, 0.0], np.int64(1), 1.0)   # numpy integers are fine
    assert new_logits[1] > new_logits[0]


# --- gradient_estimates ----------------------------------------------------------------------

def test_gradient_estimates_exact_gradient_by_hand():
    # π = (1/2, 1/2), R = (1, 0): ∇E[R] = Σ_a π(a) R(a) (onehot(a) − π) = 1/2 · (1/2, −1/2)
    _, info = pg.gradient_estimates([0.0, 0.0], [1.0, 0.0], num_generations=2, num_batches=10)
    np.testing.assert_allclose(info["exact"], [0.25, -0.25])


@pytest.mark.parametrize("baseline", ["none", "leave_one_out"])
def test_gradient_estimates_unbiased_without_or_with_leave_one_out_baseline(baseline):
    _, info = pg.gradient_estimates([0.5, 0.0, -0.5], [1.0, 0.3, 0.0], num_generations=4,
                                    num_batches=40_000, baseline=baseline, seed=1)
    assert np.all(np.abs(info["mean"] - info["exact"]) < 4 * info["standard_error"])


def test_gradient_estimates_group_mean_shrinks_the_gradient_by_g_minus_1_over_g():
    G = 2                                             # the factor (G − 1)/G = 1/2 is easy to see
    _, info = pg.gradient_estimates([0.5, 0.0, -0.5], [1.0, 0.3, 0.0], num_generations=G,
                                    num_batches=40_000, baseline="group_mean", seed=1)
    target = (G - 1) / G * info["exact"]
    assert np.all(np.abs(info["mean"] - target) < 4 * info["standard_error"])
    assert np.all(np.abs(info["mean"] - info["exact"]) > 4 * info["standard_error"])


def test_gradient_estimates_baseline_removes_the_offset_from_the_noise():
    args = {"num_generations": 8, "num_batches": 5_000, "seed": 0}
    plain, plain_info = pg.gradient_estimates([0.5, 0.0, -0.5], [1.0, 0.0, 0.0], **args)
    _, shifted_info = pg.gradient_estimates([0.5, 0.0, -0.5], [11.0, 10.0, 10.0], **args)
    np.testing.assert_allclose(plain_info["exact"], shifted_info["exact"])
    assert shifted_info["spread"] > 10 * plain_info["spread"]          # no baseline: the offset is noise
    for baseline in ("group_mean", "leave_one_out"):
        a, _ = pg.gradient_estimates([0.5, 0.0, -0.5], [1.0, 0.0, 0.0], baseline=baseline, **args)
        b, _ = pg.gradient_estimates([0.5, 0.0, -0.5], [11.0, 10.0, 10.0], baseline=baseline, **args)
        np.testing.assert_allclose(a, b, atol=1e-12)                    # same samples, offset cancels
    again, _ = pg.gradient_estimates([0.5, 0.0, -0.5], [1.0, 0.0, 0.0], **args)
    np.testing.assert_array_equal(plain, again)                         # seeded


def test_gradient_estimates_group_mean_is_grpos_unscaled_advantage():
    # one batch, G = 4, drawn by hand from the same seeded generator
    rng = np.random.default_rng(3)
    probs = torch.tensor([0.2, -0.1, 0.4], dtype=torch.float64).softmax(-1).numpy()
    answers = rng.choice(3, size=(1, 4), p=probs)
    R = np.array([0.7, 0.1, 0.4])
    weight = group_advantages(R[answers], scale="none")[0]
    expected = (weight[:, None] * (np.eye(3)[answers[0]] - probs)).mean(axis=0)
    est, _ = pg.gradient_estimates([0.2, -0.1, 0.4], R, num_generations=4, num_batches=2,
                                   baseline="group_mean", seed=3)
    np.testing.assert_allclose(est[0], expected)


def test_gradient_estimates_checks_its_inputs():
    with pytest.raises(ValueError, match="^baseline:"):
        pg.gradient_estimates([0.0, 0.0], [1.0, 0.0], num_generations=2, baseline="critic")
    with pytest.raises(ValueError, match="^rewards:"):
        pg.gradient_estimates([0.0, 0.0], [1.0, 0.0, 0.0], num_generations=2)


# --- advantage_distribution ------------------------------------------------------------------

def test_advantage_distribution_g2_by_hand():
    # G = 2, p = 0.5: the other answer is wrong (k = 1, Â = 0.5/(√0.5 + 1e-4)) or right (dead, Â = 0)
    (values, probs), info = pg.advantage_distribution(0.5, 2)
    np.testing.assert_allclose(values, [0.5 / (math.sqrt(0.5) + 1e-4), 0.0])
    np.testing.assert_allclose(probs, [0.5, 0.5])
    assert info["mean"] == pytest.approx(0.25 / (math.sqrt(0.5) + 1e-4))
    assert info["dead"] == pytest.approx(0.5)
    assert info["limit"] == 1.0 and info["mu_std"] == pytest.approx(math.sqrt(0.25 / 2))


def test_advantage_distribution_matches_a_seeded_simulation():
    p, G = 0.3, 8
    (_, probs), info = pg.advantage_distribution(p, G)
    assert probs.sum() == pytest.approx(1.0)
    rng = np.random.default_rng(0)
    groups = (rng.random((200_000, G)) < p).astype(float)
    groups = groups[groups[:, 0] == 1.0]                      # condition on answer 0 being right
    adv = group_advantages(groups)[:, 0]
    assert adv.mean() == pytest.approx(info["mean"], abs=0.01)
    assert adv.std() == pytest.approx(info["std"], abs=0.01)


def test_advantage_distribution_narrows_with_g_and_checks_p():
    stds = [pg.advantage_distribution(0.5, g)[1]["std"] for g in (4, 16, 64)]
    assert stds[0] > stds[1] > stds[2]
    assert pg.advantage_distribution(0.2, 64)[1]["mean"] == pytest.approx(2.0, abs=0.1)   # √(0.8/0.2)
    with pytest.raises(ValueError, match="^p:"):
        pg.advantage_distribution(1.0, 4)


# --- importance_weighted_mean ----------------------------------------------------------------

def test_importance_weighted_mean_by_hand():
    # r = (0.5/0.25, 0.5/0.75) = (2, 2/3); mean(r·f) = (2·1 + 0)/2 = 1; ESS = (8/3)² / (4 + 4/9) = 1.6
    estimate, info = pg.importance_weighted_mean([1.0, 0.0], np.log([0.5, 0.5]), np.log([0.25, 0.75]))
    assert estimate == pytest.approx(1.0)
    assert info["plain_mean"] == 0.5 and info["ratio_max"] == pytest.approx(2.0)
    assert info["ratio_mean"] == pytest.approx(4 / 3)
    assert info["effective_sample_size"] == pytest.approx(1.6)


def test_importance_weighted_mean_recovers_the_new_policys_average():
    old = np.log([0.6, 0.3, 0.1])
    new = np.log([0.2, 0.3, 0.5])
    f = np.array([1.0, 2.0, 5.0])
    samples = np.random.default_rng(0).choice(3, size=200_000, p=np.exp(old))
    estimate, info = pg.importance_weighted_mean(f[samples], new[samples], old[samples])
    assert estimate == pytest.approx(np.exp(new) @ f, rel=0.02)           # 3.1
    assert info["plain_mean"] == pytest.approx(np.exp(old) @ f, rel=0.02)  # 1.7
    with pytest.raises(ValueError, match="^values:"):
        pg.importance_weighted_mean([1.0], [0.0, 0.0], [0.0, 0.0])


# --- policy_updates --------------------------------------------------------------------------

def test_policy_updates_first_gradient_by_hand():
    # π uniform over 3, answers (0, 1), Â = (1, −1), N = 2, on-policy: ∇ = −(1/N) Σ Â (onehot − π)
    # = −(1/2)(onehot(0) − onehot(1)) = (−1/2, 1/2, 0), norm √(1/2)
    _, info = pg.policy_updates([0.0, 0.0, 0.0], [0, 1], [1.0, -1.0], optimizer="sgd", steps=1)
    assert info["grad_norms"][0] == pytest.approx(math.sqrt(0.5))


def test_policy_updates_adam_absorbs_a_rescale_unless_kl_is_in_the_loss():
    answers, adv = [0, 1, 2, 0], [1.0, -0.5, -1.5, 1.0]
    run = lambda c, **kw: pg.policy_updates([0.5, 0.0, -0.5], answers, [c * a for a in adv], steps=15, **kw)[0]
    np.testing.assert_allclose(run(1.0), run(10.0), atol=1e-6)                      # Adam, β = 0
    assert abs(run(1.0, optimizer="sgd")[0] - run(10.0, optimizer="sgd")[0]) > 0.05
    assert abs(run(1.0, beta=0.3)[0] - run(10.0, beta=0.3)[0]) > 0.003              # Â weighs against β·KL
    assert run(1.0)[0] > 0.6                                                        # π(0) starts at 0.506
