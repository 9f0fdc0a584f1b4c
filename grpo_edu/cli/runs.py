"""``grpo-edu train``, ``eval`` and ``export``: run GRPO, score a model, carry a run's settings to TRL or verl.

``grpo-edu train`` is the course's main job: a full GRPO run on the bundled tiny model,
with a progress bar, the held-out accuracy before training (printed as soon as it is
measured) and after, and the trained model saved (by default into ``runs/<timestamp>/``)
for ``grpo-edu eval --model DIR`` to score. Every GRPOConfig field is a flag
(``--batch-size 16``, ``--beta 0``, …); ``grpo-edu train --help`` gives each one's meaning,
read from its docstring in ``grpo_edu/training/trainers/config.py``.
"""

import json
import os
import sys
import time
from pathlib import Path

from grpo_edu.cli.flags import _add_config_flags, _add_preset_flag, _config_from

# --- train ---------------------------------------------------------------------------------
def default_run_dir(now=None):
    """``runs/<timestamp>`` (e.g. runs/20261130-091500) under the current folder; a suffix if taken."""
    base = Path("runs") / time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    path, n = base, 1
    while path.exists():
        n += 1
        path = Path(f"{base}-{n}")
    return str(path)


class MetricsFile:
    """``--metrics-out``: opened at the first finished step, with the run's whole history.

    Nothing is touched before a step completes, so a resume that fails leaves the file as
    it was; a resumed run writes the restored steps first, then its new ones. Unless ``replace``
    (--resume, --overwrite) the file is created exclusively: one that another run created after
    the checks is kept, and this run's metrics go beside it (NAME-2.jsonl, ...), said once.
    """

    def __init__(self, path, trainer, *, replace=False):
        self.path, self.trainer, self.file, self.replace = path, trainer, None, replace

    def _open(self):
        if self.replace:
            return open(self.path, "w", encoding="utf-8")
        path, n = Path(self.path), 1
        while True:
            try:
                handle = open(path, "x", encoding="utf-8")
            except FileExistsError:
                n += 1
                path = Path(self.path).with_name(f"{Path(self.path).stem}-{n}{Path(self.path).suffix}")
                continue
            if n > 1:
                print(f"grpo-edu train: warning: --metrics-out: {self.path} appeared during the run (another "
                      f"run's?): kept it; this run's metrics go to {path}", file=sys.stderr, flush=True)
                self.path = str(path)
            return handle

    def __call__(self, metrics):
        if self.file is None:
            self.file = self._open()
            rows = self.trainer.history          # already holds this step
        else:
            rows = [metrics]
        for row in rows:
            self.file.write(json.dumps(row) + "\n")
        self.file.flush()

    def close(self):
        if self.file is not None:
            self.file.close()


def check_metrics_out(path, *, replace=False, inputs=()):
    """Refuse a ``--metrics-out`` that cannot be written, or that would silently replace another
    run's metrics (an existing file is replaced only with ``--resume`` or ``--overwrite``), or a file
    the run reads or keeps itself (``inputs``: {field: path}, e.g. the dataset or the replay buffer)."""
    from grpo_edu.common import _checks

    path = Path(path)
    for field, other in dict(inputs).items():
        if other is not None and os.path.abspath(other) == os.path.abspath(path):
            _fail("--metrics-out", f"{path} is also the run's {field}, which the metrics would overwrite",
                  "write the metrics to a file of their own, e.g. metrics.jsonl")
    if path.is_dir():
        _fail("--metrics-out", f"{path} is a folder", "pass a file path, e.g. metrics.jsonl")
    folder = path.resolve().parent
    if not folder.is_dir():
        _fail("--metrics-out", f"the folder of {path} does not exist", f"create it first (mkdir -p {path.parent}), "
              "or write the metrics elsewhere")
    if (not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK))
            or not _checks.can_create_file_in(folder)):            # tried: root passes every os.access
        _fail("--metrics-out", f"{path} cannot be written", "pass a file in a folder you can write to")
    if path.exists() and not replace:
        _fail("--metrics-out", f"{path} already holds metrics (another run's?)",
              "pass another file, or --overwrite to replace it (--resume rewrites it with the resumed run's history)")


