"""The symptoms ``diagnose`` looks for: one rule per symptom, each reading a run's logged metrics.

A rule takes the run's :class:`~grpo_edu.beyond.symptom_log.Log` (its history cut into a start and an end
window; ``symptom_log`` also holds the evidence and fix helpers) and returns a ``Finding`` or None. Each rule's threshold is in its docstring; :data:`RULES` lists them
in the order ``diagnose`` runs them, with the metrics each needs. ``grpo_edu.beyond.diagnose``
runs the rules, ranks what they find and reports it.

Windows: with n logged steps, the *start* is the first max(3, ⌈n/10⌉) steps and the *end*
the last max(3, ⌈n/4⌉). Rules assume rewards on a 0–1 scale (a right answer pays 1), as every
course task's does; a reward below 0 is taken as the floor instead of 0.
"""

import statistics

from grpo_edu.beyond.run_log import BLOWN_UP, HUGE, NON_FINITE
from grpo_edu.beyond.symptom_log import Finding
from grpo_edu.beyond.symptom_log import evidence as _evidence, lower_lr as _lower_lr, moving_average as _moving_average
from grpo_edu.beyond.symptom_log import number as _number, raise_beta as _raise_beta
from grpo_edu.beyond.symptom_log import low_temperature as _low_temperature, raise_temperature as _raise_temperature
from grpo_edu.common import _checks

COLLAPSE_FRACTION = 0.25
"""reward_collapse: the end's mean reward is at most this fraction of the way from the floor to the peak."""


# --- the rules -----------------------------------------------------------------------------
def _non_finite(log):
    """A metric was logged as NaN or ±∞, or past ±10¹² (``run_log.HUGE``), at some step: the run
    diverged there (any such step).

    Severity 200, above every other finding: nothing after that step can be read as learning.
    """
    bad = [(r["step"], r.get(NON_FINITE, []) + r.get(BLOWN_UP, [])) for r in log.rows
           if r.get(NON_FINITE) or r.get(BLOWN_UP)]
    if not bad:
        return None
    first, keys = bad[0]
    names = sorted({k for _, ks in bad for k in ks})
    huge = f"astronomically large (±{HUGE:.0e} or more)".replace("e+", "e")
    kinds = [what for flag, what in ((NON_FINITE, "NaN or ∞"), (BLOWN_UP, huge)) if any(r.get(flag) for r in log.rows)]
    became = " or ".join(kinds)
    summary = (f"{', '.join(names)} not finite ({became}) at {len(bad)} of {log.n} logged steps, first at step "
               f"{first} ({', '.join(keys)})")
    evidence = _evidence(keys[0], [(s, 1.0) for s, _ in bad], summary)
    return Finding(
        "non_finite", f"the run diverged at step {first}: {', '.join(keys)} became {became}", evidence,
        ["a learning rate too high for the model (the update overshoots until the numbers overflow)",
         "a reward of NaN or ∞ from a reward function", "no gradient clipping (max_grad_norm 0)"],
        [_lower_lr(log, 10, "smaller steps: the update no longer overshoots"),
         ("max_grad_norm", "0 → 1.0" if log.config.get("max_grad_norm") == 0 else "keep it on, e.g. 1.0",
          "clipping each update's gradient norm: one bad batch cannot blow the weights up"),
         ("reward functions", "check they return finite numbers (the trainer refuses NaN up front)",
          "a NaN reward makes every advantage NaN")],
        "09_diagnostics_clinic", 200.0)


def _no_reward_signal(log):
    """Rewards never vary: mean dead_group_fraction over the start ≥ 0.9.

    Reported as ``reward_always_zero`` when the start's mean reward is within 0.05 of 0 (no
    answer is ever paid), else as ``no_reward_signal`` (a constant, or groups all right).
    Severity 100 when the end is as dead (≥ 0.9), 50 when the run got out of it.
    """
    dead = log.mean(log.head, "dead_group_fraction")
    if dead is None or dead < 0.9:
        return None
    reward = log.mean(log.head, "reward_mean")
    tail_dead = log.mean(log.tail, "dead_group_fraction") or 0.0
    summary = (f"dead-group fraction {dead:.2f} over {log.span(log.head)} (rule: ≥ 0.9); mean reward there "
               f"{reward:.3g}, spread of rewards (reward_std) {log.mean(log.head, 'reward_std') or 0:.3g}; "
               f"dead-group fraction over the last {len(log.tail)} steps {tail_dead:.2f}")
    evidence = _evidence("dead_group_fraction", log.points(log.head, "dead_group_fraction"), summary, 0.9)
    dead_rows = [r for r in log.rows if (r.get("dead_group_fraction") or 0) >= 0.9]
    accuracy = [v for _, v in log.points(dead_rows, "accuracy")]      # what the task's checker saw meanwhile
    fixes = [("num_generations", log.change("num_generations", 2, "raise it, e.g. 8 → 16"),
              "more tries per prompt: a group is all wrong with probability (1 − p)^G, all right with p^G"),
             _raise_temperature(log, "more varied answers, so a group's answers (and rewards) differ more often")]
    if _low_temperature(log):
        fixes.reverse()                                 # the sampler is the cause: warm it first
    severity = 100 if tail_dead >= 0.9 else 50
    if abs(reward) <= 0.05:
        return _never_paid(log, evidence, accuracy, fixes, severity)
    return _constant_reward(log, reward, evidence, accuracy, fixes, severity)


