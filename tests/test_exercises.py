"""Code-writing exercises and predict-then-run questions (grpo_edu.course.aids.exercises).

Each code exercise is checked with a correct solution written here by hand, independently of
the library, and with typical wrong ones: a bug in the reference, the inputs or the
comparison turns one of these red.
"""

import math

import numpy as np
import pytest

from grpo_edu.course.aids.exercise_bank import EXERCISES, PREDICTIONS, CodeExercise
from grpo_edu.course.aids.exercises import check, reveal


def _policy_gradient_by_hand(logits, answers, advantages, minus_pi=True):
    pi = np.exp(logits - logits.max())
    pi /= pi.sum()
    rows = [-adv * (np.eye(len(logits))[a] - (pi if minus_pi else 0)) for a, adv in zip(answers, advantages)]
    return sum(rows) / len(rows)


def _admitted_by_hand(advantages, top_fraction, min_advantage, last_wins=False):
    n = len(advantages)
    keep = -(-top_fraction * n // 1)                # ⌈top_fraction · n⌉
    order = sorted(range(n), key=lambda i: (-advantages[i], -i if last_wins else i))
    top = set(order[:int(keep)])
    return [i in top and advantages[i] > min_advantage for i in range(n)]


def _collapsed_by_hand(rewards, smooth=True, floor_zero=False, peak_before_tail=True):
    r = [float(x) for x in rewards]
    n, w = len(r), max(3, len(r) // 20)
    avg = [sum(r[max(0, i + 1 - w):i + 1]) / len(r[max(0, i + 1 - w):i + 1]) for i in range(n)] if smooth else r
    i_peak = avg.index(max(avg))
    tail = r[n - max(3, math.ceil(n / 4)):]
    floor = 0.0 if floor_zero else min(0.0, min(r))
    peak, end = avg[i_peak], sum(tail) / len(tail)
    early = i_peak < n - len(tail) or not peak_before_tail
    return early and peak - floor >= 0.1 and end <= floor + 0.25 * (peak - floor)


def _truncated_by_hand(lengths, limit, head_share=10, both=True, rule=0.98):
    x, n = [float(v) for v in lengths], len(lengths)
    head, tail = x[:max(3, math.ceil(n / head_share))], x[n - max(3, math.ceil(n / 4)):]
    windows = (tail, head) if both else (tail,)
    return any(sum(w) / len(w) >= rule * limit for w in windows)


def _gae_by_hand(r, v, gamma, lam):
    out, next_adv, next_v = [0.0] * len(r), 0.0, 0.0
    for t in reversed(range(len(r))):
        next_adv = r[t] + gamma * next_v - v[t] + gamma * lam * next_adv
        out[t], next_v = next_adv, v[t]
    return out


CORRECT = {
    "13.1": lambda r, v, g, lam: _gae_by_hand(list(r), list(v), g, lam),
    "02.4": lambda z, a, adv: _policy_gradient_by_hand(z, a, adv),
    "03.4": lambda rewards: [len(set(row)) == 1 for row in rewards.tolist()],
    "04.5": lambda r, a, eps: [0.0 if (ai > 0 and ri > 1 + eps) or (ai < 0 and ri < 1 - eps) else ri * ai
                               for ri, ai in zip(r, a)],
    "04.6": lambda lp, ref: 1 - np.exp(ref - lp),
    "05.6": lambda lp, mask: [sum(l for l, m in zip(row, mrow) if m) for row, mrow in zip(lp.tolist(), mask.tolist())],
    "06.5": lambda adv, top, m: _admitted_by_hand(adv.tolist(), top, m),
    "11.4": lambda n, c, k: 1 - math.comb(n - c, k) / math.comb(n, k),
    "07.5": lambda cs, ans, L: [max(0.0, 1 - len(c.strip()) / L) if c.strip() == a.strip() else 0.0
                                for c, a in zip(cs, ans)],
    "09.4": lambda r: _collapsed_by_hand(r),
    "09.5": lambda lengths, limit: _truncated_by_hand(lengths, limit),
    "10.4": lambda B, G, p, m: [m or B * G // p, (B * G // p) // (m or B * G // p)],
    "12.1": lambda lp, old, mask: [math.exp(sum((a - b) for a, b, m in zip(r1, r2, m1) if m) / sum(m1))
                                   for r1, r2, m1 in zip(lp.tolist(), old.tolist(), mask.tolist())],
    "12.2": lambda r, a, lp, eps: [-min(ri, eps) * ai * li for ri, ai, li in zip(r, a, lp)],
    "12.3": lambda rw: [[x - (sum(row) - x) / (len(row) - 1) for x in row] for row in rw.tolist()],
    "12.4": lambda r, a, tp, tn: [-(4 / t) * ai / (1 + math.exp(-t * (ri - 1)))
                                  for ri, ai in zip(r, a) for t in [tp if ai > 0 else tn]],
    "14.1": lambda L, D, H, K, d, I, V, n, c: sum(L * (2 * (D * (H + 2 * K) * d + H * d * D + 3 * D * I) + 4 * H * d * p)
                                                  + 2 * D * V for p in range(c + 1, c + n + 1)),
    "15.1": lambda ids, end, lens: _tool_mask_by_hand(ids.tolist(), end, lens.tolist()),
    "17b.1": lambda prompt, completion: _step_labels_by_hand(prompt, completion),
    "16.1": lambda ids, end: [[int(end not in row[:t]) for t in range(len(row))] for row in ids.tolist()],
}


def _step_labels_by_hand(prompt, completion):
    """Each step against what is written before it; the answer against the last result plus the terms left."""
    terms = [int(t) for t in prompt[:-1].split("+")]
    working, answer = completion.split("#")
    steps = [s for s in working.split(";") if s]
    labels, written = [], terms[0]
    for k, step in enumerate(steps):
        ab, c = step.split("=")
        a, b = (int(x) for x in ab.split("+"))
        labels.append(int(a == written and k + 1 < len(terms) and b == terms[k + 1] and int(c) == a + b))
        written = int(c)
    return labels + [int(int(answer) == written + sum(terms[len(steps) + 1:]))]


def _tool_mask_by_hand(ids, end, lens):
    """A token-by-token walk: 0 while a reply is being skipped, and a "]" inside a reply starts nothing."""
    mask, calls, skip = [], 0, 0
    for t in ids:
        if skip:
            mask.append(0)
            skip -= 1
            continue
        mask.append(1)
        if t == end and calls < len(lens):
            skip, calls = lens[calls], calls + 1
    return mask

WRONG = {
    "13.1": [lambda r, v, g, lam: _gae_by_hand(list(r), list(v), lam, g),              # γ and λ swapped
             lambda r, v, g, lam: _gae_by_hand(list(r), list(v), g, 1.0),              # λ ignored
             lambda r, v, g, lam: [sum(r[t:]) - v[t] for t in range(len(r))]],         # Monte Carlo, no γ, λ
    "02.4": [lambda z, a, adv: -_policy_gradient_by_hand(z, a, adv),              # the sign: ascent, not the loss
             lambda z, a, adv: _policy_gradient_by_hand(z, a, adv, minus_pi=False),  # forgot the softmax's − π
             lambda z, a, adv: _policy_gradient_by_hand(z, a, adv) * len(a)],        # a sum, not the mean
    "03.4": [lambda rewards: rewards.sum(axis=1) == 0],                      # only "all wrong" groups
    "04.5": [lambda r, a, eps: np.where(np.abs(r - 1) > eps, 0.0, r * a),             # clips both sides always
             lambda r, a, eps: np.where((a > 0) & (r > 1 + eps) | (a < 0) & (r < 1 - eps), 0.0, a)],   # Â, not r·Â
    "04.6": [lambda lp, ref: 1 - np.exp(lp - ref),                           # ρ upside down
             lambda lp, ref: np.exp(ref - lp) - (ref - lp) - 1],              # k3's value, not its slope
    "05.6": [lambda lp, mask: lp.sum(axis=1),                                # counts the tokens after <eos>
             lambda lp, mask: (lp * mask).mean(axis=1)],                     # a mean, not the sum
    "06.5": [lambda adv, top, m: adv > m,                                    # no top-fraction cut
             lambda adv, top, m: _admitted_by_hand(adv.tolist(), top, m, last_wins=True)],   # ties: later first
    "11.4": [lambda n, c, k: 1 - (1 - c / n) ** k,                          # with replacement: biased low
             lambda n, c, k: c / n],                                          # pass@1 whatever k
    "07.5": [lambda cs, ans, L: [max(0.0, 1 - len(c.strip()) / L) for c in cs],           # no gate
             lambda cs, ans, L: [max(0.0, 1 - len(c) / L) if c == a else 0.0 for c, a in zip(cs, ans)]],   # no strip
    "09.4": [lambda r: _collapsed_by_hand(r, smooth=False),                              # the raw peak
             lambda r: _collapsed_by_hand(r, floor_zero=True),                           # floor 0, penalties or not
             lambda r: _collapsed_by_hand(r, peak_before_tail=False)],                   # a late peak counts
    "09.5": [lambda lengths, limit: _truncated_by_hand(lengths, limit, both=False),     # the end only
             lambda lengths, limit: _truncated_by_hand(lengths, limit, head_share=4),   # a quarter at the start too
             lambda lengths, limit: _truncated_by_hand(lengths, limit, rule=0.95),      # "close to the limit"
             lambda lengths, limit: bool(np.mean(lengths) >= 0.98 * limit)],            # the whole run's mean
    "10.4": [lambda B, G, p, m: [B * G, 1],                                                # completions, one process
             lambda B, G, p, m: [m or B // p, (B // p) // (m or B // p) if B // p else 1]],  # prompts, not completions
    "12.1": [lambda lp, old, mask: np.exp(((lp - old) * mask).sum(axis=1)),             # the product, not the mean
             lambda lp, old, mask: np.exp(lp - old).mean(axis=1)],                     # arithmetic mean, pads in
    "12.2": [lambda r, a, lp, eps: -np.minimum(r, 1 + 0.2) * a * lp,                  # capped at 1 + ε
             lambda r, a, lp, eps: -r * a * lp],                                       # no cap
    "12.3": [lambda rw: rw - rw.mean(axis=1, keepdims=True),                           # own reward in the baseline
             lambda rw: rw - (rw.sum(axis=1, keepdims=True) - rw) / rw.shape[1]],      # divides by G
    "12.4": [lambda r, a, tp, tn: -(4 / tp) * a / (1 + np.exp(-tp * (r - 1))),         # one τ for both signs
             lambda r, a, tp, tn: -np.minimum(r * a, np.clip(r, 0.8, 1.2) * a)],       # GRPO's clip
    "14.1": [lambda L, D, H, K, d, I, V, n, c: n * (L * 2 * (D * 3 * H * d + H * d * D + 3 * D * I) + 2 * D * V)
             + L * 4 * H * d * sum(range(c + 1, c + n + 1)),                          # K = H: no grouped KV heads
             lambda L, D, H, K, d, I, V, n, c: n * (L * 2 * (D * (H + 2 * K) * d + H * d * D + 3 * D * I) + 2 * D * V),
             lambda L, D, H, K, d, I, V, n, c: sum(L * (2 * (D * (H + 2 * K) * d + H * d * D + 3 * D * I)
                                                        + 4 * H * d * p) + 2 * D * V for p in range(1, n + 1))],
    "15.1": [lambda ids, end, lens: (np.cumsum(ids == end) == 0).astype(int),             # only before the first call
             lambda ids, end, lens: np.where(np.roll(ids == end, 1), 0, 1)],              # one token after every "]"
    "17b.1": [lambda prompt, completion: _step_labels_by_truth(prompt, completion),       # the true running sum
              lambda prompt, completion: [int(eval_free_sum(s)) for s in completion.split("#")[0].split(";") if s]
              + [1]],                                                                     # arithmetic only
    "16.1": [lambda ids, end: (ids != end).astype(int),                                  # the padding mask, pad = eos
             lambda ids, end: (np.cumsum(ids == end, axis=1) == 0).astype(int),          # the end token left out
             lambda ids, end: (np.cumsum((ids == end)[:, ::-1], axis=1)[:, ::-1] > 0)     # up to the LAST end
             | ~(ids == end).any(axis=1, keepdims=True)],
}


def eval_free_sum(step):
    """1 when a step 'a+b=c' adds correctly, whatever it starts from (no eval: the digits are split by hand)."""
    ab, c = step.split("=")
    a, b = ab.split("+")
    return int(a) + int(b) == int(c)


def _step_labels_by_truth(prompt, completion):
    """The state rule the lesson rejects: a step is right when its result is the true running sum."""
    terms = [int(t) for t in prompt[:-1].split("+")]
    working, answer = completion.split("#")
    steps = [s for s in working.split(";") if s]
    labels = [int(int(s.split("=")[1]) == sum(terms[:k + 2])) for k, s in enumerate(steps)]
    return labels + [int(int(answer) == sum(terms))]


def test_every_code_exercise_is_tested_here():
    code = {k for k, ex in EXERCISES.items() if isinstance(ex, CodeExercise)}
    assert code == set(CORRECT) == set(WRONG)


@pytest.mark.parametrize("exercise_id", sorted(CORRECT))
def test_a_correct_function_passes(exercise_id, capsys):
    assert check(exercise_id, CORRECT[exercise_id]) is True
    assert "✅" in capsys.readouterr().out


@pytest.mark.parametrize("exercise_id", sorted(WRONG))
def test_wrong_functions_fail_with_the_input_and_a_hint(exercise_id, capsys):
    for wrong in WRONG[exercise_id]:
        with np.errstate(all="ignore"):
            assert check(exercise_id, wrong) is False
        out = capsys.readouterr().out
        assert "❌" in out and "Hint:" in out and "the library gives" in out


def test_the_inputs_include_dead_groups_and_are_seeded():
    ex = EXERCISES["12.3"]
    rng_a, rng_b = np.random.default_rng(0), np.random.default_rng(0)
    tables = [ex.inputs(rng_a)[0] for _ in range(ex.trials)]
    assert all(np.array_equal(t, ex.inputs(rng_b)[0]) for t in tables)
    assert any((t.max(axis=1) == t.min(axis=1)).any() for t in tables)


def test_the_stub_not_a_function_and_a_crash_are_handled(capsys):
    assert check("12.3", lambda rewards: None) is False
    assert "not answered yet" in capsys.readouterr().out
    assert check("12.3", None) is False
    assert "not answered yet" in capsys.readouterr().out
    assert check("12.3", 3) is False
    assert "pass your function itself" in capsys.readouterr().out
    assert check("04.6", lambda lp, ref: lp.nosuchmethod()) is False
    assert "raised AttributeError" in capsys.readouterr().out


def test_every_trial_counts():
    calls = []

    def right_only_at_first(rewards):
        calls.append(1)
        return CORRECT["12.3"](rewards) + np.float64(len(calls) > 1)

    assert check("12.3", right_only_at_first) is False
    assert len(calls) == 2


def test_the_message_shows_the_input_as_it_was_before_the_learners_function_ran(capsys):
    def vandal(rewards):
        rewards[:] = 99.0                 # changes its argument, then returns a wrong result
        return rewards

    assert check("12.3", vandal) is False
    assert "99" not in capsys.readouterr().out.split("the library gives")[0]


# --- predictions ----------------------------------------------------------------------------

def _unexplained(monkeypatch):
    """A numeric prediction with no ``why``: reveal keeps its answer back until a guess comes."""
    from grpo_edu.course.aids.prediction_bank import Prediction

    monkeypatch.setitem(PREDICTIONS, "99.P9", Prediction("a question", tolerance=0.25))
    return "99.P9"


def test_reveal_without_a_guess_shows_nothing_of_the_answer(capsys, monkeypatch):
    assert reveal(_unexplained(monkeypatch), None, 3.7485) is None
    out = capsys.readouterr().out
    assert "no guess yet" in out and "3.7" not in out


def test_reveal_numeric_guesses_use_the_tolerance(capsys):
    reveal("02.P1", 3.6, 3.7485)                      # tolerance 0.25
    assert "✅" in capsys.readouterr().out
    reveal("02.P1", 2.0, 3.7485)
    out = capsys.readouterr().out
    assert "❌" in out and "3.748" in out
    reveal("01.P1", 3.5, 4.0)                         # epochs: exact
    assert "❌" in capsys.readouterr().out
    reveal("02.P1", "three", 3.7485)
    assert "write a number" in capsys.readouterr().out


def test_reveal_choices(capsys):
    reveal("04.P1", " Not Zero ", "not zero")
    assert "✅" in capsys.readouterr().out
    reveal("04.P1", "zero", "not zero")
    assert "❌" in capsys.readouterr().out
    reveal("04.P1", "maybe", "not zero")
    assert "not one of the choices" in capsys.readouterr().out


def test_reveal_shows_the_extra_output_only_after_a_guess(monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", shown.append)
    unexplained = _unexplained(monkeypatch)
    reveal(unexplained, None, 4.0, show="table")
    assert shown == []
    reveal(unexplained, 4, 4.0, show="table")
    assert shown == ["table"]
    reveal("01.P1", None, 4.0, show="explained")           # with a why, "Run all" shows it after the note
    assert shown == ["table", "explained"]


def test_every_prediction_is_numeric_or_a_choice_and_unknown_ids_fail():
    for pred in PREDICTIONS.values():
        assert (pred.tolerance is not None) != bool(pred.choices)      # exactly one of the two
    with pytest.raises(ValueError, match="^prediction_id: unknown prediction"):
        reveal("99.P1", 1, 1)


def test_an_explanation_comes_only_with_the_answer(capsys, monkeypatch):
    """A prediction's ``why`` is printed after the measured value; without a guess ("Run all") the answer
    comes after a note that still reads as unanswered; one without a ``why`` reveals nothing unguessed."""
    why = PREDICTIONS["01.P1"].why
    assert why
    reveal("01.P1", 3, 4)
    out = capsys.readouterr().out
    assert out.index("the experiment gives 4") < out.index("Why: " + why)
    reveal("01.P1", None, 4)
    out = capsys.readouterr().out
    assert "no guess yet" in out and "✅" not in out and "❌" not in out
    assert out.index('"Run all"') < out.index("The experiment gives 4.") < out.index("Why: " + why)
    reveal(_unexplained(monkeypatch), None, 0.5)
    out = capsys.readouterr().out
    assert "no guess yet" in out and "0.5" not in out.split("\n", 1)[1] and "Why:" not in out


def test_an_unknown_run_names_one_known_knob_and_its_answer_follows_it(monkeypatch, capsys):
    from grpo_edu.course.aids import exercise_bank
    from grpo_edu.course.aids.exercises import mystery_settings

    settings = mystery_settings("05.7")
    assert len(settings) == 1 and set(settings) <= set(exercise_bank.KNOBS)
    settings.clear()                                                   # a copy: the bank is untouched
    assert mystery_settings("05.7")
    monkeypatch.setitem(exercise_bank.MYSTERY_RUNS, "05.7", {"beta": 1.0})
    assert check("05.7", "beta") is True and check("05.7", "temperature") is False
    capsys.readouterr()
    with pytest.raises(ValueError, match="^exercise_id: '05.1' has no unknown run"):
        mystery_settings("05.1")


def test_lesson_08_shows_the_flags_its_exercise_checks():
    import ast
    import json
    import re

    from grpo_edu.course.aids.exercise_bank import PASS_FLAGS
    from grpo_edu.course.classroom.answers import lesson_file

    cells = json.loads(lesson_file("08").read_text(encoding="utf-8"))["cells"]
    source = next("".join(c["source"]) for c in cells if 'check("08.5"' in "".join(c["source"]))
    shown = ast.literal_eval(re.search(r"flags = (\[.*?\]\])", source, re.S).group(1))
    assert shown == PASS_FLAGS