def _fail(arg, problem, fix):
    from grpo_edu.common import _checks

    _checks.fail(arg, problem, fix)


def check_dataset(path):
    """Refuse a ``--dataset`` that exists but is not a regular file, before the model loads: a folder, or a device
    or pipe (reading /dev/zero would never end). A missing file is the prompt loader's to name (``source: no file
    at ...``), which train and export both run before any model loads."""
    import stat

    if path is None:
        return
    try:
        mode = os.stat(path).st_mode                 # follows a link: what would be read
    except OSError:
        return
    if stat.S_ISDIR(mode):
        _fail("dataset", f"{path} is a folder", "name the prompt file inside it (.json, .jsonl or .csv)")
    if not stat.S_ISREG(mode):
        _fail("dataset", f"{path} is not a regular file (a device, a pipe, or a link to one), so reading it might "
              "never end", "pass a .json, .jsonl or .csv file of prompts")


def check_replay_file(path):
    """Refuse a ``--replay-path`` that exists but is not a regular file (a device or a pipe behind a .jsonl name
    would be read forever), before the model loads; a missing one is created by the run."""
    import stat

    if path is None or not os.path.lexists(path):
        return
    try:
        mode = os.stat(path).st_mode
    except OSError:
        _fail("replay_path", f"{path} is a link to nothing", "remove the broken link, or pass another file")
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):     # a folder is refused by the config, by name
        _fail("replay_path", f"{path} is not a regular file (a device, a pipe, or a link to one)",
              "pass a .jsonl or .sqlite file of your own, or leave --replay-path out to keep the buffer in memory")


