"""The sampler: masks, log-probs, padding, reproducibility, bad input."""

import pytest
import torch

from grpo_edu.training.rollouts.rollout import completion_logprobs, generate


def _sample(model, tok, prompts, seed=0, **kw):
    kw.setdefault("num_generations", 4)
    kw.setdefault("max_new_tokens", 6)
    return generate(model, tok, prompts, generator=torch.Generator().manual_seed(seed), **kw)


def test_mask_is_one_up_to_and_including_first_eos(random_model, char_tokenizer):
    r = _sample(random_model, char_tokenizer, ["12+34=", "5+6="], num_generations=16)
    eos = char_tokenizer.eos_token_id
    assert r.completion_ids.shape[0] == 32
    for ids, mask in zip(r.completion_ids.tolist(), r.completion_mask.tolist()):
        first = ids.index(eos) if eos in ids else len(ids) - 1
        assert mask == [1] * (first + 1) + [0] * (len(ids) - first - 1)
    assert ((r.logprobs != 0) <= (r.completion_mask == 1)).all()      # nothing logged after EOS
    assert r.lengths.tolist() == r.completion_mask.sum(1).tolist()


def test_rows_are_grouped_by_prompt(random_model, char_tokenizer):
    r = _sample(random_model, char_tokenizer, ["12+34=", "99+1="], num_generations=3)
    texts = char_tokenizer.batch_decode(r.prompt_ids, skip_special_tokens=True)
    assert texts == ["12+34="] * 3 + ["99+1="] * 3


def test_sampler_logprobs_match_a_full_forward(random_model, char_tokenizer):
    r = _sample(random_model, char_tokenizer, ["12+34=", "7+8=", "50+50="], num_generations=4)
    lp, entropy = completion_logprobs(random_model, r.input_ids, r.attention_mask, r.completion_ids.shape[1],
                                      with_entropy=True)
    m = r.completion_mask.bool()
    torch.testing.assert_close(lp[m], r.logprobs[m], atol=1e-5, rtol=1e-5)
    assert (entropy[m] > 0).all()


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_sampler_entropy_matches_a_full_forward_and_is_zero_after_eos(random_model, char_tokenizer, temperature):
    prompts = ["12+34=", "7+8=", "50+50="]
    g = torch.Generator().manual_seed(0)
    r = generate(random_model, char_tokenizer, prompts, num_generations=4, max_new_tokens=6,
                 temperature=temperature, generator=g, with_entropy=True)
    _, entropy = completion_logprobs(random_model, r.input_ids, r.attention_mask, r.completion_ids.shape[1],
                                     temperature=temperature, with_entropy=True)      # H of softmax(logits / τ)
    m = r.completion_mask.bool()
    assert r.entropy.shape == r.completion_ids.shape
    assert temperature != 1.0 or not m.all()               # at τ = 1 some rows end early: zeros after EOS are tested
    torch.testing.assert_close(r.entropy[m], entropy[m], atol=1e-5, rtol=1e-5)
    assert (r.entropy[~m] == 0).all()
    g = torch.Generator().manual_seed(0)
    plain = generate(random_model, char_tokenizer, prompts, num_generations=4, max_new_tokens=6,
                     temperature=temperature, generator=g)
    assert plain.entropy is None and plain.completions == r.completions      # asking for it changes no sample


def test_left_padding_does_not_change_logprobs(random_model, char_tokenizer):
    # the short prompt's log-probs must be the same alone and padded next to a longer prompt
    alone = _sample(random_model, char_tokenizer, ["5+6="], num_generations=1, temperature=0)
    mixed = _sample(random_model, char_tokenizer, ["5+6=", "12+34="], num_generations=1, temperature=0)
    assert alone.completions[0] == mixed.completions[0]
    n = alone.completion_ids.shape[1]
    torch.testing.assert_close(alone.logprobs[0], mixed.logprobs[0, :n], atol=1e-5, rtol=1e-5)


def test_seeded_sampling_is_reproducible(random_model, char_tokenizer):
    a = _sample(random_model, char_tokenizer, ["12+34="], seed=3)
    b = _sample(random_model, char_tokenizer, ["12+34="], seed=3)
    c = _sample(random_model, char_tokenizer, ["12+34="], seed=4)
    assert a.completions == b.completions and torch.equal(a.logprobs, b.logprobs)
    assert a.completions != c.completions


def test_temperature_changes_logprobs(random_model, char_tokenizer):
    """At τ = 0.5 the sampler and completion_logprobs both give log softmax(logits / τ),
    recomputed here from one plain forward pass, and they differ from the τ = 1 values."""
    r = _sample(random_model, char_tokenizer, ["12+34="], temperature=0.5)
    T, m = r.completion_ids.shape[1], r.completion_mask.bool()
    with torch.no_grad():
        logits = random_model(input_ids=r.input_ids).logits[:, -T - 1:-1]            # (N, T, V)
    by_hand = torch.log_softmax(logits / 0.5, -1).gather(-1, r.completion_ids[..., None]).squeeze(-1)
    torch.testing.assert_close(r.logprobs[m], by_hand[m], atol=1e-5, rtol=1e-5)
    lp_half, _ = completion_logprobs(random_model, r.input_ids, r.attention_mask, T, temperature=0.5)
    torch.testing.assert_close(lp_half[m], by_hand[m], atol=1e-5, rtol=1e-5)
    lp_one, _ = completion_logprobs(random_model, r.input_ids, r.attention_mask, T, temperature=1.0)
    assert (lp_one[m] - lp_half[m]).abs().max() > 0.05


@pytest.mark.parametrize("kwargs, match", [
    (dict(prompts="12+34="), "^prompts: "),
    (dict(prompts=[]), "^prompts: "),
    (dict(num_generations=0), "^num_generations: "),
    (dict(max_new_tokens=0), "^max_new_tokens: "),
    (dict(temperature=-1.0), "^temperature: "),
])
def test_bad_input(random_model, char_tokenizer, kwargs, match):
    args = dict(prompts=["1+1="], num_generations=2, max_new_tokens=4, temperature=1.0)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        generate(random_model, char_tokenizer, args.pop("prompts"), **args)
