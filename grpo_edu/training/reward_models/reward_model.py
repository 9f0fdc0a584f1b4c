"""A reward model: the backbone's body with a scalar head, r_φ(x, y) ∈ ℝ for a prompt x and answer y.

As TRL's ``RewardTrainer`` requires, it is an ``AutoModelForSequenceClassification`` with ``num_labels=1``:
the backbone's transformer reads the whole text (prompt, answer, ``<eos>``) and a linear head ``score``
maps the hidden state of the last real token to one number. Any causal-LM folder works as the backbone
(the bundled ``assets/tiny-sums``, or a hub name); the head starts random (seeded), the body pretrained.
Saved with ``save_pretrained`` it loads back with a plain ``AutoModelForSequenceClassification.from_pretrained``.

Texts are padded on the *right* (as TRL's ``DataCollatorForPreference`` does), so position ids need no
correction; the head reads the last token that is not ``<pad>``.
"""

import torch

from grpo_edu.common import _checks
from grpo_edu.training.rollouts.rollout import pad_right


def make_reward_model(backbone, *, seed=0):
    """(reward model, tokenizer): ``backbone`` (a folder or hub name of a causal LM) with a fresh scalar head.

    The head's weights come from ``seed`` alone (the body is the backbone's)."""
    from transformers import AutoModelForSequenceClassification

    model, tokenizer = with_fresh_head(AutoModelForSequenceClassification, backbone, seed=seed)
    return check_reward_model(model), tokenizer


def with_fresh_head(auto_class, backbone, *, seed=0, check_tokenizer=None):
    """``auto_class.from_pretrained(backbone, num_labels=1)``: the backbone's body with a new one-number head, seeded,
    after the policy's folder checks (no pickle, whole safetensors, finite weights; errors name ``backbone``).
    ``check_tokenizer(tokenizer)`` may refuse the backbone's tokenizer before any weight loads. Returns
    ``(model, tokenizer)``; the sequence head (a reward model) and the per-token head (a PRM) both load here."""
    from transformers.utils import logging as hf_logging

    from grpo_edu.training.model.models import check_finite_weights, load_kwargs, load_tokenizer, locate_model

    source = locate_model(backbone, arg="backbone")[0]   # the policy's folder checks: no pickle, whole weights
    tokenizer = load_tokenizer(source, arg="backbone")
    if tokenizer.pad_token_id is None:
        _checks.fail("backbone", f"{backbone}'s tokenizer has no pad token", "set tokenizer.pad_token before use")
    if check_tokenizer is not None:
        check_tokenizer(tokenizer)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()                   # "score.weight newly initialized" is the point here
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = auto_class.from_pretrained(
                source, num_labels=1, pad_token_id=tokenizer.pad_token_id, dtype=torch.float32, **load_kwargs())
    finally:
        hf_logging.set_verbosity(verbosity)
    check_finite_weights(model, source, arg="backbone")
    return model, tokenizer


def check_reward_model(model, arg="reward_model"):
    """Refuse a model that does not give exactly one number per text (TRL: "reward models require num_labels=1")."""
    labels = getattr(getattr(model, "config", None), "num_labels", None)
    if labels != 1:
        _checks.fail(arg, f"has {labels} outputs (config.num_labels), a reward model gives one number",
                     "build it with AutoModelForSequenceClassification.from_pretrained(..., num_labels=1)")
    if getattr(model.config, "pad_token_id", None) is None:
        _checks.fail(arg, "has no config.pad_token_id, so it cannot find each text's last token",
                     "set model.config.pad_token_id = tokenizer.pad_token_id")
    return model


def check_tokenizer_matches(model, tokenizer, arg="tokenizer"):
    """Refuse a tokenizer that is not the reward model's own, before any text is scored: a model reads token
    ids, and another tokenizer's ids are other words to it (the scores change without a word) or ids past its
    embedding table (an ``IndexError`` deep in torch). Compared: the ids fit the model's embedding; and, when
    the model was loaded from a local folder that holds its tokenizer, the whole vocabulary and the end token."""
    import os

    from transformers import AutoTokenizer

    rows = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > rows:
        _checks.fail(arg, f"has {len(tokenizer)} tokens, but the reward model's embedding has {rows} rows, so its "
                     "ids past that are not the model's", "score with the reward model's own tokenizer "
                     "(make_reward_model returns it)")
    folder = getattr(model, "name_or_path", "") or ""
    if not os.path.isdir(folder):
        return
    try:
        own = AutoTokenizer.from_pretrained(folder)
    except (OSError, ValueError):            # no tokenizer saved beside the model: nothing more to compare
        return
    theirs, mine = own.get_vocab(), tokenizer.get_vocab()
    if theirs != mine:
        differ = sorted(t for t in set(theirs) | set(mine) if theirs.get(t) != mine.get(t))
        _checks.fail(arg, f"is not the reward model's own ({folder}): {len(differ)} tokens have other ids or are "
                     f"missing (e.g. {differ[:3]}), so the model would read other words",
                     "score with the reward model's own tokenizer (make_reward_model returns it)")
    if own.eos_token_id != tokenizer.eos_token_id:
        _checks.fail(f"{arg}.eos_token", f"is {tokenizer.eos_token!r}, but the reward model ({folder}) ends each "
                     f"text with {own.eos_token!r}", "score with the reward model's own tokenizer")


def text_ids(tokenizer, prompts, completions):
    """Token ids of each prompt + completion + ``<eos>`` (``<bos>`` first when the tokenizer adds one), as lists."""
    texts = [p + c for p, c in zip(prompts, completions)]
    return [ids + [tokenizer.eos_token_id] for ids in tokenizer(texts)["input_ids"]]


def score_ids(model, id_lists):
    """r_φ of each text given as token ids → (N,) tensor, with gradient when grad is on."""
    device = next(model.parameters()).device
    positions = getattr(model.config, "max_position_embeddings", None)
    longest = max(range(len(id_lists)), key=lambda i: len(id_lists[i]), default=None)
    if positions is not None and longest is not None and len(id_lists[longest]) > positions:
        _checks.fail("completions", f"text {longest} takes {len(id_lists[longest])} tokens, past the reward model's "
                     f"{positions} positions, where its score means nothing", "shorten the completions "
                     "(max_completion_length), or use a reward model with a longer context")
    input_ids, attention_mask = pad_right(id_lists, model.config.pad_token_id)
    out = model(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device), use_cache=False)
    return out.logits.squeeze(-1)                                                 # (N, 1) → (N,)


@torch.no_grad()
def score(model, tokenizer, prompts, completions, *, batch_size=256):
    """r_φ(x, y) for each (prompt, completion) → (N,) float tensor on the CPU, in eval mode, no gradient."""
    check_reward_model(model)
    if len(prompts) != len(completions):
        _checks.fail("completions", f"has {len(completions)} texts for {len(prompts)} prompts",
                     "pass one completion per prompt")
    was_training = model.training
    model.eval()
    ids = text_ids(tokenizer, prompts, completions)
    scores = [score_ids(model, ids[i:i + batch_size]).float().cpu() for i in range(0, len(ids), batch_size)]
    model.train(was_training)
    scores = torch.cat(scores) if scores else torch.zeros(0)
    bad = (~torch.isfinite(scores)).nonzero()
    if len(bad):                                # a NaN or ±inf score would poison every advantage it meets
        i = int(bad[0, 0])
        _checks.fail("reward_model", f"scored completion {i} {float(scores[i])} (NaN or infinite)",
                     "check the reward model's weights (a diverged or damaged model), or retrain it at a lower "
                     "learning rate")
    return scores