def cmd_train(args):
    from tqdm.auto import tqdm

    from grpo_edu.cli import method_flags
    from grpo_edu.training.task import task_setup
    from grpo_edu.training.trainers.config import GRPOConfig
    from grpo_edu.training.trainers.family import make_trainer
    from grpo_edu.training.task.tasks import get_task
    from grpo_edu.training.trainers.trainer import no_signal_fix, unchanged_reason

    t_start = time.perf_counter()
    if args.resume and args.overwrite:
        _fail("--overwrite", "cannot be combined with --resume",
              "resume a run (it keeps its checkpoints) or overwrite it, not both")
    if args.metrics_out:                          # every output path is checked before anything is deleted
        check_metrics_out(args.metrics_out, replace=args.resume or args.overwrite,
                          inputs={"dataset": args.dataset, "replay_path": args.replay_path})
    if args.output_dir is None and not args.resume:       # a resumed run saves into the folder it resumes
        args.output_dir = default_run_dir()
    elif args.output_dir is None:                         # ...so its checks (e.g. --checkpoint-every) see that folder
        from grpo_edu.training.runs.checkpoint import find_checkpoint

        args.output_dir = str(find_checkpoint(args.resume)[1])
        print(f"output_dir: not given, so this resumed run saves into {args.output_dir}, the folder it resumes",
              file=sys.stderr)
    config = _config_from(args)                    # every field checked before any model loads
    method, family = method_flags.method_and_settings(args, default_beta=GRPOConfig.beta)
    check_dataset(config.dataset)
    check_replay_file(config.replay_path)
    task = get_task(config.task)
    tool = task_setup.tool_for(task)               # the calculator in the loop for the tool task
    if config.dataset is None:                     # a prompt file of one's own may need other characters
        task_setup.check_model_for_task(config.model, task, tool, trust_remote_code=config.trust_remote_code,
                                        arg="--model")
    if config.output_dir:
        from grpo_edu.training.runs import run_folder

        run_folder.check_output_dir(config.output_dir)
        run_folder.refuse_if_locked(config.output_dir)     # a live run writes there: refused, even with --overwrite
        if not (args.resume or args.overwrite):
            run_folder.refuse_another_run(config.output_dir)   # before the model loads; train() checks again, locked

    def show_eval(record):                         # printed as soon as it is measured
        when = "before training" if record["step"] == 0 else f"at step {record['step']}"
        tqdm.write(f"held-out accuracy {when}: {record['accuracy']:.1%} "
                   f"(sampling at temperature 1, {len(trainer.eval_rows)} prompts)")

    if getattr(args, "two_process", False) or config.policy_lag or getattr(args, "free_running", False):
        trainer = _two_process_trainer(args, method, family, tool, config, show_eval)
    else:
        trainer = make_trainer(method, config, family=family, eval_callbacks=[show_eval], tool=tool)
    metrics_file = (MetricsFile(args.metrics_out, trainer, replace=bool(args.resume or args.overwrite))
                    if args.metrics_out else None)
    if metrics_file:
        trainer.callbacks.append(metrics_file)
    sched = trainer.schedule
    with_tool = f" · the {tool.name} in the loop (tools/* metrics)" if tool is not None else ""
    print(f"{trainer.run_name()} on {config.model} · task {config.task}{with_tool} · {len(trainer.train_rows)} "
          f"prompts · B={config.batch_size} G={config.num_generations} → {sched.total_steps} steps "
          f"(stops by {sched.stop_reason}) · device {trainer.device}", flush=True)
    try:
        history = trainer.train(resume_from=args.resume, overwrite=args.overwrite, progress=not args.no_progress)
    finally:
        if metrics_file:
            metrics_file.close()
    if trainer.evals:
        first, last = trainer.evals[0], trainer.evals[-1]
        print(f"held-out accuracy (sampling at temperature 1, {len(trainer.eval_rows)} prompts): "
              f"step {first['step']}: {first['accuracy']:.1%} → step {last['step']}: {last['accuracy']:.1%}")
    if history:
        last = history[-1]
        kl = "not measured (beta 0)" if last["kl"] is None else f"{last['kl']:.4f}"
        calls = (f", tools/call_frequency {last['tools/call_frequency']:.2f}, tools/failure_frequency "
                 f"{last['tools/failure_frequency']:.2f}" if "tools/call_frequency" in last else "")
        print(f"last step: reward {last['reward_mean']:.3f}, kl to the start {kl}{calls}")
    out = trainer.config.output_dir
    if out:
        print(f"model saved in {out} (checkpoint-{trainer.step_count:06d}); score it with: "
              f"grpo-edu eval --model {out}")
    print(f"wall time {time.perf_counter() - t_start:.1f} s")
    unchanged = unchanged_reason(history) if trainer.config.max_grad_norm > 0 else None
    if unchanged and all(row["grad_norm"] == 0 for row in history):   # σ = 0 everywhere: the task gave nothing
        print(f"grpo-edu train: warning: nothing was trained: {unchanged}. Fix: "
              f"{no_signal_fix(history, trainer.config.num_generations)}", file=sys.stderr)
    elif unchanged:                                 # ∞ or NaN gradients: a broken run does not end as a success
        print(f"grpo-edu train: error: nothing was trained: {unchanged}. Fix: check the run's settings against "
              "grpo-edu train --help, and its metrics (grad_norm) with grpo-edu diagnose", file=sys.stderr)
        return 1
    return 0


def _two_process_trainer(args, method, family, tool, config, show_eval):
    """``--two-process``: lesson 18's TwoProcessGRPOTrainer, the sampler in its own process (``--policy-lag`` K
    updates behind, or ``--free-running`` up to ``--max-staleness``)."""
    if not getattr(args, "two_process", False):
        flag = "--free-running" if getattr(args, "free_running", False) else "--policy-lag"
        _fail(flag, "needs a sampler apart from the trainer", "add --two-process (the sampler in its own process)"
              + ("" if flag == "--free-running" else ", or leave --policy-lag out"))
    if method not in (None, "grpo") or family is not None:
        _fail("--two-process", f"runs GRPO only, not --method {method}", "leave --method out, or --two-process")
    if tool is not None:
        _fail("--two-process", f"cannot train with a tool in the loop (task {config.task})", "pick another --task")
    from grpo_edu.training.asynchronous.processes import TwoProcessGRPOTrainer

    return TwoProcessGRPOTrainer(config, eval_callbacks=[show_eval], free_running=args.free_running)