def _never_paid(log, evidence, accuracy, fixes, severity):
    """The ``reward_always_zero`` finding: causes ordered by the evidence for them."""
    causes = [f"the task is too hard for the model: no answer right in {log.config.get('num_generations', 'G')} tries",
              "the answers never reach the format the reward checks (a missing tag or prefix, a cut-off answer)",
              "a broken reward function that returns 0 for everything (e.g. it compares a str with an int)"]
    if accuracy and max(accuracy) > 0.05:
        causes.insert(0, f"the task's own checker counted up to {max(accuracy):.0%} right answers while the "
                         "reward stayed 0: the reward function disagrees with the checker")
    limit, length = log.config.get("max_completion_length"), log.mean(log.head, "completion_length")
    if limit and length is not None and length >= 0.98 * limit:
        causes.insert(0, f"every answer used all {limit} tokens it was allowed: they are cut off before the "
                         "end (see completion_truncated)")
    fixes = [("reward functions", "call each on a known right answer: it must pay more than a wrong one",
              "a reward that never pays gives GRPO nothing to prefer"),
             ("task / dataset", "start from prompts the model sometimes solves (measure each prompt's pass rate)",
              "GRPO can only reinforce answers it samples (lesson 08 §5)"), *fixes]
    return Finding("reward_always_zero", "From the start nearly every group's rewards were all 0: almost no answer "
                   "was paid, so almost every advantage was 0 and the model had nothing to learn from.",
                   evidence, causes, fixes, "03_zero_sigma", severity)


def _constant_reward(log, reward, evidence, accuracy, fixes, severity):
    """The ``no_reward_signal`` finding: equal rewards within groups, at a value other than 0.

    Causes are ordered by the evidence: a reward component constant on every step; a config τ
    below 0.7; a reward that *is* the checker's accuracy (then the answers, not the reward, are
    alike); a checker accuracy that moved while the reward did not (the reward ignores it).
    """
    constant = [k for k in log.head[0] if k.startswith("reward/")
                and len({round(v, 9) for _, v in log.points(log.rows, k)}) == 1]
    causes = [f"{', '.join(constant)} returned the same mean reward on every step"] if constant else []
    pairs = [(r["reward_mean"], r["accuracy"]) for r in log.rows if r.get("accuracy") is not None]
    reward_is_accuracy = bool(pairs) and all(abs(a - b) < 1e-9 for a, b in pairs)
    if _low_temperature(log):
        causes.append(f"temperature = {_number(log.config['temperature'])} is low: the model nearly always samples "
                      "its most likely answer, so the G answers of a group are identical")
    if reward >= 0.95 and (reward_is_accuracy or not accuracy or max(accuracy) - min(accuracy) < 0.05):
        causes.append("the task is already solved: every answer in every group is right")
    elif reward_is_accuracy:
        causes.append("the reward is the checker's accuracy, yet nearly every group was all right or all wrong: "
                      "the G answers to a prompt were the same")
    elif accuracy and max(accuracy) - min(accuracy) >= 0.05:
        causes.append(f"the task's checker saw accuracy move between {min(accuracy):.0%} and {max(accuracy):.0%} "
                      f"while the reward stayed at {reward:.3g}: the reward ignores whether the answer is right")
    if not reward_is_accuracy:
        causes.append("a reward function returns the same value whatever the completion")
        fixes = [("reward functions", "make the reward depend on the completion: a right and a wrong answer must "
                  "score differently", "GRPO learns only from differences within a group"), *fixes]
    if not _low_temperature(log):
        causes.append("a temperature so low (or a model so sure) that the G answers are identical")
    return Finding("no_reward_signal", f"From the start nearly every group's answers got equal rewards (mean "
                   f"reward {reward:.3g}): every advantage was 0, so the model learned nothing.",
                   evidence, causes, fixes, "03_zero_sigma", severity)


def _few_live_groups(log):
    """Many dead groups from the start: mean dead_group_fraction over the start in [0.5, 0.9).

    Not an error (the run may still learn), but half the batch or more gives no signal. With
    success rate p, a group of G is dead with probability p^G + (1 − p)^G, at least 2·0.5^G;
    for G = 2 that is at least 50 %. Severity 15 (below every other finding).
    """
    dead = log.mean(log.head, "dead_group_fraction")
    if dead is None or not 0.5 <= dead < 0.9:
        return None
    reward = log.mean(log.head, "reward_mean")
    G = log.config.get("num_generations")
    summary = f"dead-group fraction {dead:.2f} over {log.span(log.head)} (rule: 0.5 to 0.9)"
    causes = ["G (num_generations) too small: a group of G answers is all right or all wrong with probability "
              "p^G + (1 − p)^G, at least 2 × 0.5^G", "a low temperature: the G answers are often the same",
              "prompts far too easy or far too hard for the model (p near 1 or 0)"]
    if isinstance(G, int) and reward is not None and 0 <= reward <= 1:
        expected = reward ** G + (1 - reward) ** G
        summary += f"; with G = {G} and a mean reward of {reward:.2f}, p^G + (1 − p)^G = {expected:.2f}"
        if G <= 4:
            causes.insert(0, causes.pop(0).replace("G (num_generations) too small",
                                                   f"G = {G} is small: even at p = 0.5 a group is dead with "
                                                   f"probability {2 * 0.5 ** G:.2f}"))
    return Finding(
        "few_live_groups", f"From the start {dead:.0%} of the groups were dead (all answers scored the same): that "
        "share of every batch was sampled and scored but taught nothing.",
        _evidence("dead_group_fraction", log.points(log.head, "dead_group_fraction"), summary, 0.5), causes,
        [("num_generations", f"{G} → 8" if isinstance(G, int) and G < 8 else log.change("num_generations", 2, "raise it"),
          "fewer all-same groups; 4–8 is the common choice (lesson 09b measures it)"),
         ("temperature", log.change("temperature", 1.2, "raise it a little, e.g. 1.0 → 1.2"),
          "more varied answers within a group"),
         ("task / dataset", "drop prompts the model always or never solves", "lesson 03 §8")],
        "03_zero_sigma", 15)


