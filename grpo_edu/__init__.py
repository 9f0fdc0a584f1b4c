"""grpo_edu: learn GRPO (Group Relative Policy Optimization) on a tested implementation.

Importing the package is cheap: torch, transformers and matplotlib load only when a
function that needs them is first used, so the early lessons start at once.

Where each concept lives (one module per concept, named after it):

==================  =========================================================
``schedule``        batch_size, G, step, epoch, total_training_steps arithmetic; the lr schedule
``policy_gradient`` the log-derivative trick, baselines, importance sampling (toy demos)
``advantages``      group-relative advantages Â_i = (R_i − μ)/(σ + eps)
``kl``              per-token KL estimators k1, k2, k3 against π_ref
``kl_gradients``    what each KL estimator's gradient follows (forward or reverse KL)
``losses``          the PPO-clipped GRPO loss and its aggregations (loss_type)
``notation``        the symbol → code-name table used everywhere
``tasks``           verifiable tasks (addition, …) and prompt-file loading
``rollout``         sampling G completions per prompt, with per-token log-probs
``rewards``         reward functions → a checked (B, G) table; building blocks and ``combine``
``replay``          the replay buffer (错题本): admission, eviction, mixing, JSONL/SQLite storage
``forgetting``      lesson 06's experiment: train on task A, then B, and probe both
``diagnose``        findings from a run's metrics (ours or TRL's): symptom, evidence, fixes
``clinic``          lesson 09's sick runs: each case, its expected finding, its cure
``trl_example``     makes ``assets/trl-runs``: real TRL runs for ``diagnose`` (needs trl)
``export``          a config carried to TRL (GRPOConfig kwargs) and verl (overrides), traps named
``graduation``      the course's run in TRL with the exported settings (one or more processes)
``word_problems``   chat-template prompts and final-number/format rewards (the GPU section)
``memory``          GPU memory of a GRPO run by part: weights, optimizer, reference model, KV cache
``config``          GRPOConfig: every knob of a run, checked up front
``trainer``         GRPOTrainer: the loop of the algorithm box
``evaluation``      held-out accuracy of a model
``checkpoint``      atomic safetensors + JSON checkpoints, exact resume, damaged files named
``run_folder``      one run per output folder: a lock, and no mixing with another run
``models``          loading the bundled model, a local folder, a run's folder or a hub name
``make_model``      building the bundled tiny model
``bench``/``cli``   ``grpo-edu bench`` and the ``grpo-edu`` command
``exercises``       self-check exercises for the lessons
``claims``          a lesson's claims about a run, checked with measured margins
``viz``/``widgets`` matplotlib figures and ipywidgets panels for the lessons
``progress``        progress bars that leave a final text (not "0%") in saved notebooks
``browser``         JupyterLab + headless Chromium for the browser test and ``screenshots``
==================  =========================================================
"""

from importlib import import_module

__version__ = "0.1.0"

# public name -> module that defines it (resolved lazily, PEP 562)
_EXPORTS = {
    "GRPOConfig": "config",
    "GRPOTrainer": "trainer",
    "TrainingSchedule": "schedule",
    "ReplayBuffer": "replay",
    "ReplaySample": "replay",
    "check_claim": "claims",
    "group_advantages": "advantages",
    "group_stats": "advantages",
    "rank_advantages": "advantages",
    "zero_std_groups": "advantages",
    "dead_group_probability": "advantages",
    "kl_estimate": "kl",
    "grpo_loss": "losses",
    "NOTATION": "notation",
    "check": "exercises",
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