# --- export --------------------------------------------------------------------------------
def cmd_export(args):
    from grpo_edu.beyond.export import format_export, to_trl, to_verl
    from grpo_edu.training.trainers.config import BUNDLED_MODEL
    from grpo_edu.training.task.tasks import get_task, load_prompts

    given = {"--device": args.device != "auto", "--output-dir": args.output_dir is not None}
    unused = [flag for flag, was_given in given.items() if was_given]
    if unused:                                     # accepted (train takes them) but nothing to export
        verb = "changes" if len(unused) == 1 else "change"
        print(f"grpo-edu export: note: {' and '.join(unused)} {verb} nothing in {args.target}'s settings: the "
              f"device and the output folder are {args.target}'s own to set", file=sys.stderr)
    if args.output_dir is None:                    # the same defaults and checks as train, so that what
        args.output_dir = default_run_dir()        # train accepts exports, and what it refuses does not
    config = _config_from(args)
    check_dataset(config.dataset)
    rows = load_prompts(config.dataset) if config.dataset else get_task(config.task).split("train")
    config.schedule(len(rows))                     # e.g. a batch larger than the dataset
    model = config.model
    run = _run_settings(model) if model != BUNDLED_MODEL else {}
    if run:                                        # a run's folder: its checkpoint is what TRL or verl can load
        from grpo_edu.training.model.models import locate_model

        model = locate_model(model)[0]
        adapter = (f" (a LoRA run's: the adapter merged into its base model; the adapter alone, for peft, is in "
                   f"{Path(model) / 'adapter'})" if run.get("lora_rank") else "")
        print(f"grpo-edu export: note: --model {config.model} is a run's output folder: the model to load is its "
              f"latest checkpoint, {model}{adapter}", file=sys.stderr)
    dataset_out = getattr(args, "dataset_out", None)
    if dataset_out is not None:                    # checked before any work: the target, the suffix, the folder
        if args.target != "trl":
            _fail("--dataset-out", "writes TRL's dataset form only", "use it with grpo-edu export trl")
        if not dataset_out.endswith(".jsonl"):
            _fail("--dataset-out", f"{dataset_out} does not end in .jsonl", "name a .jsonl file, e.g. words.jsonl")
        parent = Path(dataset_out).resolve().parent
        if not parent.is_dir():
            _fail("--dataset-out", f"its folder {parent} does not exist", "create the folder, or name a file in one")
        if config.dataset is not None and os.path.abspath(config.dataset) == os.path.abspath(dataset_out):
            _fail("--dataset-out", f"{dataset_out} is also the run's --dataset, which the export would overwrite "
                  "(and --dataset cannot read TRL's form back)", "write the export to a file of its own, e.g. trl.jsonl")
        from grpo_edu.common import _checks

        problem = _checks.output_file_problem(dataset_out, overwrite=args.overwrite)
        if problem:                                # an existing file is replaced only with --overwrite
            _fail("--dataset-out", *problem)
    if args.target == "trl":
        result = to_trl(config, num_processes=args.processes)
        if dataset_out is not None:
            from grpo_edu.beyond.export import write_trl_dataset

            task = get_task(config.task)
            n = write_trl_dataset(task, rows, dataset_out, overwrite=args.overwrite)
            form = "conversational (prompt: a list of {role, content} messages)" if hasattr(task, "messages") \
                else "standard (prompt: a string)"
            print(f"grpo-edu export: wrote {n} rows to {dataset_out}, TRL's {form} form: "
                  f"datasets.load_dataset('json', data_files={dataset_out!r})['train']", file=sys.stderr)
    else:                                          # a model named with --model is verl's model.path
        model_path = {} if config.model == BUNDLED_MODEL else {"model_path": model}
        result = to_verl(config, n_gpus=args.processes, **model_path)
    print(format_export(result, args.target))
    return 0


