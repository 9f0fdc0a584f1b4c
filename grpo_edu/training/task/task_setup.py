"""What a task needs to run: its model, its tool, and a model that can write its answers.

A task is more than prompts and a checker. ``sums`` is answered with working (``3+8=11;11+5=16#16``) and
``calc`` with a calculator call (``[347+85]=432#432``), in characters the course's adder was never given:
trained on them, the adder can only score 0, and says nothing of why. So the command line starts such a
task from its own preset (``config.TASK_PRESETS``: its bundled model, its answer length), puts the
calculator in the loop where the task is answered with one (:func:`tool_for`), and refuses, before any
model loads, a model whose tokenizer cannot write the task's characters (:func:`check_model_writes_task`).

==========  ======================  ========================================
task        bundled model           in the loop
==========  ======================  ========================================
addition    assets/tiny-adder       —
sums        assets/tiny-sums        —
calc        assets/tiny-calc        ``tools.Tool()``: the calculator
words       assets/tiny-words       the model's chat template (``chat_tokenizer.render_prompts``)
==========  ======================  ========================================
"""

from grpo_edu.common import _checks
from grpo_edu.training.trainers.config import PRESETS, TASK_PRESETS


def bundled_model_of(task_name):
    """The bundled model name a task starts from (``bundled-calc`` for calc), or "bundled" (the adder)."""
    from grpo_edu.training.trainers.config import BUNDLED_MODEL

    return PRESETS[TASK_PRESETS[task_name]]["model"] if task_name in TASK_PRESETS else BUNDLED_MODEL


def tool_for(task):
    """The tool a task is answered with: the calculator (``tools.Tool()``) for a task that says
    ``uses_calculator``, else None."""
    if getattr(task, "uses_calculator", False):
        from grpo_edu.training.rollouts.tools import Tool

        return Tool()
    return None


def unwritable_chars(tokenizer, task, tool=None):
    """The characters a task's answers (``task.chars``) or its tool's syntax need that ``tokenizer`` cannot
    write as a known token (each would be ``<unk>``), in order; "" when it can write them all."""
    needed = getattr(task, "chars", "") or ""
    if tool is not None:
        needed += tool.call_start + tool.call_end + tool.error_text
    unk = getattr(tokenizer, "unk_token_id", None)
    missing = []
    for ch in dict.fromkeys(needed):
        ids = tokenizer(ch, add_special_tokens=False)["input_ids"]
        if not ids or (unk is not None and unk in ids):
            missing.append(ch)
    return "".join(missing)


def check_model_writes_task(tokenizer, task, tool=None, *, model="model", arg="model"):
    """Refuse a model whose tokenizer cannot write the task's answers or its tool's call syntax, naming
    ``model`` (the name the user gave), under ``arg`` (``--model`` on the command line), and the task's own
    model as the fix."""
    from grpo_edu.training.model.chat_tokenizer import check_chat_tokenizer, is_chat_task

    if is_chat_task(task):              # a question in words: the template must render, the answer must end
        check_chat_tokenizer(tokenizer)
    missing = unwritable_chars(tokenizer, task, tool)
    if missing:
        what = "its calculator calls and answers" if tool is not None else "its answers"
        own = bundled_model_of(task.name)
        _checks.fail(arg, f"{model}'s tokenizer cannot write {' '.join(repr(c) for c in missing)}, which task "
                     f"{task.name!r} needs for {what}, so every reward would be 0",
                     f"leave --model out to use the task's own model ({own}), or pass a model whose tokenizer "
                     "has those characters (grpo-edu make-model --task "
                     f"{task.name} --out DIR builds one)")


def check_model_for_task(model, task, tool=None, *, trust_remote_code=False, arg="model"):
    """:func:`check_model_writes_task` for a model given by name or folder, reading its tokenizer alone (no
    weights load), so the refusal comes before any work."""
    from grpo_edu.training.model.models import load_tokenizer, locate_model

    source, info = locate_model(model)
    if info["kind"] == "hub":                  # a hub model's tokenizer is the loader's to fetch and check
        return
    try:                                       # a damaged tokenizer file, or one asking to run code: named here
        tokenizer = load_tokenizer(source, trust_remote_code=trust_remote_code)
    except OSError:                            # the model's own loader names what is wrong with the folder
        return
    check_model_writes_task(tokenizer, task, tool, model=model, arg=arg)
