"""The predict-then-run questions of every lesson: the learner guesses, then an experiment measures
(``grpo_edu.course.aids.exercises.reveal``). The exercises with their answers are in ``exercise_bank``."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Prediction:
    question: str
    """What the learner predicts before running the experiment."""
    tolerance: float | None = None
    """Numeric guesses: how far from the measured value still counts as right."""
    choices: tuple[str, ...] = ()
    """Choice guesses: the allowed answers (compared case-insensitively)."""
    why: str = ""
    """The explanation, printed by ``reveal`` only after the measured answer, so no cell before the guess
    gives it away. A prediction with one also answers a ``reveal`` run without a guess ("Run all"), with a note."""


CLINIC_MENU = ("reward_collapse", "reward_always_zero", "no_reward_signal", "few_live_groups", "no_progress",
               "completion_truncated", "reward_up_accuracy_down", "entropy_collapse", "kl_runaway")
"""Lessons 09 and 09b's menu of diagnoses: the findings a learner chooses from for each sick run."""

PREDICTIONS: dict[str, Prediction] = {
    "00.P1": Prediction("Before training, about half of the bundled model's sampled answers to held-out prompts are "
                        "right. After 100 GRPO steps, what share will be right (0–1)?", tolerance=0.1),
    "00.P2": Prediction("Read it off your run's top-left panel: the held-out accuracy (orange dots) at step 100 "
                        "(0–1, 2 decimals)?", tolerance=0.03),
    "00.P3": Prediction("Read it off your run's entropy panel (top right): from the first steps to the last, did the entropy per "
                        "token 'rise' or 'fall'?", choices=("rise", "fall")),
    "01.P1": Prediction("2000 prompts, batch_size = 8 (twice the worked example's), G = 8, total_training_steps "
                        "= 1000. How many epochs does the run make?", tolerance=1e-9,
                        why="with 8 prompts per step an epoch is 2000 ÷ 8 = 250 steps, so the same 1000 steps make 4 "
                            "epochs: twice the passes over the data, because each step uses twice the prompts. The "
                            "step count was fixed by total_training_steps; the epoch count followed from it."),
    "02.P1": Prediction("A group of G = 16 with exactly one right answer: rewards [1, 0, 0, …, 0]. What advantage Â "
                        "does the right answer get?", tolerance=0.25,
                        why="μ = 1/16, and the unbiased σ is exactly 0.25, so Â = (15/16)/0.25 = 3.75 (3.7485 with "
                            "eps). A lone right answer in a group of G gets (G − 1)/√G: 1.5 at G = 4, 2.47 at G = 8, "
                            "3.75 at G = 16. That is also the largest |Â| any group of G can produce (lesson 03 shows "
                            "why), and it is how a larger group rewards a rare success more."),
    "03.P1": Prediction("Rewards [1, 1, 1, 0.99], scale='group'. What advantage does the 0.99 answer get?",
                        tolerance=0.2,
                        why="almost −1.5, the same as a wrong answer in [1, 1, 1, 0]: what a tiny σ does is amplify "
                            "tiny differences. Dividing by σ rescales every group to the same spread, however small "
                            "its differences were. Only when σ shrinks to the size of eps = 1e-4 does eps start to "
                            "hold the advantages back."),
    "03.P2": Prediction("A step has 4 live groups. Add 12 dead groups to the same step (loss_type='grpo'). The "
                        "gradient coming from the 4 live groups becomes what fraction of what it was?",
                        tolerance=0.05,
                        why="a quarter. The loss averages over all the answers of the step: 16 groups instead of 4, so "
                            "each live answer's share of the average, and so its push, is 4/16 of what it was. The "
                            "dead groups add nothing to the sum and four times as much to the count."),
    "04.P1": Prediction("Â = −1, ε = 0.2, and an update has moved the token the wrong way: r = 1.5, above "
                        "1 + ε. Is the gradient of this token's loss 'zero' (clipped) or 'not zero'?",
                        choices=("zero", "not zero"),
                        why="not zero. For Â < 0 the objective is min(r·Â, clip(r)·Â) = min(−1.5, −1.2) = −1.5: the "
                            "min keeps the unclipped, worse value, whose gradient pushes the token back down "
                            "(∂loss/∂log π = −r·Â = +1.5). The same holds mirrored for Â > 0 and r below 1 − ε. The "
                            "ratio clip is one-sided: it only cuts off the side the advantage wants to go, so it stops "
                            "an update from going too far in the right direction, never from undoing a step in the "
                            "wrong one. clip_fraction does not count such a token, since the clip does not bind "
                            "there; and the push grows with r without limit."),
    "05.P1": Prediction("Run the baseline again with G = 2 instead of 8 (16 prompts per step, as before). What "
                        "share of the groups will be dead, on average over steps 51–100?", tolerance=0.15,
                        why="with G = 2 about half of the groups are dead almost from the start (p² + (1 − p)² at "
                            "p ≈ 0.5), and more as the model improves, since a pair of answers agrees whenever both "
                            "are right or both wrong."),
    "06.P1": Prediction("Phase B at lr 1e-3 makes addition collapse without replay. With 30 % of each step replayed "
                        "from addition's notebook, what will addition's held-out accuracy be at the end of phase B "
                        "(0–1)? It was about 0.77 before phase B.", tolerance=0.1),
    "07.P1": Prediction("Train 100 steps with 0.2 × correctness + 0.8 × brevity. Held-out accuracy starts near 0.5. "
                        "What will it be after the run (0–1)?", tolerance=0.1,
                        why="about 0. An empty answer earns 0.8 of brevity and a right two-digit answer only "
                            "0.2 + 0.4 = 0.6, so the reward prefers saying nothing: the model learns to stop at once, "
                            "its reward climbs while it unlearns addition. That is reward hacking, and only a "
                            "measurement the reward cannot touch, here held-out accuracy, shows it."),
    "08.P1": Prediction("After the full run, sampled accuracy (pass@1) roughly doubles. What will greedy accuracy "
                        "do: 'rise by more than 4 points', 'stay within 4 points' or 'fall by more than 4 points'?",
                        choices=("rise by more than 4 points", "stay within 4 points", "fall by more than 4 points"),
                        why="greedy accuracy was near 1 before training (the table of section 2): GRPO did not teach "
                            "this model many sums it could not already do. It taught it to bet on the answer it already "
                            "rated highest, so a single sampled answer is now right nearly as often as the greedy "
                            "answer was before. That is sharpening: pass@1 rises, greedy and pass@8 hardly move."),
    "15.P1": Prediction("tiny-calc calls the calculator in about half its answers, and is right about 93 % of the time "
                        "with a call and 4 % without. After 20 GRPO steps rewarding only the right answer, what share "
                        "of its answers will call the calculator (0–1)?", tolerance=0.1),
    "15.P2": Prediction("The same run with the calculator's reply tokens left in the loss. Will the policy's log-prob "
                        "of writing the reply itself (the '=432' after a call) 'rise', 'stay' or 'fall'?",
                        choices=("rise", "stay", "fall")),
    **{f"09.P{i}": Prediction(f"Case {i}, {case}: which finding will diagnose rank first? One of: "
                              + ", ".join(CLINIC_MENU) + ".", choices=CLINIC_MENU)
       for i, case in enumerate(("learning rate 10× too high", "a broken reward", "temperature 0.3", "G = 2",
                                 "β = 10", "max_completion_length = 2", "brevity weighted 0.8"), start=1)},
    "04.P2": Prediction("Put k1 = log π_θ − log π_ref in the loss. Averaged over tokens sampled from π_θ, is "
                        "its gradient 'zero', 'the KL gradient' (the gradient of KL(π_θ ‖ π_ref)) or "
                        "'something else'?",
                        choices=("zero", "the kl gradient", "something else"),
                        why="zero: an estimator whose value is unbiased need not have a gradient that points where the "
                            "KL's gradient points. ∇k1(x) = ∇log π_θ(x), and the average of ∇log π_θ over tokens drawn "
                            "from π_θ is Σ_x π_θ(x)∇log π_θ(x) = Σ_x ∇π_θ(x) = ∇1 = 0: the same identity that made "
                            "lesson 02's baseline harmless. As a loss term k1 adds only noise."),
    "10.P1": Prediction("The same 60-step run in grpo_edu and in TRL (exported settings, same model, prompts and "
                        "seed). Their held-out accuracies at the end will be: 'within 6 points', 'TRL ahead by "
                        "more' or 'grpo_edu ahead by more'?",
                        choices=("within 6 points", "trl ahead by more", "grpo_edu ahead by more")),
    "10.P2": Prediction("Now TRL on 2 processes, each taking half of every step's answers. Compared with one "
                        "process, its learning curve will be: 'the same within noise', 'faster' or 'slower'?",
                        choices=("the same within noise", "faster", "slower")),
    "11.P1": Prediction("Sixteen GRPO steps on the model that writes its working. Its mean answer length is about "
                        "24 tokens at the start. At the end it will have: 'grown by more than 2 tokens', 'stayed "
                        "within 2 tokens' or 'shrunk by more than 2 tokens'?",
                        choices=("grown by more than 2 tokens", "stayed within 2 tokens", "shrunk by more than 2 tokens")),
    "11.P2": Prediction("After the run, pass@1 on held-out prompts rises. What will pass@16 (at least one of 16 "
                        "samples right) do: 'rise by more than 5 points', 'stay within 5 points' or 'fall by more "
                        "than 5 points'? (64 prompts: one prompt is 1.6 points.)",
                        choices=("rise by more than 5 points", "stay within 5 points", "fall by more than 5 points")),
    "12.P1": Prediction("One batch of the sums model, num_iterations = 1 (the first update, r = 1 on every "
                        "token). Compared with GRPO's, the gradient of GSPO's loss on every token will be: 'the "
                        "same', 'smaller' or 'larger'?",
                        choices=("the same", "smaller", "larger")),
    "12.P2": Prediction("Two updates per batch. On the second update GSPO (ε = 3e-4 on one ratio per answer) and "
                        "GRPO (ε = 0.2 on each token) clip a share of the tokens. GSPO's share will be: 'more than "
                        "10 times GRPO's', 'about the same' or 'less'?",
                        choices=("more than 10 times grpo's", "about the same", "less")),
    "12.P3": Prediction("Dynamic sampling (DAPO) drops the dead groups of a step and samples 8 more prompts at a "
                        "time until the step holds 8 live groups. Over the same 6 steps, how many times plain "
                        "GRPO's completions will it generate?", tolerance=0.25),
    "13.P1": Prediction("PPO with a critic against GRPO on the adder, both at 16 prompts × 8 answers per step for 60 "
                        "steps. PPO's held-out accuracy after the run will be: 'higher', 'the same' (within 2 points "
                        "on every seed) or 'lower'?", choices=("higher", "the same", "lower")),
    "13.P2": Prediction("Online DPO (one right-wrong pair per prompt from the same 8 answers) against GRPO on the "
                        "adder. Its held-out accuracy after 60 steps will be, on every seed: 'above', 'level' (a mix "
                        "of signs) or 'below'?", choices=("above", "level", "below")),
    "13.P3": Prediction("Rejection sampling (copy the right answers) against GRPO, on one fixed batch of the adder: "
                        "its gradient's noise-to-signal ratio will be 'quieter' (under half of GRPO's), 'about the "
                        "same' or 'noisier' (over twice GRPO's)?", choices=("quieter", "about the same", "noisier")),
    "14.P1": Prediction("A step of lesson 11's model (32 answers of up to 42 tokens) with the readable loop sampler. "
                        "Which part takes the most time: 'sampling', 'reference', 'policy' (forward and backward) or "
                        "'optimizer'?", choices=("sampling", "reference", "policy", "optimizer")),
    "14.P2": Prediction("One sampled batch, four optimizer updates on it (num_iterations = 4). After the fourth "
                        "update, the share of answer tokens whose ratio π_θ/π_θold has left [0.8, 1.2] will be, "
                        "compared with after the first: 'larger', 'about the same' or 'smaller'?",
                        choices=("larger", "about the same", "smaller")),
    "14.P3": Prediction("LoRA (rank 8) at full fine-tuning's learning rate, 3e-4. After two updates, how far will "
                        "it have moved the policy off the sampler, compared with full fine-tuning: 'about as far', "
                        "'less than half as far' or 'further'?",
                        choices=("about as far", "less than half as far", "further")),
    "16.P1": Prediction("Through its chat template, about 7 in 10 of the words model's answers end with <|im_end|> "
                        "within 24 tokens. Passed as a plain string instead (no template, no system turn, no opened "
                        "assistant turn), what share of its answers will end (0–1)?", tolerance=0.1),
    "16.P2": Prediction("Forty GRPO steps with the padding mask and pad = eos: the end token is never in the loss. The "
                        "share of the model's answers that end (0.72 before) will 'rise', 'stay' (within 0.05) or "
                        "'fall'?", choices=("rise", "stay", "fall")),
    "17.P1": Prediction("Best-of-n against a reward model trained on 64 preference pairs: sample n answers, keep the "
                        "one the reward model scores highest, for n = 1, 2, 4, … 256. The gold score of the kept "
                        "answer will be highest at: 'the largest n', 'a middle n' or 'n = 1'?",
                        choices=("the largest n", "a middle n", "n = 1")),
    "17.P2": Prediction("GRPO against the same kind of reward model for 16 steps, at a constant learning rate of 3e-4. "
                        "At the end of the run, the gold "
                        "score compared with the best it reached during the run will be: 'at its best', 'below its "
                        "best' or 'below where it started'?",
                        choices=("at its best", "below its best", "below where it started")),
    "17b.P1": Prediction("Of the bundled sums model's right answers (sampled at τ = 1 on held-out prompts), what share "
                         "has at least one wrong step in its working? (Uesato et al. counted 14 % on GSM8K.)",
                         tolerance=0.03,
                         why="About 1 % (the counts are printed below). The model was warmed up on worked solutions a program wrote, and it copies "
                             "their careful habit: when its answer is right, its working almost always is too. Its "
                             "mistakes are of the other kind, a slip that the next steps carry on correctly to a wrong "
                             "answer, which is why the question here is less 'does process supervision clean the "
                             "reasoning' than 'does it put the blame on the right step'."),
    "17b.P2": Prediction("The bundled sums model trained 40 steps with the outcome reward, and again with process "
                         "supervision by the exact checker (same seed, prompts and budget). Held-out accuracy with "
                         "process supervision: 'higher', 'same' (within noise on some seed) or 'lower'?",
                         choices=("higher", "same", "lower"),
                         why="The same, within the evaluation's noise: the table below gives each seed's difference with "
                             "its standard error, and no difference is twice its error. On this model right answers "
                             "rarely hide wrong steps, so the exact step checker adds little that the outcome does "
                             "not already say; its advantage is where the blame lands (section 4), not how much "
                             "the model learns in 40 steps."),
    "18.P1": Prediction("The staleness sweep: k = 1, 2, 4, 8 updates of lag, the PPO clip against μ. The spread "
                        "σ(log π_θ/μ) at k = 8, compared with k = 1, will be: 'about the same', 'two to five times' "
                        "or 'more than five times'?",
                        choices=("about the same", "two to five times", "more than five times")),
    "18.P2": Prediction("The correction ladder again at k = 4, but with 4 updates per batch (mini-batches, as AReaL "
                        "and verl make). Which correction keeps the highest held-out accuracy: 'behaviour_clip', "
                        "'decoupled', 'token_tis', 'sequence_mask' or 'none'?",
                        choices=("behaviour_clip", "decoupled", "token_tis", "sequence_mask", "none")),
}
"""Predict-then-run questions: the learner guesses, then an experiment measures (``reveal``)."""