# --- eval ----------------------------------------------------------------------------------
def cmd_eval(args):
    from grpo_edu.training.task import task_setup
    from grpo_edu.training.trainers.config import PRESETS, TASK_PRESETS
    from grpo_edu.training.task.evaluation import evaluate
    from grpo_edu.training.model.models import load_model_and_tokenizer, locate_model
    from grpo_edu.training.rollouts.multi_turn import evaluate_with_tools
    from grpo_edu.training.task.tasks import get_task

    if args.show < 0:
        _fail("--show", f"is {args.show}", "give how many sample answers to print, 0 or more")
    if args.seed < 0:
        _fail("--seed", f"is {args.seed}", "give a seed of 0 or more (as grpo-edu train does)")
    run = _run_settings(args.model) if args.model is not None else {}
    if args.task is None:                          # a run is scored on the task it trained on
        args.task = run.get("task", "addition")
    preset = PRESETS.get(TASK_PRESETS.get(args.task), {})
    if args.model is None:                         # the task's own model: tiny-calc for calc, tiny-sums for sums
        args.model = task_setup.bundled_model_of(args.task)
    if args.max_new_tokens is None:                # long enough for the task's answers (a call and its reply)
        args.max_new_tokens = run.get("max_completion_length") or preset.get("max_completion_length", 8)
    task = get_task(args.task)
    tool = task_setup.tool_for(task)
    rows = task.split(args.split, args.n)
    source, info = locate_model(args.model)
    if info["kind"] == "run":
        print(f"{args.model} is a run's output folder: scoring its latest checkpoint, {info['checkpoint']}"
              + (" (the LoRA run's adapter merged into its base model)" if run.get("lora_rank") else ""))
    model, tok = load_model_and_tokenizer(source, trust_remote_code=args.trust_remote_code)
    task_setup.check_model_writes_task(tok, task, tool, model=args.model, arg="--model")
    if hasattr(task, "messages"):                  # words: the questions go through the model's chat template
        from grpo_edu.training.model.chat_tokenizer import render_prompts

        rows = render_prompts(tok, task, rows)
    sampling = dict(temperature=args.temperature, num_samples=args.samples, seed=args.seed,
                    max_new_tokens=args.max_new_tokens)
    if tool is not None:                           # the task is answered with the calculator in the loop
        res = evaluate_with_tools(model, tok, rows, task, tool, **sampling)
        samples = [s[:4] for s in res["samples"]]
    else:
        res = evaluate(model, tok, rows, task, **sampling)
        samples = res["samples"]
    with_tool = f", the {tool.name} in the loop" if tool is not None else ""
    print(f"{args.model} on {args.task}/{args.split} ({len(rows)} prompts × {args.samples} samples, "
          f"temperature {args.temperature}{with_tool}): accuracy {res['accuracy']:.1%}")
    if tool is not None:
        print(f"answers with a call: {res['call_rate']:.1%}; with a failed call: {res['failed_call_rate']:.1%}")
    for prompt, text, answer, ok in samples[:args.show]:
        print(f"  {prompt}{text!s:<6} {'✓' if ok else '✗ expected ' + answer}")
    return 0


def _run_settings(model):
    """The GRPOConfig fields (as JSON) of the run whose output folder or checkpoint ``model`` names; {} for a
    model folder or a name."""
    from grpo_edu.training.runs import checkpoint as ckpt

    path = Path(model).expanduser()
    if not path.is_dir() or (path / "config.json").exists() and not (path / "trainer_state.json").exists():
        return {}
    try:
        folder, _ = ckpt.find_checkpoint(path, arg="model")
        config = json.loads((folder / "trainer_state.json").read_text(encoding="utf-8"))["config"]
    except (ValueError, OSError, KeyError):        # locate_model names what is wrong with the folder
        return {}
    return config if isinstance(config, dict) else {}


# --- the parsers -----------------------------------------------------------------------------
def add_train(sub, method_flags=True):
    """``grpo-edu train``; ``method_flags=False`` leaves out lesson 13's --method flags, whose module imports torch
    (seconds): for a command line that names another command, which never reads them."""
    train = sub.add_parser("train", help="run GRPO (default: the bundled tiny model on two-digit addition)",
                           description="Run GRPO. The trained model is saved into --output-dir "
                                       "(default: runs/<timestamp>/ under the current folder); "
                                       "score it with `grpo-edu eval --model DIR`.")
    _add_config_flags(train)
    _add_preset_flag(train)
    for action in train._actions:               # the field's "None saves nothing" is the library's, not train's
        if action.dest == "output_dir":
            action.help = ("Where checkpoints and the final model go (a folder of this run's own). (default: "
                           "runs/<timestamp>/ under the current folder; a resumed run: the folder it resumes)")
    run = train.add_argument_group("the run")
    run.add_argument("--metrics-out", metavar="FILE",
                     help="write each step's metrics as a JSON line (a resumed run writes its earlier steps too)")
    run.add_argument("--resume", metavar="DIR",
                     help="continue from a run's output folder or one of its checkpoint-* folders; "
                          "saves into that run's folder unless --output-dir says otherwise")
    run.add_argument("--overwrite", action="store_true",
                     help="let this run replace another run in --output-dir (only that run's checkpoint-* "
                          "folders and latest.json are removed; nothing else)")
    run.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    run.add_argument("--two-process", action="store_true",
                     help="sample in a second process while this one trains (lesson 18's TwoProcessGRPOTrainer): "
                          "batches drawn --policy-lag updates behind, corrected by --off-policy-correction")
    run.add_argument("--free-running", action="store_true",
                     help="with --two-process: the sampler draws with the newest weights, as far ahead as "
                          "--max-staleness allows (TRL's and verl's asynchronous trainers)")
    if method_flags:
        from grpo_edu.cli.method_flags import add_method_flags

        add_method_flags(train)
    train.set_defaults(func=cmd_train)
    return train


