"""DPO on a group: pairs (a right and a wrong answer to one prompt) and the loss, by hand and as TRL's
``DPOTrainer`` computes it (loss and gradient, on the same batch, with its own reference model)."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from grpo_edu.core.advantages import zero_std_groups
from grpo_edu.core.dpo import dpo_loss, preference_pairs, sequence_logprobs


def test_one_pair_per_prompt_whose_answers_differ():
    rewards = [[0.0, 1.0, 1.0, 0.0],        # prompt 0: first right is answer 1, first wrong answer 0
               [1.0, 1.0, 1.0, 1.0],        # prompt 1: all right, no pair (GRPO's dead group)
               [0.2, 0.9, 0.1, 0.5]]        # prompt 2: graded; highest 0.9 (answer 1), lowest 0.1 (answer 2)
    pairs, info = preference_pairs(rewards)
    assert pairs.tolist() == [[1, 0], [2 * 4 + 1, 2 * 4 + 2]]          # flat indices b·G + g
    assert info["num_pairs"] == 2 and info["prompts"].tolist() == [0, 2]
    assert info["pair_fraction"] == pytest.approx(2 / 3)
    empty, info = preference_pairs([[0.0, 0.0], [1.0, 1.0]])
    assert empty.shape == (0, 2) and info["num_pairs"] == 0 and info["pair_fraction"] == 0.0


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 5), st.integers(2, 6), st.integers(0, 10_000))
def test_pairs_exist_exactly_where_grpo_has_a_signal_and_chosen_beats_rejected(B, G, seed):
    rewards = np.random.default_rng(seed).integers(0, 3, size=(B, G)).astype(float)
    pairs, info = preference_pairs(rewards)
    flat = rewards.reshape(-1)
    assert info["prompts"].tolist() == np.flatnonzero(~zero_std_groups(rewards)).tolist()
    assert (flat[pairs[:, 0].numpy()] > flat[pairs[:, 1].numpy()]).all()
    assert (pairs // G).tolist() == [[b, b] for b in info["prompts"].tolist()]    # both from the same prompt


# β = 0.5; log π_θ(y_w) = −3, log π_ref(y_w) = −4 (log-ratio +1); log π_θ(y_l) = −2, log π_ref(y_l) = −1 (−1).
#   Δ = 1 − (−1) = 2, β·Δ = 1, L = −log σ(1) = log(1 + e^(−1)) = 0.313262
#   ∂L/∂log π_θ(y_w) = −β·σ(−β·Δ) = −0.5·0.268941 = −0.134471, and +0.134471 for y_l
# Without the reference, Δ would be −3 − (−2) = −1 and L = log(1 + e^(0.5)) = 0.974077.
def test_the_loss_by_hand():
    chosen = torch.tensor([-3.0], dtype=torch.float64, requires_grad=True)
    rejected = torch.tensor([-2.0], dtype=torch.float64, requires_grad=True)
    ref_chosen = torch.tensor([-4.0], dtype=torch.float64, requires_grad=True)
    ref_rejected = torch.tensor([-1.0], dtype=torch.float64)
    loss, info = dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta=0.5)
    assert loss.item() == pytest.approx(math.log(1 + math.exp(-1)))
    assert info["chosen_rewards"].tolist() == [0.5] and info["rejected_rewards"].tolist() == [-0.5]
    assert info["reward_margin"] == 1.0 and info["reward_accuracy"] == 1.0
    g_chosen, g_rejected, g_ref = torch.autograd.grad(loss, [chosen, rejected, ref_chosen], allow_unused=True)
    sigma = 1 / (1 + math.e)
    assert g_chosen.item() == pytest.approx(-0.5 * sigma) and g_rejected.item() == pytest.approx(0.5 * sigma)
    assert g_ref is None                                                # the reference is frozen


def test_at_the_reference_the_loss_is_log_two_whatever_beta():
    logps = torch.randn(5)
    for beta in (0.01, 0.1, 3.0):
        loss, info = dpo_loss(logps, logps.flip(0), logps, logps.flip(0), beta=beta)
        assert loss.item() == pytest.approx(math.log(2))
        assert info["reward_accuracy"] == 0.0


def test_the_reference_holds_the_policy_back():
    # the policy already prefers y_w to y_l by far more than π_ref does: the loss is small and the push weak;
    # the same policy measured against a reference that prefers y_w just as much is back at log 2
    chosen, rejected = torch.tensor([-1.0]), torch.tensor([-9.0])
    far, _ = dpo_loss(chosen, rejected, torch.tensor([-5.0]), torch.tensor([-5.0]), beta=0.5)
    anchored, _ = dpo_loss(chosen, rejected, torch.tensor([-2.0]), torch.tensor([-10.0]), beta=0.5)
    assert far.item() < 0.02 and anchored.item() == pytest.approx(math.log(2))


def test_sequence_logprobs_sum_over_the_answers_tokens():
    logprobs = torch.tensor([[-1.0, -2.0, -50.0], [-0.5, -0.5, -0.5]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    assert sequence_logprobs(logprobs, mask).tolist() == [-3.0, -1.5]


def test_bad_input_is_refused_naming_the_argument():
    x = torch.zeros(3)
    for beta in (0.0, -0.1, math.inf):
        with pytest.raises(ValueError, match=r"^beta: must be a finite number > 0.*Fix: pass a DPO temperature"):
            dpo_loss(x, x, x, x, beta=beta)
    with pytest.raises(ValueError, match=r"^loss_type: unknown value 'ipo'.*Fix: use one of 'sigmoid'"):
        dpo_loss(x, x, x, x, loss_type="ipo")
    with pytest.raises(ValueError, match=r"^ref_rejected_logps: shape \(2,\) does not match chosen_logps shape \(3,\).*Fix"):
        dpo_loss(x, x, x, torch.zeros(2))
    with pytest.raises(ValueError, match=r"^chosen_logps: must be a \(P,\) tensor of at least one pair.*Fix"):
        dpo_loss(torch.zeros(0), torch.zeros(0), torch.zeros(0), torch.zeros(0))
    with pytest.raises(ValueError, match=r"^chosen_logps: must be a \(P,\) tensor.*Fix"):
        dpo_loss(torch.zeros(3, 2), x, x, x)
    with pytest.raises(ValueError, match=r"^mask: shape \(2, 2\) does not match logprobs shape \(2, 3\).*Fix"):
        sequence_logprobs(torch.zeros(2, 3), torch.ones(2, 2))
    with pytest.raises(ValueError, match=r"^rewards: has G = 1.*Fix"):
        preference_pairs([[1.0], [0.0]])


def test_trls_dpo_loss_and_gradient_equal_ours_on_the_same_batch(random_model, char_tokenizer, tmp_path):
    """TRL's own DPOTrainer._compute_loss, with its own ref_model, against grpo_edu's dpo_loss on the
    pairs preference_pairs picks from one group of sampled answers."""
    trl = pytest.importorskip("trl", reason="TRL is an optional extra: pip install -e '.[trl]'")
    import datasets

    from grpo_edu.training.rollouts.rollout import completion_logprobs

    random_model.save_pretrained(tmp_path / "model")
    char_tokenizer.save_pretrained(tmp_path / "model")
    args = trl.DPOConfig(output_dir=str(tmp_path / "out"), report_to=[], use_cpu=True, beta=0.3,
                         loss_type="sigmoid", precompute_ref_log_probs=False)
    trainer = trl.DPOTrainer(model=str(tmp_path / "model"), args=args, processing_class=char_tokenizer,
                             train_dataset=datasets.Dataset.from_list(
                                 [{"prompt": "12+34=", "chosen": "46", "rejected": "45"}] * 4))
    model, ref_model = trainer.model.train(), trainer.ref_model
    torch.manual_seed(0)
    with torch.no_grad():                                          # the policy has moved away from π_ref
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))

    # one group: B = 3 prompts, G = 4 sampled answers of up to 5 tokens, right-padded; prompt 1 gives no pair
    B, G, P_len, T = 3, 4, 4, 5
    vocab = len(char_tokenizer)
    prompt_ids = torch.randint(4, vocab, (B, P_len)).repeat_interleave(G, 0)            # (N, P_len)
    completion_ids = torch.randint(4, vocab, (B * G, T))                                # (N, T)
    mask = (torch.arange(T)[None, :] < torch.randint(1, T + 1, (B * G, 1))).long()     # (N, T)
    pairs, info = preference_pairs([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 1.0, 0.0]])
    assert info["num_pairs"] == 2
    rows = torch.cat([pairs[:, 0], pairs[:, 1]])                   # TRL's batch: the chosen rows, then the rejected
    input_ids = torch.cat([prompt_ids, completion_ids], 1)[rows]                        # (2P, P_len + T)
    attention_mask = torch.cat([torch.ones(B * G, P_len, dtype=torch.long), mask], 1)[rows]
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask,
              "completion_mask": torch.cat([torch.zeros(B * G, P_len, dtype=torch.long), mask], 1)[rows]}
    theirs = trainer._compute_loss(model, inputs, return_outputs=False)

    ids, attention = torch.cat([prompt_ids, completion_ids], 1), torch.cat([torch.ones(B * G, P_len), mask], 1)
    seq = sequence_logprobs(completion_logprobs(model, ids, attention, T)[0], mask)           # log π_θ(o_i), (N,)
    with torch.no_grad():
        ref_seq = sequence_logprobs(completion_logprobs(ref_model, ids, attention, T)[0], mask)  # log π_ref(o_i)
    ours, ours_info = dpo_loss(seq[pairs[:, 0]], seq[pairs[:, 1]], ref_seq[pairs[:, 0]], ref_seq[pairs[:, 1]],
                               beta=args.beta)
    assert abs(ours_info["reward_margin"]) > 1e-3                  # the reference really differs from the policy
    assert abs(theirs.item() - ours.item()) < 1e-6, (theirs.item(), ours.item())
    params = [p for p in model.parameters() if p.requires_grad]
    g_theirs = torch.autograd.grad(theirs, params, retain_graph=True, allow_unused=True)
    g_ours = torch.autograd.grad(ours, params, allow_unused=True)
    compared = [(a, b) for a, b in zip(g_theirs, g_ours) if a is not None]
    assert len(compared) == len(params)                            # every weight gets a gradient from both
    for a, b in compared:
        assert torch.allclose(a, b, atol=1e-6)


@pytest.mark.parametrize("bad", [float("nan"), float("-inf"), float("inf")])
@pytest.mark.parametrize("where", ["chosen_logps", "rejected_logps", "ref_chosen_logps", "ref_rejected_logps"])
def test_nan_or_infinite_log_probs_are_refused_not_a_nan_loss(where, bad):
    """An answer of probability 0 under both models (−inf − −inf) or a NaN would make the loss NaN."""
    args = {name: torch.tensor([-1.0, -2.0]) for name in
            ("chosen_logps", "rejected_logps", "ref_chosen_logps", "ref_rejected_logps")}
    args[where] = torch.tensor([-1.0, bad])
    with pytest.raises(ValueError, match=f"^{where}: holds NaN or infinite values.*Fix: "):
        dpo_loss(**args)