def _no_progress(log):
    """No progress: at least 30 logged steps, live groups (mean dead_group_fraction over the
    start < 0.5, or not logged), and the mean reward of the last quarter of the steps within
    0.05 of the first quarter's, which is below 0.9. Severity 45: a run that learns nothing
    outranks a single gradient spike (40).

    A reward that moves neither up nor down while groups give signal means the updates are
    too small to matter: a KL penalty (β) that outweighs the advantages, or a tiny learning rate.
    Quarters, not the usual start window: the rule compares two means, and 128 answers a step
    make each step's mean reward noisy (±0.04), so longer windows are needed to call it flat.
    With β ≥ 0.5 a larger learning rate is not offered: the leash, not the step's size, holds the
    policy, and on the adder at β = 10 three times the rate lowered the held-out accuracy on seeds
    0–2 (lesson 09b measures it).
    """
    if log.n < 30:
        return None
    quarter = log.n // 4
    first, last = log.rows[:quarter], log.rows[-quarter:]
    start, end = log.mean(first, "reward_mean"), log.mean(last, "reward_mean")
    dead = log.mean(log.head, "dead_group_fraction")
    if (dead is not None and dead >= 0.5) or start >= 0.9 or abs(end - start) >= 0.05:
        return None
    kl = log.mean(log.tail, "kl")
    summary = (f"mean reward {start:.3g} over {log.span(first)}, {end:.3g} over {log.span(last)} (rule: "
               f"within 0.05)" + ("" if dead is None else f"; dead-group fraction at the start {dead:.2f}")
               + ("" if kl is None else f"; mean KL at the end {kl:.3g}"))
    beta, lr = log.config.get("beta"), log.config.get("learning_rate")
    causes = ["beta too large: the KL penalty pulls the policy back to π_ref as hard as the advantages push",
              "learning_rate too small: each update moves the policy too little",
              "max_grad_norm too small: every update is clipped to a tiny step",
              "too few steps for the model to move"]
    large_beta = _checks.is_finite_number(beta) and beta >= 0.5
    if large_beta:
        causes[0] = (f"beta = {_number(beta)} is large: " + _beta_against_advantages(log)
                     + ", so the policy stays at π_ref" + ("" if kl is None else f" (its KL is {kl:.3g})"))
        causes[1] += " (a cause only once beta is back near 0.04)"
    elif _checks.is_finite_number(lr) and lr < 1e-4:
        causes.insert(0, causes.pop(1).replace("learning_rate too small", f"learning_rate = {_number(lr)} is small"))
    fixes = [("beta", f"{_number(beta)} → 0.04 (DeepSeekMath's value)" if _checks.is_finite_number(beta) and beta > 0.04
              else "lower it, e.g. 0.04 (or 0)", "a looser leash: the advantages can move the policy"),
             ("learning_rate", log.change("learning_rate", 3, "raise it, e.g. × 3"), "larger updates"),
             ("total_training_steps", "more, once the reward has started to rise", "some tasks start slowly")]
    if large_beta:       # a faster step against the same leash: not a cure (see the docstring)
        fixes = [fix for fix in fixes if fix[0] != "learning_rate"]
    return Finding(
        "no_progress", f"The reward stayed flat ({start:.2f} → {end:.2f}) although the groups gave a learning "
        "signal: the updates are too small or pulled back.",
        _evidence("reward_mean", log.points(log.rows, "reward_mean"), summary), causes, fixes, "05_toy_grpo", 45)


