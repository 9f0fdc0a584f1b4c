"""The exercise bank: every lesson's exercises, with the library call that computes each answer.

``EXERCISES`` holds the self-check exercises (a number, a string or a list; or a function the learner
writes, compared with the library on seeded random inputs). An answer is never typed in by hand: each
``Exercise`` carries a ``solution`` that calls the library when the learner checks. The predict-then-run
questions, ``PREDICTIONS``, live in ``prediction_bank`` (imported here too); ``grpo_edu.course.aids.exercises``
asks both kinds and checks the answers.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from grpo_edu.course.aids import exercise_solutions as solve
from grpo_edu.course.aids.prediction_bank import CLINIC_MENU, PREDICTIONS, Prediction  # noqa: F401 (both banks, one import)


@dataclass(frozen=True)
class Exercise:
    question: str
    """What the learner is asked."""
    solution: Callable[[], Any]
    """Computes the expected answer with grpo_edu (a number, a string or a list of them)."""
    hint: str
    """Shown after a wrong answer."""
    tolerance: float = 1e-3
    """Absolute tolerance for numeric answers."""


@dataclass(frozen=True)
class CodeExercise:
    question: str
    """What function the learner is asked to write, and its signature."""
    reference: Callable[..., Any]
    """The library's version: called with the same arguments as the learner's function."""
    inputs: Callable[[np.random.Generator], tuple]
    """Draws one tuple of arguments (numpy arrays / numbers) from a seeded generator."""
    hint: str
    """Shown after a wrong result."""
    trials: int = 20
    """How many random inputs are tried (seeded, so every run tries the same ones)."""
    tolerance: float = 1e-6
    """Absolute tolerance per element."""


MYSTERY_RUNS = {"05.7": {"temperature": 0.5}}
"""The runs a learner diagnoses from their panels: exercise id → the one setting changed from the lesson's baseline."""
KNOBS = {"num_generations": "G", "learning_rate": "learning rate", "beta": "beta", "temperature": "temperature"}
"""The names a learner may answer with, for the settings a mystery run can change."""

PASS_FLAGS = [[0, 0, 1, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0], [1, 1, 1, 0, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0, 0, 0],
              [0, 1, 0, 0, 0, 0, 0, 0]]
"""Exercise 08.5's right/wrong flags: 5 prompts × 8 samples (lesson 08 prints the same table)."""