def add_eval(sub):
    from grpo_edu.training.task.tasks import TASKS

    ev = sub.add_parser("eval", help="held-out accuracy of a model directory on a task",
                        description="Score a model: sample answers to a task's prompts and check them.")
    ev.add_argument("--model", default=None, metavar="DIR",
                    help="A model folder, a run's output folder (its latest checkpoint is used), a hub name, "
                         "or 'bundled'. (default: the task's own model: bundled, bundled-sums for sums, "
                         "bundled-calc for calc)")
    ev.add_argument("--task", default=None, metavar="{" + ",".join(TASKS) + "}",
                    help=f"The task whose prompts and checker are used; calc is answered with the calculator in "
                         f"the loop. Choices: {', '.join(TASKS)}. (default: a run's own task, else addition)")
    ev.add_argument("--split", default="heldout", choices=["heldout", "train"],
                    help="Which split's prompts to score. (default: heldout)")
    ev.add_argument("--n", type=int, default=500, metavar="INT",
                    help="Number of prompts: the split's first n. (default: 500)")
    ev.add_argument("--samples", type=int, default=1, metavar="INT",
                    help="Answers sampled per prompt. (default: 1)")
    ev.add_argument("--temperature", type=float, default=1.0, metavar="FLOAT",
                    help="Sampling temperature; 0 = greedy, the model's most likely answer. (default: 1)")
    ev.add_argument("--max-new-tokens", type=int, default=None, metavar="INT",
                    help="Most tokens per answer, a tool's reply included. (default: a run's own "
                         "max_completion_length, else the task's: 8, 42 for sums, 24 for calc)")
    ev.add_argument("--seed", type=int, default=0, metavar="INT",
                    help="Seed of the sampling: same seed, same score. (default: 0)")
    ev.add_argument("--show", type=int, default=5, metavar="INT", help="Print this many sample answers. (default: 5)")
    ev.add_argument("--trust-remote-code", action="store_true",
                    help="Allow a hub model to run its own Python code; only for code you have read. (default: off)")
    ev.set_defaults(func=cmd_eval)


def add_export(sub):
    ex = sub.add_parser("export", help="print a run's settings for TRL or verl, with the reason for each difference",
                        description="Print the settings that make TRL's GRPOTrainer (trl.GRPOConfig keyword arguments) "
                                    "or verl (command-line overrides) take the same step as grpo-edu train with "
                                    "the same flags; a comment gives the reason where names or defaults differ, "
                                    "and what cannot be matched is listed at the end.")
    ex.add_argument("target", choices=("trl", "verl"), help="The trainer to export to.")
    ex.add_argument("--processes", type=int, default=1, metavar="INT",
                    help="Processes (TRL, accelerate) or GPUs (verl) that share each step. (default: 1)")
    ex.add_argument("--dataset-out", default=None, metavar="FILE.jsonl",
                    help="Also write the run's train prompts as TRL reads them (trl only): for a chat task "
                         "(words) the conversational form, each prompt a list of {role, content} messages. An "
                         "existing file is refused unless --overwrite.")
    ex.add_argument("--overwrite", action="store_true", help="let --dataset-out replace an existing file")
    _add_config_flags(ex)
    _add_preset_flag(ex)
    ex.set_defaults(func=cmd_export)
    return ex