def _dead_groups_late(log):
    """Dead groups take over late: mean dead_group_fraction over the end ≥ 0.5, and ≥ 0.3 above the start's.

    An end reward above the middle of the run's reward range means the dead groups are
    mostly all right (task mastered). That is what success looks like (lesson 08's default
    run ends near 75 % dead), so it is reported only from 80 % dead on, where G is small for
    the model's accuracy (severity 20). A low end reward means they are mostly all wrong
    (severity 40, from 50 % on).
    """
    start, end = log.mean(log.head, "dead_group_fraction"), log.mean(log.tail, "dead_group_fraction")
    if start is None or end is None or end < 0.5 or end - start < 0.3:
        return None
    rewards = [v for _, v in log.points(log.rows, "reward_mean")]
    end_reward = log.mean(log.tail, "reward_mean")
    mastered = end_reward >= (max(rewards) + min(rewards)) / 2
    if mastered and end < 0.8:
        return None
    dead = log.points(log.rows, "dead_group_fraction")
    smooth = _moving_average([v for _, v in dead], max(3, log.n // 20))
    crossed = next((s for (s, _), m in zip(dead, smooth) if m >= 0.5), log.tail[0]["step"])
    summary = (f"dead-group fraction {start:.2f} over {log.span(log.head)}, {end:.2f} over {log.span(log.tail)} "
               f"(rule: end ≥ 0.5 and ≥ start + 0.3); its moving average passed 0.5 at step {crossed}; "
               f"mean reward at the end {end_reward:.3g}")
    evidence = _evidence("dead_group_fraction", log.points(log.tail, "dead_group_fraction"), summary, 0.5)
    if mastered:
        gain = end_reward - log.mean([r for r in log.rows if r["step"] <= crossed][-len(log.head):], "reward_mean")
        return Finding(
            "dead_groups_late", f"By the end {end:.0%} of the groups were dead, up from {start:.0%}, with the reward "
            "high: most groups are all right, so the late steps teach little. Expected late in a run that "
            "succeeds (lesson 08's default run ends near 75 %); a sign to stop sooner or make the task harder.",
            evidence,
            ["the model has mastered these prompts: at success rate p a group is all right with probability p^G "
             "(p = 0.95, G = 8: 66 %)", "G is small for a model this accurate"],
            [("total_training_steps", f"fewer: the dead fraction passed 0.5 at step {crossed}, and the reward rose "
              f"by only {gain:.2g} after it", "each later step trains on a few live groups, diluted by dead ones"),
             ("num_generations", log.change("num_generations", 2, "raise it, e.g. 8 → 16"),
              "a larger group is less often all right"),
             ("task / dataset", "harder prompts, or drop the prompts that are always solved", "lesson 03 §8")],
            "03_zero_sigma", 20)
    return Finding(
        "dead_groups_late", f"By the end {end:.0%} of the groups were dead, up from {start:.0%}, with the reward low: "
        "most groups are all wrong, so the run cannot recover by itself.", evidence,
        ["the policy got worse during the run (see reward_collapse if it is listed)",
         "the later prompts are harder than the early ones (an ordered dataset)"],
        [_lower_lr(log, 3, "smaller updates are less likely to break what the model could do"),
         ("task / dataset", "shuffle the prompts, or mix easier ones in", "every step needs some groups that "
          "are sometimes right")], "03_zero_sigma", 40)


def _reward_collapse(log):
    """Collapse: the reward's moving average (window max(3, n/20)) peaks before the end, and the
    end's mean reward is back within a quarter of the way from the floor to that peak.

    The floor is 0 (or the lowest reward, if negative); the peak must be ≥ 0.1 above it.
    """
    points = log.points(log.rows, "reward_mean")
    values = [v for _, v in points]
    window = max(3, log.n // 20)
    smooth = _moving_average(values, window)
    i_peak = max(range(len(smooth)), key=smooth.__getitem__)
    floor, peak, end = min(0.0, min(values)), smooth[i_peak], log.mean(log.tail, "reward_mean")
    threshold = floor + COLLAPSE_FRACTION * (peak - floor)
    if i_peak >= log.n - len(log.tail) or peak - floor < 0.1 or end > threshold:
        return None
    summary = (f"the reward's moving average ({window} steps) peaked at {peak:.3g} at step {points[i_peak][0]}; "
               f"{log.span(log.tail)} average {end:.3g} (rule: ≤ {threshold:.3g}, a quarter of the way from "
               f"{floor:g} to the peak)")
    return Finding(
        "reward_collapse", f"The reward fell from {peak:.2f} to {end:.2f} and stayed there: the policy collapsed.",
        _evidence("reward_mean", log.points(log.tail, "reward_mean"), summary, threshold,
                  peak={"step": points[i_peak][0], "value": peak}),
        ["learning_rate too high: a few large updates moved the policy to where it is almost never right, and "
         "all-wrong groups give no signal to come back (lesson 05: lr 2e-3 collapses within 30 steps)",
         "a reward function that changed or broke mid-run"],
        [_lower_lr(log, 10, "lesson 05's run at 3e-4 learns where 2e-3 collapses; in lesson 09 neither β = 0.4 "
                   "nor gradient accumulation prevented this collapse, only a lower rate did"),
         ("max_grad_norm", "keep it at 1.0 (0 turns clipping off)", "bounds the size of each update")],
        "05_toy_grpo", 90)


def _reward_oscillation(log):
    """Oscillation: block means of the reward (blocks of max(3, n/20) steps) jump by at least a
    quarter of the reward's range, at least twice up and twice down."""
    values = [v for _, v in log.points(log.rows, "reward_mean")]
    w = max(3, log.n // 20)
    blocks = [(log.rows[min(i + w, log.n) - 1]["step"], sum(values[i:i + w]) / len(values[i:i + w]))
              for i in range(0, log.n, w)]
    scale = max(values) - min(0.0, min(values))
    jumps = [b[1] - a[1] for a, b in zip(blocks, blocks[1:])]
    ups, downs = sum(j >= 0.25 * scale for j in jumps), sum(j <= -0.25 * scale for j in jumps)
    if scale <= 0 or ups < 2 or downs < 2:
        return None
    summary = (f"the mean reward of blocks of {w} steps jumped by ≥ {0.25 * scale:.3g} (a quarter of its range) "
               f"{ups} times up and {downs} times down (rule: ≥ 2 each)")
    return Finding(
        "reward_oscillation", "The reward swings up and down by large amounts instead of climbing: training is "
        "unstable.", _evidence("reward_mean", blocks, summary),
        ["learning_rate too high: updates overshoot and undo each other",
         "few completions per step (batch_size × num_generations), so each step's estimate is noisy",
         "a reward with outliers (check the reward for abnormal values)"],
        [_lower_lr(log, 3, "smaller steps stop the overshooting (lower it, and train longer)"),
         ("batch_size", log.change("batch_size", 2, "raise it, e.g. 16 → 32"), "more prompts per step average "
          "out the noise"), _raise_beta(log)],
        "05_toy_grpo", 60)


def _grad_norm_spikes(log):
    """Spikes: a grad_norm above 10× the median of the max(5, n/10) steps before it (at least 3 of them).

    Both our grad_norm and TRL's are the norm before clipping. Severity 40, 50 or 60 for 1, 2, ≥ 3 spikes."""
    points = [(s, v) for s, v in log.points(log.rows, "grad_norm") if v > 0]
    w = max(5, log.n // 10)
    spikes = []
    for i, (step, value) in enumerate(points):
        before = [v for _, v in points[max(0, i - w):i]]
        if len(before) >= 3 and value > 10 * statistics.median(before):
            spikes.append((step, value))
    if not spikes:
        return None
    summary = (f"{len(spikes)} step(s) with a gradient norm above 10× the median of the {w} steps before: "
               + ", ".join(f"step {s}: {v:.3g}" for s, v in spikes[:5]))
    causes = ["learning_rate too high", "a rare answer with a very low probability and a large advantage "
              "(one right answer in a group of wrong ones gets Â = (G − 1)/√G)"]
    beta = log.config.get("beta")
    if _checks.is_finite_number(beta) and beta >= 0.5:
        causes.insert(0, f"beta = {_number(beta)} is large: the KL term's gradient, β × ∇KL, jumps when one sampled "
                         "answer is far from π_ref (lower beta, not the learning rate)")
    if log.config.get("max_grad_norm") == 0:
        causes.insert(0, "max_grad_norm = 0: gradient clipping is off, so a spike becomes a huge update")
    return Finding(
        "grad_norm_spikes", "The gradient norm spiked far above its usual size: single updates were unusually large.",
        _evidence("grad_norm", spikes, summary), causes,
        [("max_grad_norm", "1.0 (0 turns clipping off)", "clipping bounds each update whatever the spike"),
         _lower_lr(log, 3, "smaller updates")],
        "05_toy_grpo", 30 + 10 * min(3, len(spikes)))


def _kl_runaway(log):
    """KL running away: the end's mean kl > 1 nat per token (severity 70), or > 0.3 and more than
    twice the mean of the steps just before the end window (still climbing; severity 45)."""
    if not log.has("kl"):
        return None
    end = log.mean(log.tail, "kl") or 0.0
    before = log.rows[max(0, log.n - 2 * len(log.tail)):log.n - len(log.tail)]
    earlier = log.mean(before, "kl") if before else None
    if end > 1.0:
        severity, rule = 70, "rule: > 1 nat per token"
    elif end > 0.3 and earlier is not None and end > 2 * earlier:
        severity, rule = 45, f"rule: > 0.3 and > 2 × {earlier:.3g}, the mean of {log.span(before)}"
    else:
        return None
    summary = f"mean KL to π_ref over {log.span(log.tail)}: {end:.3g} nat per token ({rule})"
    beta = f" = {_number(log.config['beta'])}" if "beta" in log.config else ""
    causes = ["learning_rate too high: large updates carry the policy far from π_ref",
              f"beta (β{beta}) too small to hold it",
              "a reward the policy exploits by moving far (see reward_up_accuracy_down)"]
    return Finding(
        "kl_runaway", f"The KL to the reference model grew to {end:.2f} nat per token: the policy has drifted far from "
        "where it started (in lesson 08's healthy run of the bundled model, β = 0.04, the KL's 50-step means "
        "were 0.1–0.2).",
        _evidence("kl", log.points(log.tail, "kl"), summary, 1.0 if severity == 70 else max(0.3, 2 * earlier)),
        causes,
        [_raise_beta(log), _lower_lr(log, 3, "smaller steps drift less")],
        "04b_kl_and_loss_types", severity)


def _entropy_collapse(log):
    """Entropy collapse: the end's mean entropy < 0.1 × the start's. Severity 35, or 55 when the
    end's dead_group_fraction is ≥ 0.5 too (nothing left to compare)."""
    start, end = log.mean(log.head, "entropy"), log.mean(log.tail, "entropy")
    if not start or start <= 0 or end is None or end >= 0.1 * start:
        return None
    dead = log.mean(log.tail, "dead_group_fraction")
    summary = (f"mean entropy {start:.3g} over {log.span(log.head)}, {end:.3g} over {log.span(log.tail)} "
               f"(rule: end < 0.1 × start)" + ("" if dead is None else f"; dead-group fraction at the end {dead:.2f}"))
    lost = dead is not None and dead >= 0.5
    symptom = (f"The entropy fell to {end / start:.0%} of its start: the model samples nearly the same answer every "
               "time" + (f", and {dead:.0%} of the groups are dead, so GRPO has little left to compare." if lost
                         else "."))
    return Finding(
        "entropy_collapse", symptom,
        _evidence("entropy", log.points(log.tail, "entropy"), summary, 0.1 * start),
        ["the policy became (nearly) deterministic: fine for a solved task, but nothing is explored any more",
         "a sampling temperature below 1", "a learning rate or run length that sharpened it too far",
         "beta too small to keep it near the more varied start"],
        [("temperature", log.change("temperature", 1.2, "raise it, e.g. 1.0 → 1.2"),
          "flattens the sampling distribution (lesson 05 §4.4: τ = 1.2 keeps more entropy and fewer dead groups)"),
         _raise_beta(log),
         ("epsilon_high", "raise it above epsilon, e.g. 0.28 (clip-higher)",
          "lets a rare token with Â > 0 rise further before the clip stops it (DAPO; lesson 12); it acts only when "
          "the clip does, with num_iterations > 1"),
         ("entropy_coef", "add a small bonus, e.g. 0.01 (TRL: entropy_coef)",
          "pays the policy for keeping its distribution spread (lesson 11); a large one slows learning"),
         ("total_training_steps", "stop earlier", "sharpening continues as long as the run does")],
        "05_toy_grpo", 55 if lost else 35)


def _beta_against_advantages(log):
    """What β is weighed against. Divided by σ (scale 'group' or 'batch' under the default estimator), Â is about ±1
    whatever the reward's scale, so the tolerable β does not depend on it (reinforce_plus_plus_baseline whitens over
    the batch: the same); with scale='none' (Dr. GRPO) or advantage_estimator='rloo' (no σ), Â carries the
    reward's units."""
    scale, estimator = log.config.get("scale", "group"), log.config.get("advantage_estimator", "grpo")
    if scale == "none" or estimator == "rloo":
        return (f"with scale={scale!r} and advantage_estimator={estimator!r} the advantages keep the reward's "
                "units, so on a 0–1 reward the KL term's gradient outweighs the policy term's (a reward 10× larger "
                "would tolerate a β 10× larger)")
    return ("with advantages divided by σ (about ±1 in every live group, whatever the reward's scale), the KL "
            "term's gradient outweighs the policy term's")


MASKING_USELESS_FROM = 0.9
"""Share of cut completions from which ``completion_truncated`` no longer suggests mask_truncated_completions:
masking that many answers would remove nearly the whole batch's gradient, the right answers' included."""


NEVER_ENDS_FROM = 0.99
"""``never_ends``: the share of answers cut at the limit, at the start and at the end, from which the model is
taken never to write its end token."""


def _never_ends(log):
    """The model never ends: ``truncated_fraction`` ≥ :data:`NEVER_ENDS_FROM` over the start AND the end, and the
    mean reward over the run within 0.05 of 0 (no answer arrives, so none is paid): severity 110, above
    ``reward_always_zero``, whose cause this is. Lesson 16's clinic: a prompt passed as a plain string (no chat
    template), an end token other than the one the template writes, or the end token masked out of the loss."""
    head, tail = log.mean(log.head, "truncated_fraction"), log.mean(log.tail, "truncated_fraction")
    reward = log.mean(log.rows, "reward_mean")
    if head is None or tail is None or min(head, tail) < NEVER_ENDS_FROM or reward is None or abs(reward) > 0.05:
        return None
    limit = log.config.get("max_completion_length")
    summary = (f"{head:.0%} of answers cut at the length limit{f' ({limit} tokens)' if limit else ''} without an "
               f"end token over {log.span(log.head)}, {tail:.0%} over {log.span(log.tail)} (rule: ≥ "
               f"{NEVER_ENDS_FROM:.0%} at both); mean reward {reward:.3g}")
    return Finding(
        "never_ends", "The model never ends: every answer runs to max_completion_length without its end token, "
        "so no answer is complete, none is paid, and the run learns nothing.",
        _evidence("truncated_fraction", log.points(log.rows, "truncated_fraction"), summary, NEVER_ENDS_FROM),
        ["the prompt was passed as a plain string: the chat template was skipped, no assistant turn was opened, "
         "and the model never meets the place where it learned to write <|im_end|>",
         "tokenizer.eos_token is not the token the template closes a turn with, so the sampler never stops on it",
         "the end token was masked out of training (pad_token = eos_token with a mask built from padding), so "
         "the model was never taught to stop"],
        [("prompts", "conversational rows rendered through the chat template (grpo_edu.training.text.chat."
          "rendered_rows; in TRL: a 'prompt' column of messages)", "the model answers where it learned to"),
         ("tokenizer", "check_chat_tokenizer(tokenizer)", "refuses an eos_token the template does not write"),
         ("pad_token", "a token of its own, never eos_token", "the end token stays in the loss")],
        "16_real_text", 110)


def _completion_length(log):
    """Never ending first (:func:`_never_ends`). Truncation: the logged share cut at the limit (``truncated_fraction``, TRL's clipped_ratio) ≥ 0.2
    at the end; or, where no share is logged (config given), mean completion_length ≥ 0.98 ×
    max_completion_length at the start or end: severity 60 (masking is suggested only below a cut share of 90 %).
    A start where many answers ramble past the limit, ended by a run that learned to stop, is not a finding (the
    bundled model's first steps).
    Length collapse: the end's mean length < 0.5 × the start's: severity 50."""
    never = _never_ends(log)
    if never is not None:
        return never
    limit = log.config.get("max_completion_length")
    logged = log.mean(log.tail, "truncated_fraction") is not None
    for rows in (log.tail,) if logged else (log.tail, log.head):
        cut, length = log.mean(rows, "truncated_fraction"), log.mean(rows, "completion_length")
        if cut is not None and cut >= 0.2:
            summary = f"{cut:.0%} of completions cut at the length limit over {log.span(rows)} (rule: ≥ 20 %)"
            evidence = _evidence("truncated_fraction", log.points(rows, "truncated_fraction"), summary, 0.2)
        elif cut is None and limit and length is not None and length >= 0.98 * limit:
            summary = (f"mean completion length {length:.3g} tokens over {log.span(rows)}, max_completion_length "
                       f"{limit} (rule: ≥ 98 % of it)")
            evidence = _evidence("completion_length", log.points(rows, "completion_length"), summary, 0.98 * limit)
        else:
            continue
        # masking helps when some answers are cut; when nearly all are, it would leave almost no gradient at all
        masking = [] if cut is not None and cut >= MASKING_USELESS_FROM else [
            ("mask_truncated_completions", "True", "a cut answer keeps its place in its group's mean and σ but "
             "gets no gradient, so its correct working is not pushed down (DAPO's overlong filtering; lesson 11)")]
        return Finding(
            "completion_truncated", "The completions run into max_completion_length: answers are cut off before "
            "they end, so an answer that needs more tokens can never be right.", evidence,
            ["max_completion_length is too small for the answers the task needs",
             "the model rambles and rarely ends with <eos> (loss_type='grpo' penalises long wrong answers less per "
             "token)"],
            [("max_completion_length", log.change("max_completion_length", 2, "raise it"),
              "room for a whole answer and its <eos>"), *masking,
             ("loss_type", "'dapo' (TRL's default)", "weighs every token equally, removing the length bias")],
            "08_full_grpo_run", 60)
    start, end = log.mean(log.head, "completion_length"), log.mean(log.tail, "completion_length")
    if not start or end is None or end >= 0.5 * start:
        return None
    summary = (f"mean completion length {start:.3g} tokens over {log.span(log.head)}, {end:.3g} over "
               f"{log.span(log.tail)} (rule: end < 0.5 × start)")
    return Finding(
        "length_collapse", f"The completions shrank from {start:.1f} to {end:.1f} tokens on average.",
        _evidence("completion_length", log.points(log.tail, "completion_length"), summary, 0.5 * start),
        ["a reward that pays for brevity, or that an empty answer passes (a format reward)",
         "loss_type='grpo' averages each answer over its own tokens, so a short answer's tokens weigh more",
         "the model learned to end with <eos> at once"],
        [("reward functions", "check what an empty or one-token answer scores", "it should not pay"),
         ("loss_type", "'dapo' or 'dr_grpo'", "no per-answer length normalisation (lesson 04b §4)")],
        "04b_kl_and_loss_types", 50)


def _clip_fraction(log):
    """Clip: the whole run's mean clip_fraction > 0.2 (severity 45); or, with a config of
    num_iterations = 1, > 0.001 at all (severity 65: on-policy, the ratio is 1 and the clip cannot bind)."""
    mean = log.mean(log.rows, "clip_fraction")
    if mean is None:
        return None
    points = log.points(log.rows, "clip_fraction")
    if log.config.get("num_iterations") == 1 and mean > 1e-3:
        summary = f"mean clip fraction {mean:.3g} over all {log.n} steps with num_iterations = 1 (rule: > 0.001)"
        return Finding(
            "clip_on_policy", f"The clip bound on {mean:.1%} of tokens although num_iterations = 1, where π_θold is "
            "the policy being updated, the ratio is exactly 1, and the clip cannot bind.",
            _evidence("clip_fraction", points, summary, 1e-3),
            ["π_θold did not come from the policy being trained: log-probs from another engine (vLLM) or "
             "precision (bf16 sampling, fp32 training), or at another temperature",
             "the config passed to diagnose is not the run's (another num_iterations)"],
            [("num_iterations", "check it is the run's own value", "the rule assumes μ = 1"),
             ("temperature", "the same τ for sampling and for the loss",
              "else π_θold and π_θ differ from the start")],
            "04_clipped_loss", 65)
    if mean <= 0.2:
        return None
    summary = f"mean clip fraction {mean:.3g} over all {log.n} steps (rule: > 0.2)"
    return Finding(
        "clip_fraction_high", f"The clip bound on {mean:.0%} of tokens on average: most of each batch's gradient is "
        "switched off, because the policy moves too far between sampling and updating.",
        _evidence("clip_fraction", points, summary, 0.2),
        ["learning_rate too high for several updates per batch", "too many inner updates (num_iterations)",
         "the sampler's log-probs differ from the trainer's (another engine or precision)"],
        [_lower_lr(log, 3, "each inner update moves the policy less"),
         ("num_iterations", log.change("num_iterations", 0.5, "fewer"), "fewer updates per batch: r stays near 1"),
         ("epsilon_high", "0.28 (DAPO's clip-higher)", "lets rare good tokens grow further before clipping")],
        "04_clipped_loss", 45)


def _reward_up_accuracy_down(log):
    """Reward up, accuracy down. With ≥ 3 held-out evaluations: the last is ≥ 0.05 below the best
    earlier one, and the batch reward after that best evaluation averages more than before it
    (severity 80). Without: the per-step checker accuracy (when it is not the reward itself)
    falls ≥ 0.05 from start to end while the reward rises ≥ 0.1 of its range (severity 75)."""
    if log.evals and len(log.evals) >= 3:
        best = max(log.evals, key=lambda e: e["accuracy"])
        last = log.evals[-1]
        before = [r for r in log.rows if r["step"] <= best["step"]] or log.head
        after = [r for r in log.rows if best["step"] < r["step"] <= last["step"]]
        if last["step"] <= best["step"] or best["accuracy"] - last["accuracy"] < 0.05 or not after:
            return None
        up, down = log.mean(before, "reward_mean"), log.mean(after, "reward_mean")
        if down <= up:
            return None
        when = (f"up to step {best['step']}" if any(r["step"] <= best["step"] for r in log.rows)
                else f"over {log.span(before)}")
        summary = (f"held-out accuracy {best['accuracy']:.3g} at step {best['step']}, {last['accuracy']:.3g} at "
                   f"step {last['step']} (rule: ≥ 0.05 lower); batch reward {up:.3g} {when}, "
                   f"{down:.3g} after {'it' if when.startswith('up') else 'that'}")
        evidence = _evidence("heldout_accuracy", [(e["step"], e["accuracy"]) for e in log.evals], summary,
                             best["accuracy"] - 0.05)
        severity, seen = 80, "held-out accuracy"
    else:
        pairs = [(r["reward_mean"], r["accuracy"]) for r in log.rows if r.get("accuracy") is not None]
        if len(pairs) < log.n or all(abs(a - b) < 1e-9 for a, b in pairs):
            return None                                 # not logged, or the reward *is* the accuracy
        values = [v for _, v in log.points(log.rows, "reward_mean")]
        rise = log.mean(log.tail, "reward_mean") - log.mean(log.head, "reward_mean")
        fall = log.mean(log.head, "accuracy") - log.mean(log.tail, "accuracy")
        scale = max(values) - min(0.0, min(values))
        if rise < 0.1 * scale or fall < 0.05:
            return None
        summary = (f"from {log.span(log.head)} to {log.span(log.tail)} the reward rose by {rise:.3g} (rule: ≥ "
                   f"{0.1 * scale:.3g}) while the checker's accuracy fell by {fall:.3g} (rule: ≥ 0.05)")
        evidence = _evidence("accuracy", log.points(log.rows, "accuracy"), summary)
        severity, seen = 75, "the task checker's accuracy"
    epoch = log.rows[-1].get("epoch")
    return Finding(
        "reward_up_accuracy_down", f"The reward kept rising while {seen} fell: the model is learning what the reward "
        "pays for, not the task.", evidence,
        ["reward hacking: the reward pays for something besides a right answer (a format bonus, a length term, a "
         "loophole in the checker)", f"overfitting to the training prompts (epoch {epoch} at the end)",
         "held-out prompts unlike the training prompts"],
        [("reward functions", "read high-reward answers, close the loophole, weigh correctness higher "
          "(reward_weights)", "the reward must agree with the task"),
         ("eval_every", "e.g. 50", "catch the turn early and keep the checkpoint before it"), _raise_beta(log)],
        "07_reward_design", severity)


RULES = (
    (_non_finite, "every logged metric is finite (no NaN or ∞)", ("reward_mean",)),
    (_no_reward_signal, "rewards vary within groups from the start", ("dead_group_fraction",)),
    (_few_live_groups, "most groups are live from the start", ("dead_group_fraction",)),
    (_dead_groups_late, "dead groups do not take over late", ("dead_group_fraction",)),
    (_reward_collapse, "the reward does not collapse", ("reward_mean",)),
    (_reward_oscillation, "the reward does not swing up and down", ("reward_mean",)),
    (_no_progress, "the reward moves when groups give signal", ("reward_mean",)),
    (_grad_norm_spikes, "the gradient norm does not spike", ("grad_norm",)),
    (_kl_runaway, "the KL to π_ref stays moderate", ("kl",)),
    (_entropy_collapse, "the entropy does not collapse", ("entropy",)),
    (_completion_length, "completions are neither cut at the limit nor shrinking", ("completion_length",)),
    (_clip_fraction, "the clip fraction stays low", ("clip_fraction",)),
    (_reward_up_accuracy_down, "the reward and held-out accuracy do not part ways", ("reward_mean",)),
)
"""(rule, what a pass means, the metrics it needs): every check ``diagnose`` runs, in this order."""