EXERCISES: dict[str, Any] = {
    # lesson 00: watch GRPO learn
    "00.1": Exercise("A group of G = 8 answers to one prompt scored [0, 0, 1, 0, 0, 0, 0, 0]: one right, seven wrong. "
                     "How many of the eight answers does the update make less likely?",
                     lambda: sum(a < 0 for a in solve.adv([0, 0, 1, 0, 0, 0, 0, 0])),
                     "an answer becomes less likely when it scored below its group's mean (Â < 0)."),
    "00.2": Exercise("The stages of one GRPO step, shuffled: 'update', 'score', 'prompts', 'advantage', 'sample'. "
                     "Write them as a list in the order a step runs them.",
                     solve.loop_stages,
                     "the loop diagram of section 2: the policy samples answers to the prompts, then the reward "
                     "program scores them, and only then can each be compared with its group."),
    # lesson 01: batch, step, epoch
    "01.1": Exercise("A dataset has 3000 prompts and batch_size = 12. How many steps make one epoch?",
                     lambda: solve.schedule(dataset_size=3000, batch_size=12, num_generations=8,
                                       total_epochs=1).steps_per_epoch,
                     "steps per epoch = dataset_size // batch_size."),
    "01.2": Exercise("3000 prompts, batch_size = 12, G = 8, total_epochs = 5, total_training_steps = 600. "
                     "How many steps does the run take?",
                     lambda: solve.schedule(dataset_size=3000, batch_size=12, num_generations=8, total_epochs=5,
                                       total_training_steps=600).total_steps,
                     "the run stops at whichever limit comes first: compare 600 with 5 × steps_per_epoch."),
    "01.3": Exercise("batch_size = 6, G = 8, micro_batch_size = 16. How many gradient-accumulation passes "
                     "make one optimizer step?",
                     lambda: solve.schedule(dataset_size=600, batch_size=6, num_generations=8, total_epochs=1,
                                       micro_batch_size=16).gradient_accumulation_steps,
                     "a step holds batch_size × G completions; each pass handles micro_batch_size of them."),
    "01.4": Exercise("1000 prompts, batch_size = 64. How many prompts are left out of every epoch?",
                     lambda: solve.schedule(dataset_size=1000, batch_size=64, num_generations=8,
                                       total_epochs=1).dropped_per_epoch,
                     "the incomplete last batch is dropped: dataset_size % batch_size."),
    "01.5": Exercise("A grpo_edu run of 600 steps with num_iterations = 3, run on 2 processes with 4 "
                     "micro-batches of gradient accumulation each. How many steps does TRL's log show for the "
                     "same run, since TRL counts optimizer updates?",
                     lambda: solve.trl_steps(600, 3),
                     "each grpo_edu step is one sampled batch, used for num_iterations optimizer updates; processes "
                     "and micro-batches split one update, they add none."),
    "01.6": Exercise("3000 prompts, batch_size = 12, total_epochs = 5, total_training_steps = 600, and G = 16. "
                     "Give [steps, completions generated in the whole run].",
                     lambda: [solve.schedule(dataset_size=3000, batch_size=12, num_generations=16, total_epochs=5,
                                             total_training_steps=600).total_steps,
                              solve.schedule(dataset_size=3000, batch_size=12, num_generations=16, total_epochs=5,
                                             total_training_steps=600).total_completions],
                     "G does not change the number of steps (600, as in 01.2); each step generates batch_size × G "
                     "completions."),
    # lesson 06: data replay
    "06.1": Exercise("A step has 70 new completions and replay_ratio = 0.3. How many replayed samples join them?",
                     lambda: solve.replay_count(70, 0.3),
                     "replay_ratio is the replayed share of the total: k / (70 + k) = 0.3."),
    "06.2": Exercise("Seed 000 also says: sample replayed data equal to 30 % of the new data. With 100 new "
                     "samples, what replay_ratio (replayed share of the total) is that? (4 decimals)",
                     lambda: round(solve.replay_composition(100, 30 / 130, 10_000)["replayed share of the total"], 4),
                     "30 replayed for 100 new: the total is 130.", tolerance=1e-4),
    "06.3": Exercise("A full buffer of capacity 3 holds samples with (Â, round) = (0.8, 1), (0.5, 2), (0.5, 1). "
                     "A newcomer with Â = 0.6 arrives in round 3. Which sample leaves? Answer [Â, round].",
                     lambda: solve.evicted_by([(0.8, 1), (0.5, 2), (0.5, 1)], (0.6, 3)),
                     "lowest advantage first; among equal advantages, the oldest round."),
    "06.4": Exercise("A buffer holds 10,000 samples and each step draws 55 of them (128 new at replay_ratio 0.3). "
                     "On average, how many steps pass between two draws of one stored sample? (1 decimal)",
                     lambda: round(solve.replay_composition(128, 0.3, 10_000)["steps between draws of one stored sample"], 1),
                     "each step draws a given sample with probability 55 / 10,000.", tolerance=0.1),
    "06.5": CodeExercise("Write my_admitted(advantages, top_fraction, min_advantage): advantages is a numpy array "
                         "of one step's n samples; return n booleans, True for each sample the buffer admits: "
                         "advantage > min_advantage and among the first ⌈top_fraction · n⌉ when sorted by "
                         "advantage, highest first (on a tie, the one offered first ranks higher).",
                         solve.admitted_ref, solve.admission_input,
                         "rank with a stable sort: np.argsort(-advantages, kind='stable')[:math.ceil(top_fraction * n)]; "
                         "then also require advantages > min_advantage."),
    # lesson 07: reward design
    "07.1": Exercise("With the recipe's weights (0.6 correctness, 0.2 brevity_reward(4), 0.2 format_reward(3)), what "
                     "reward R does the answer '46' get for 12+34=?",
                     lambda: round(solve.composite({"correctness": 0.6, "brevity": 0.2, "format": 0.2}, ["46"])[0], 4),
                     "right (1), brevity 1 − 2/4, well formed (1): weigh and add."),
    "07.2": Exercise("A component gives every answer of a G = 4 group the same reward 0.2. What advantage does it "
                     "give each answer? (a list of 4 numbers)",
                     lambda: solve.adv([0.2, 0.2, 0.2, 0.2]),
                     "subtracting the group mean removes whatever all answers share."),
    "07.3": Exercise("Rewards [10, 0, 0, 0] with scale='group' (eps = 1e-4). Advantage of the first answer? "
                     "(4 decimals)",
                     lambda: round(solve.adv([10, 0, 0, 0])[0], 4),
                     "μ and σ both grow tenfold compared with [1, 0, 0, 0]; only eps does not.", tolerance=1e-4),
    "07.5": CodeExercise("Write my_gated_brevity(completions, answers, max_length): lists of answer strings and "
                         "reference answers; return the gated brevity reward of each, brevity 1 − len/max_length "
                         "(floored at 0, on the stripped answer) for a right answer and 0 for a wrong one.",
                         solve.gated_brevity_ref, solve.gated_brevity_input,
                         "right means c.strip() == a.strip(); brevity is max(0, 1 − len(c.strip()) / max_length); "
                         "multiply the two."),
    "07.4": Exercise("Weights 0.2 correctness and 0.8 brevity_reward(4). Rewards of the empty answer '' and of the "
                     "right answer '46'? Answer [R(''), R('46')].",
                     lambda: [round(r, 4) for r in solve.composite({"correctness": 0.2, "brevity": 0.8}, ["", "46"])],
                     "'' is not right but has length 0; '46' is right with length 2."),
    # lesson 16: real text
    "16.1": CodeExercise("Write my_completion_mask(ids, end_token_id): ids is an (N, T) numpy array of sampled answers "
                         "(anything may follow an answer's end: padding, or more samples); return the (N, T) loss "
                         "mask: 1 on each answer's tokens up to AND including its first end token, 0 after it; a "
                         "row with no end token was cut at T and keeps all T tokens.",
                         solve.completion_mask_ref, solve.completion_ids_input,
                         "count, at each position, the end tokens strictly before it (a cumulative sum minus the "
                         "token itself): the mask is 1 where that count is 0. ids != end_token_id is the padding "
                         "mask, which drops the end token itself."),
    # lesson 15: tools and multi-turn rollouts
    "15.1": CodeExercise("Write my_tool_mask(ids, call_end, reply_lengths): ids is one completion's token ids (a "
                         "numpy array), call_end the id that closes a call, reply_lengths the length of each tool "
                         "reply in order. After the k-th call_end the model wrote, the next reply_lengths[k] tokens "
                         "are the tool's. Return the tool mask: 1 on the model's tokens, 0 on the tool's.",
                         solve.tool_mask_ref, solve.tool_mask_input,
                         "walk the ids once, keeping a count of the calls seen; a call_end inside a reply is the "
                         "tool's text, not a new call, so skip each reply whole."),
    # lesson 17b: process rewards
    "17b.1": CodeExercise("Write my_step_labels(prompt, completion): prompt like '3+8+5=', completion well formed like "
                          "'3+8=11;11+5=16#16'. Return one label per step, 1 right and 0 wrong, the answer last. A "
                          "working step a+b=c is right when a is the previous step's result (the first term for the "
                          "first step), b the prompt's next term, and c = a + b; the answer is right when it equals "
                          "the last written result plus the terms not added yet.",
                          solve.step_labels_ref, solve.step_labels_input,
                          "judge each step from what is written before it, not from the true running sum: a step "
                          "that adds correctly to a wrong number is still right, and the answer after a cut-short "
                          "working must add the terms the working skipped."),
    "17b.2": Exercise("Two answers of 18 tokens each, steps ending at tokens 6, 14 and 17: step rewards [1, 0, 1] and "
                      "[1, 1, 1]. Under GRPO with process supervision (DeepSeekMath §4.1.3: normalise all six step "
                      "rewards together, unbiased σ, then sum the steps that end at or after the token), what "
                      "advantage does the first token of the first answer get?",
                      solve.process_token_advantage,
                      "R = {1, 0, 1, 1, 1, 1}: mean 5/6, σ = √(1/6) ≈ 0.408; a right step gets (1 − 5/6)/σ ≈ 0.41, "
                      "the wrong one (0 − 5/6)/σ ≈ −2.04, and token 0 sums all three of its answer's steps.",
                      tolerance=0.01),
    # lessons 09 and 09b: the diagnostics clinic (09.3, 09.4 in 09; 09.1, 09.2, 09.5 in 09b)
    "09.1": Exercise("A batch's success rate is p = 0.45 and G = 2. What share of groups do you expect to be dead "
                     "(all answers right or all wrong)? (4 decimals)",
                     lambda: round(solve.dead(0.45, 2), 4),
                     "a group is dead when all G answers are right (p^G) or all wrong ((1 − p)^G)."),
    "09.2": Exercise("The same p = 0.45 with G = 8: what share of groups do you expect to be dead? (4 decimals)",
                     lambda: round(solve.dead(0.45, 8), 4),
                     "p^8 + (1 − p)^8: both terms are tiny.", tolerance=1e-4),
    "09.3": Exercise("A run's reward, averaged over a few steps, peaked at 0.6; rewards never went below 0. Up to "
                     "what mean reward at the end of the run does diagnose call it reward_collapse?",
                     lambda: solve.collapse_threshold(0.6),
                     "the rule's threshold is a quarter of the way from the floor (0) to the peak."),
    "09.4": CodeExercise("Write my_collapsed(rewards): a run's mean reward per step (a numpy array); return True "
                         "when diagnose's reward_collapse rule fires. The rule: smooth the rewards with a trailing "
                         "moving average of window max(3, n // 20); the peak is the smoothed maximum (its first "
                         "step); the floor is min(0, lowest reward); the tail is the last max(3, ⌈n / 4⌉) steps. "
                         "Collapse: the peak comes before the tail, is at least 0.1 above the floor, and the tail's "
                         "mean is at most floor + 0.25 · (peak − floor).",
                         solve.collapse_ref, solve.reward_curve_input,
                         "trailing means: rewards[max(0, i + 1 − w):i + 1].mean() at each step i; the peak's index "
                         "must be < n − len(tail); compare the tail's mean (raw rewards) with the threshold."),
    "09.5": CodeExercise("Write my_truncated(lengths, max_completion_length): a run's mean completion length per step "
                         "(a numpy array) and its length limit; return True when diagnose's completion_truncated "
                         "rule fires on a run that logs no share of cut answers. The rule: the head is the first "
                         "max(3, ⌈n / 10⌉) steps, the tail the last max(3, ⌈n / 4⌉); it fires when the mean length "
                         "over the tail, or over the head, is at least 0.98 × max_completion_length.",
                         solve.truncated_ref, solve.length_curve_input,
                         "two windows of different sizes (a tenth at the start, a quarter at the end), each compared "
                         "by its mean; either one at ≥ 98 % of the limit is enough."),
    # lesson 10: graduation to TRL and verl
    "10.1": Exercise("B = 16, G = 8 on 4 processes, micro_batch_size = 16. What per_device_train_batch_size and "
                     "gradient_accumulation_steps give TRL the same step? Answer [per_device, accumulation].",
                     lambda: [solve.to_trl_value(16, 8, 16, 4, k) for k in ("per_device_train_batch_size",
                                                                       "gradient_accumulation_steps")],
                     "128 completions per step, 32 per process, in micro-batches of 16."),
    "10.4": CodeExercise("Write my_trl_batch(batch_size, G, processes, micro_batch_size): a grpo_edu step of "
                         "batch_size prompts × G answers on `processes` TRL processes, in micro-batches of "
                         "micro_batch_size completions (0: none); return [per_device_train_batch_size, "
                         "gradient_accumulation_steps] for TRL's same step.",
                         solve.trl_batch_ref, solve.trl_batch_input,
                         "each process takes batch_size · G / processes completions; per_device is the micro-batch "
                         "(or that whole share when micro_batch_size is 0), accumulation is share / per_device."),
    "10.2": Exercise("The same B = 16, G = 8 in verl on 4 GPUs, no micro_batch_size. What are data.train_batch_size "
                     "and ppo_micro_batch_size_per_gpu? Answer [train_batch_size, micro_per_gpu].",
                     lambda: solve.verl_batch(16, 8, 4),
                     "verl counts data.train_batch_size in prompts; the micro-batch is completions on one GPU."),
    "10.3": Exercise("Qwen2.5-7B (7,615,616,512 parameters) on 8 GPUs with ZeRO stage 1: how many GiB per GPU do "
                     "AdamW's moments and the fp32 master weights take? (2 decimals)",
                     lambda: round(solve.optimizer_gib("Qwen2.5-7B", 8, 1), 2),
                     "12 bytes per parameter (4 + 4 + 4), split 8 ways; 1 GiB = 1024³ bytes.", tolerance=0.01),
    # lesson 02: group advantages
    "02.1": Exercise("Rewards [1, 0, 0, 0] for G = 4 (default eps = 1e-4). What is the advantage of the "
                     "correct answer? (4 decimals)",
                     lambda: solve.adv([1, 0, 0, 0])[0],
                     "μ = 0.25; σ is the unbiased std (divide by G − 1 = 3)."),
    "02.2": Exercise("A reward model adds 0.3 to every answer: rewards [0.3, 0.3, 0.3, 0.3, 1.3]. What are the "
                     "five advantages with scale='none' (a list)?",
                     lambda: [round(a, 4) for a in solve.adv([0.3, 0.3, 0.3, 0.3, 1.3], scale="none")],
                     "scale='none' only subtracts the group mean μ = 0.5; the common 0.3 cancels."),
    "02.3": Exercise("Rewards [2, 0, 0, 0] with scale='none' (Dr. GRPO). Advantage of the first answer?",
                     lambda: solve.adv([2, 0, 0, 0], scale="none")[0],
                     "scale='none' only subtracts the group mean."),
    "02.5": Exercise("Rewards [1, 1, 0, 0, 0] for G = 5, scale='group' (eps = 1e-4). What are the five advantages "
                     "(a list)?",
                     lambda: solve.adv([1, 1, 0, 0, 0]),
                     "μ = 0.4; σ is the unbiased std: divide the summed squares by G − 1 = 4, then take the root; "
                     "Â = (R − μ)/(σ + 1e-4)."),
    "02.6": Exercise("For p = 0.5 the group mean μ of G right/wrong rewards has standard deviation √(p(1 − p)/G). "
                     "How many answers G make it half its value at G = 4?",
                     lambda: solve.group_size_halving_mu_std(0.5, 4),
                     "the spread falls like 1/√G: halving it takes four times the answers."),
    "02.4": CodeExercise("Write my_policy_gradient(logits, answers, advantages): a softmax policy over V answers "
                         "(logits, shape (V,)), G sampled answers (integers) and their advantages; return the "
                         "gradient of the loss L = −(1/G) Σ_i Â_i · log π(answers_i) with respect to the logits, "
                         "shape (V,).",
                         solve.policy_gradient_ref, solve.policy_gradient_input,
                         "one answer gives −Â·(onehot(a) − π) (section 2); the loss is the mean over the G "
                         "answers, so average those vectors. π = softmax(logits)."),
    # lesson 03: zero-σ groups
    "03.1": Exercise("A prompt is solved with probability p = 0.9 and G = 4. Chance that its group is dead? "
                     "(4 decimals)",
                     lambda: round(solve.dead(0.9, 4), 4),
                     "dead = all right or all wrong: p^G + (1 − p)^G.", tolerance=1e-4),
    "03.2": Exercise("A step holds B = 4 prompts, each solved with p = 0.95, and G = 16. Chance that *at least "
                     "one* of the four groups is dead? (4 decimals)",
                     lambda: round(1 - (1 - solve.dead(0.95, 16)) ** 4, 4),
                     "one group is dead with d = p^G + (1 − p)^G; none of four is with (1 − d)^4.", tolerance=1e-4),
    "03.3": Exercise("p = 0.5, G = 2, batch_size = 4. Chance that the *whole step* is dead? (4 decimals)",
                     lambda: round(solve.dead(0.5, 2, 4), 4),
                     "each of the 4 groups must be dead independently: (p^G + (1 − p)^G)^B.", tolerance=1e-4),
    "03.5": Exercise("A prompt is solved with p = 0.95. What is the smallest group size G that brings the chance of "
                     "a dead group below 0.5?",
                     lambda: next(g for g in range(2, 1000) if solve.dead(0.95, g) < 0.5),
                     "P(dead) = p^G + (1 − p)^G; try G = 12, 13, 14, … until it drops below 0.5."),
    "03.6": Exercise("A toy model has logits [2.0, 1.2, 0.3, 0.0, −0.5] over 5 answers; answer 1 is right. Sampled at "
                     "temperature τ = 0.5 with G = 8, what is the chance that a group is dead? (4 decimals)",
                     lambda: round(solve.dead(solve.softmax_at([2.0, 1.2, 0.3, 0.0, -0.5], 0.5)[1], 8), 4),
                     "p = softmax(logits / τ)[1]; then P(dead) = p^G + (1 − p)^G."),
    "03.4": CodeExercise("Write my_zero_std_groups(rewards): rewards is a (B, G) numpy array; return B booleans, "
                         "True where all G rewards of the row are equal (a dead group).",
                         solve.zero_std_ref, solve.rewards_input,
                         "compare each row's largest and smallest reward: rewards.max(axis=1) == rewards.min(axis=1)."),
    # lesson 04: clipped loss and KL
    "04.1": Exercise("ε = 0.2, Â = +1, and the new policy made a token 1.5 times as likely (r = 1.5). "
                     "What is this token's objective min(r·Â, clip(r, 1 − ε, 1 + ε)·Â)?",
                     lambda: solve.objective(1.5, 1.0),
                     "clip(1.5, 0.8, 1.2) = 1.2; take the smaller of 1.5·Â and 1.2·Â."),
    "04.2": Exercise("Clip-higher: ε_low = 0.2, ε_high = 0.28, Â = +2, r = 1.35. What is the token's objective?",
                     lambda: round(solve.objective(1.35, 2.0, epsilon=0.2, epsilon_high=0.28), 4),
                     "clip(1.35, 0.8, 1.28) = 1.28; min(1.35·2, 1.28·2).", tolerance=1e-4),
    "04.7": Exercise("Four answers sampled from π_θold got rewards [1, 0, 0, 1]; an update made them r = [1.5, 0.8, "
                     "0.8, 1.5] times as likely under π_θ. What is the importance-sampling estimate of π_θ's expected "
                     "reward from these old samples?",
                     lambda: solve.importance_estimate([1, 0, 0, 1], [1.5, 0.8, 0.8, 1.5]),
                     "weight each sample's reward by its ratio r, then average: (1/n) Σ r_i R_i."),
    "04.3": Exercise("The policy gives a token probability 0.5, the reference model 0.25. "
                     "What is the k3 estimate of the KL for this token? (4 decimals)",
                     lambda: round(solve.k3(0.5, 0.25), 4),
                     "with ρ = π_ref/π_θ = 0.5: k3 = ρ − log ρ − 1.", tolerance=1e-4),
    "04.4": Exercise("Two answers, 2 tokens and 8 tokens, both with Â = 1, loss_type = 'grpo'. What is the "
                     "gradient weight of ONE token of the 8-token answer? (the short answer's tokens get 0.25)",
                     lambda: solve.token_weight((2, 8), "grpo", 1),
                     "'grpo' averages over each answer's own tokens, then over the N = 2 answers: 1/(N·|o_i|)."),
    "04b.1": Exercise("A step holds a short wrong answer (2 tokens) and a long wrong answer (8 tokens) with the same Â. "
                      "Under which loss_type does each token of the long answer get a smaller push than a token of "
                      "the short one? One of 'grpo', 'bnpo', 'dapo', 'dr_grpo'.",
                      lambda: solve.length_biased_loss_type((2, 8), ("grpo", "bnpo", "dapo", "dr_grpo")),
                      "compare one token's weight in each answer: which loss_type divides each answer's loss by its "
                      "own length |o_i|?"),
    "04b.2": Exercise("π_θ has drifted above π_ref on a token: log π_θ − log π_ref = 0.5. With β = 0.04 and the k3 "
                      "estimator in the loss, does the KL term push this token's log-probability 'up' or 'down'?",
                      lambda: solve.kl_push(0.5, beta=0.04),
                      "gradient descent moves log π_θ against ∂(β·k3)/∂log π_θ = β·(1 − π_ref/π_θ); its sign says "
                      "which way the leash pulls."),
    "04.5": CodeExercise("Write my_clip_push(ratio, advantage, epsilon): ratio and advantage are numpy arrays, "
                         "one entry per token; return how hard the clipped objective min(r·Â, clip(r, 1 − ε, 1 + ε)·Â) "
                         "pushes each token's log-probability: its derivative with respect to log π_θ (which "
                         "is r·Â where the unclipped term is the smaller one, and 0 where the clip binds).",
                         solve.clip_push_ref, solve.clip_input,
                         "d(r·Â)/d log π = r·Â, since dr/d log π = r; the clipped term is a constant. The clip "
                         "binds where r > 1 + ε with Â > 0, or r < 1 − ε with Â < 0."),
    "04.6": CodeExercise("Write my_k3_slope(logprobs, ref_logprobs): numpy arrays of log π_θ and log π_ref of the "
                         "sampled tokens; return the derivative of each token's k3 = ρ − log ρ − 1 "
                         "(ρ = π_ref/π_θ) with respect to its log π_θ: how the KL term pushes that token.",
                         solve.k3_slope_ref, solve.logprob_input,
                         "log ρ = ref − logprobs, so d log ρ / d log π_θ = −1 and dρ/d log π_θ = −ρ: the slope "
                         "is −ρ + 1."),
    # lesson 05: one GRPO step, short runs
    "05.1": Exercise("On the first update of a batch, π_θ is still the policy that sampled the answers. "
                     "What is the mean probability ratio r = π_θ / π_θold?",
                     solve.on_policy_ratio,
                     "the same model gave the same log-probabilities: exp(logprobs − old_logprobs) = exp(0)."),
    "05.2": Exercise("One group of G = 6 answers has rewards [1, 1, 0, 0, 0, 0]. What is the advantage of each "
                     "right answer? (4 decimals)",
                     lambda: round(solve.adv([1, 1, 0, 0, 0, 0])[0], 4),
                     "μ = 1/3; σ is the unbiased std of the 6 rewards (divide by 5); Â = (1 − μ)/(σ + 1e-4).",
                     tolerance=1e-4),
    "05.3": Exercise("At temperature 0.3 the bundled model answers about 97 % of the prompts right (p = 0.97). "
                     "With G = 8, what share of groups do you expect to be dead? (4 decimals)",
                     lambda: round(solve.dead(0.97, 8), 4),
                     "dead = all right or all wrong: p^G + (1 − p)^G.", tolerance=1e-4),
    "05.4": Exercise("G = 4 and the model is right with p = 0.8. What is the chance that a group is dead? "
                     "(4 decimals)",
                     lambda: round(solve.dead(0.8, 4), 4),
                     "all four right (p⁴) or all four wrong ((1 − p)⁴).", tolerance=1e-4),
    "05.5": Exercise("A step has two groups of G = 4: rewards [1, 0, 0, 0] and [0, 0, 0, 0]. Every answer is one "
                     "token long; it is the first update (r = 1), β = 0, loss_type = 'grpo'. The loss is 0. What "
                     "is ∂loss/∂log π of the right answer's token? (4 decimals)",
                     solve.live_token_gradient,
                     "−Â/(N·|o|): Â of the right answer is 0.75/(0.5 + 1e-4), N = 8 answers (the dead group counts "
                     "in N too), |o| = 1.", tolerance=1e-4),
    "05.7": Exercise("An unknown 100-step run changed one setting of the baseline. From its six panels: which knob "
                     "changed? One of 'G', 'learning rate', 'beta', 'temperature'.",
                     lambda: KNOBS[next(iter(MYSTERY_RUNS["05.7"]))],
                     "compare each panel with the baseline's: where does the reward start, and how many groups are "
                     "dead from the first steps? Section 4's comparisons show each knob's signature."),
    "05.6": CodeExercise("Write my_sequence_logprob(token_logprobs, mask): (N, T) numpy arrays of the log-prob of "
                         "each completion token and the completion mask (1 up to and including <eos>); return the "
                         "N log-probabilities of the whole answers.",
                         solve.sequence_logprob_ref, solve.token_logprob_input,
                         "log π(answer) is the sum of its tokens' log-probs; masked-out tokens (after <eos>) add nothing."),
    # lesson 08: the full run
    "08.1": Exercise("The default run has batch_size B = 16 and G = 8. On one GPU without gradient "
                     "accumulation, what per_device_train_batch_size gives TRL the same step?",
                     lambda: solve.default_run_schedule().completions_per_step,
                     "TRL counts completions, not prompts: B · G."),
    "08.2": Exercise("The default run with batch_size = 24 instead of 16, for 2000 steps: how many epochs "
                     "(passes over the 7600 train prompts) does it make? (3 decimals)",
                     lambda: round(solve.run_schedule(batch_size=24, total_training_steps=2000).epochs_completed, 3),
                     "steps per epoch = 7600 // 24 (the incomplete last batch is dropped); epochs = 2000 / that."),
    "08.3": Exercise("Greedy accuracy (temperature 0) of the bundled model on the first 100 held-out prompts?",
                     lambda: sum(solve.bundled_heldout(100, temperature=0)) / 100,
                     "evaluate(model, tokenizer, task.split('heldout', 100), task, temperature=0)['accuracy']."),
    "08.4": Exercise("pass@8 of the bundled model: on what fraction of the first 100 held-out prompts is at "
                     "least one of 8 samples right (temperature 1, seed 0)?",
                     solve.pass_at_k,
                     "evaluate(..., num_samples=8, seed=0); the samples come 8 per prompt, in order; "
                     "count the prompts with any right sample."),
    "08.5": Exercise("A model answered 5 held-out prompts 8 times each; its right (1) / wrong (0) flags are "
                     f"{PASS_FLAGS}. What are its pass@1 (the share of single samples that are right) and its pass@8 "
                     "(the share of prompts with at least one right sample)? Answer [pass@1, pass@8].",
                     lambda: solve.pass_at_1_and_k(PASS_FLAGS, 8),
                     "pass@1: right samples ÷ all samples; pass@8: prompts with any right sample ÷ prompts."),
    # lesson 11: long answers
    "11.1": Exercise("Two wrong answers (Â = −1 each), one of 5 tokens and one of 40, under loss_type='grpo'. How "
                     "many times harder is each token of the short one pushed down than each token of the long one?",
                     lambda: round(solve.push_ratio(5, 40, "grpo"), 3),
                     "'grpo' divides each answer's token sum by its own length |o_i|: the push per token is Â/(N·|o_i|)."),
    "11.2": Exercise("The same two answers under loss_type='dr_grpo'. What is the ratio now?",
                     lambda: round(solve.push_ratio(5, 40, "dr_grpo"), 3),
                     "'dr_grpo' divides every answer by the same constant, N · max_completion_length."),
    "11.3": Exercise("Soft overlong punishment with max_completion_length = 42 and cache_length = 10: what reward "
                     "does an answer of 38 tokens (<eos> included) get from it?",
                     lambda: round(solve.overlong(38), 4),
                     "the ramp starts after 42 − 10 = 32 tokens and falls by 1/10 per token."),
    "11.4": CodeExercise("Write my_pass_at_k(n, c, k): n samples of one prompt, c of them right; return the "
                         "unbiased pass@k, the chance that k of the n drawn without replacement include a right one.",
                         solve.pass_at_k_ref, solve.pass_at_k_input,
                         "1 − C(n − c, k) / C(n, k), with math.comb; C(n − c, k) is 0 when k > n − c."),
    # lesson 12: GRPO's variants
    "12.1": CodeExercise("Write my_sequence_ratio(logprobs, old_logprobs, mask): (N, T) numpy arrays of log π_θ "
                         "and log π_θold of each completion token, and the completion mask; return GSPO's N "
                         "sequence ratios s_i = exp(mean over the answer's tokens of (log π_θ − log π_θold)).",
                         solve.sequence_ratio_ref, solve.two_logprob_input,
                         "mask the log-ratios, sum them per row, divide by the row's number of tokens "
                         "(mask.sum(axis=1)), then np.exp: the geometric mean of the token ratios."),
    "12.2": CodeExercise("Write my_cispo_term(ratio, advantage, logprob, eps_max): numpy arrays of the token "
                         "ratios r, the advantages Â and log π_θ, and CISPO's cap ε_max; return CISPO's loss per "
                         "token, −min(r, ε_max)·Â·log π_θ (the min is a constant in the gradient; here you "
                         "return values only).",
                         lambda r, a, lp, eps: solve.policy_term("cispo", r, a, lp, eps_high=eps), solve.cispo_input,
                         "np.minimum(ratio, eps_max) caps the weight at ε_max itself, not at 1 + ε; "
                         "then − weight · Â · log π."),
    "12.3": CodeExercise("Write my_rloo(rewards): rewards is a (B, G) numpy array; return RLOO's advantages, "
                         "each reward minus the mean of the other G − 1 rewards of its group.",
                         solve.rloo_ref, solve.rewards_input,
                         "the others' mean is (row sum − R_i) / (G − 1); equivalently G/(G − 1)·(R_i − μ)."),
    "12.4": CodeExercise("Write my_sapo_term(ratio, advantage, tau_pos, tau_neg): numpy arrays of r and Â and "
                         "SAPO's two temperatures; return SAPO's loss per token, −σ(τ(r − 1))·(4/τ)·Â, with "
                         "τ = tau_pos where Â > 0 and tau_neg elsewhere (σ is the logistic sigmoid).",
                         lambda r, a, tp, tn: solve.policy_term("sapo", r, a, tau_pos=tp, tau_neg=tn), solve.sapo_input,
                         "tau = np.where(advantage > 0, tau_pos, tau_neg); σ(x) = 1 / (1 + np.exp(−x)); at r = 1 "
                         "the term is −2Â/τ and its slope in r is −Â, as GRPO's."),
    "12.5": Exercise("One token with Â = +1 whose ratio has moved to r = 1.5 on the second update. How hard does "
                     "each variant push its log π (the push −∂loss/∂log π of a one-token answer)? Answer "
                     "[grpo (ε = 0.2), cispo (ε_max = 5), sapo (τ = 1)], to 2 decimals.",
                     lambda: [round(x, 2) + 0.0 for x in solve.push_off_policy(
                         1.5, 1.0, [dict(loss_type="grpo"), dict(loss_type="cispo", epsilon_high=5.0),
                                    dict(loss_type="sapo", sapo_temperature_pos=1.0)])],
                     "GRPO: r·Â is clipped at 1 + ε = 1.2 when Â > 0, and the clipped term has no gradient. CISPO: the "
                     "weight min(r, ε_max) times Â. SAPO: d/dlog π of σ(τ(r − 1))·4/τ·Â is 4σ'(τ(r − 1))·r·Â, "
                     "with σ' = σ(1 − σ).", tolerance=0.01),
    # lesson 13: GRPO among its family
    "13.1": CodeExercise("Write my_gae(rewards, values, gamma, lam): one answer of T tokens; rewards and values "
                         "are length-T numpy arrays (r_t, with the outcome reward on the last token, and the "
                         "critic's V(s_t)); return the T advantages of GAE(γ, λ): δ_t = r_t + γ·V_{t+1} − V_t "
                         "with V after the last token 0, and Â_t = δ_t + γλ·Â_{t+1}, computed from the end.",
                         solve.gae_ref, solve.gae_input,
                         "loop t from T − 1 down to 0, carrying Â_{t+1} (0 after the end) and V_{t+1} (0 after the "
                         "end); γ multiplies V_{t+1} in δ_t, and γ·λ multiplies Â_{t+1}."),
    # lesson 14: the cost of a step
    "14.1": CodeExercise("Write my_forward_flops(L, D, H, K, d, I, V, tokens, context): the FLOPs of a Llama forward "
                         "pass over `tokens` new tokens of one row after `context` earlier ones, logits for every new "
                         "token. Per token and layer: 2 FLOPs per weight of q, k, v (D × (H + 2K)·d), o (H·d × D) and "
                         "the MLP (3 × D × I); attention 4·H·d per position the token sees (the token at position p, "
                         "counted from 1, sees p); the output head 2·D·V per token.",
                         solve.forward_flops_ref, solve.forward_flops_input,
                         "a token at position p costs L·(2·weights + 4·H·d·p) + 2·D·V; the new tokens sit at "
                         "positions context + 1 … context + tokens, so sum p over those.", tolerance=0.5),
    # lesson 18: sampling and training apart
    "18.1": Exercise("The sampler lags k = 3 updates behind the trainer. Which policy version draws step 10's batch?",
                     lambda: solve.lagged_version(10, 3),
                     "at step t the trainer holds version t − 1; the sampler is k versions older (never below 0)."),
    "18.2": Exercise("Decoupled PPO, one token, Â = +1, ε = 0.2: the update has moved π_θ/π_prox to 1.5, and the "
                     "sampler had π_prox/μ = 2. What is the token's loss?",
                     lambda: round(solve.decoupled_one_token(1.5, 2.0, 1.0), 4),
                     "the ratio against π_prox is clipped at 1 + ε (Â > 0), then weighed by π_prox/μ, with a minus."),
    "18.3": Exercise("TRL's sequence_mask (C = 3): an answer of 40 tokens, each with log π_prox − log μ = 0.02. What "
                     "weight does the answer get? And at 80 tokens (write [40 tokens, 80 tokens], 4 decimals)?",
                     lambda: [round(solve.sequence_weight(40, 0.02), 4), round(solve.sequence_weight(80, 0.02), 4)],
                     "the weight is exp(Σ_t log-ratio), the product over the answer's tokens; above C it is 0."),
    "18.4": Exercise("Lesson 18's stored wallclock run: once both processes ran, a two-process step took what fraction "
                     "of a synchronous step? (2 decimals)",
                     lambda: round(solve.two_process_step_share(), 2),
                     "section 7 prints both: seconds a step for the synchronous run, and for two processes once "
                     "both run; divide.", tolerance=0.011),
}
