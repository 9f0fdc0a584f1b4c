"""LoRA through ``peft``: train a small adapter beside frozen weights, and use the base as π_ref for free.

LoRA (Hu et al. 2021) freezes a weight matrix W (out × in) and learns a low-rank change beside it:

    h = W x + (α / r) · B A x          A: (r, in), B: (out, r), r ≪ in; B starts at 0, so the model starts as W

Only A and B are trained: for the sums model's seven projections per layer, rank 8 is about 9 % of
its weights, and AdamW keeps moments for those alone. The reference model of GRPO's KL term is the
starting policy, and with LoRA that is the same network with the adapter switched off
(``peft``'s ``with model.disable_adapter():``), so no second copy is kept: :class:`AdapterOff` is
that reference. TRL does the same when given ``peft_config=LoraConfig(...)`` (its ref_model is None).

Sampling needs no adapter at all: W + (α/r)·B A is one matrix again. The engine's fast path computes with
those merged weights (:func:`merged_linear`, a sum beside W: the model is not changed), as TRL merges the adapter
(``merge_adapter()``) before vLLM reads the weights, so a LoRA policy samples at the base model's speed.

``GRPOConfig(lora_rank=8, lora_alpha=16, lora_target_modules="all-linear")`` turns it on in the
trainer; :func:`add_lora` does it to any model. Settings that cannot apply are refused before any
work, naming the field: a rank ≤ 0, a target module the model does not have.
"""

import warnings

import torch

from grpo_edu.common import _checks

ALL_LINEAR = "all-linear"
"""``peft``'s name for every Linear layer but the output head (here: q, k, v, o, gate, up, down)."""


def _peft():
    try:
        import peft
    except ImportError:
        _checks.fail("lora_rank", "needs the peft package, which is not installed",
                     "pip install peft (or pip install -e '.[lora]'), or leave lora_rank=None for full fine-tuning",
                     error=ImportError)
    return peft


def target_list(target_modules):
    """``"q_proj,v_proj"`` → ["q_proj", "v_proj"]; ``"all-linear"`` stays a string (``peft``'s own value)."""
    if not isinstance(target_modules, str) or not target_modules.strip():
        _checks.fail("lora_target_modules", f"must be a non-empty string, got {target_modules!r}",
                     "pass module names separated by commas, e.g. 'q_proj,v_proj', or 'all-linear'")
    if target_modules.strip() == ALL_LINEAR:
        return ALL_LINEAR
    names = [name.strip() for name in target_modules.split(",") if name.strip()]
    if not names:                                       # "," or " , ": peft would say "no target_modules"
        _checks.fail("lora_target_modules", f"names no module ({target_modules!r} holds only commas and spaces)",
                     "pass module names separated by commas, e.g. 'q_proj,v_proj', or 'all-linear'")
    return names


ALPHA_RANGE = (1e-3, 1e4)
"""The ``lora_alpha`` values a run can train with. The adapter's output is scaled by α / r: at α = 1e30 every
gradient overflows to ∞, clipping then scales each update to 0 and nothing trains; at α = 1e-30 the adapter
adds nothing the model can feel. peft's examples use α = r to 2·r, with r up to a few hundred."""


def check_alpha(alpha):
    """Refuse an α that is not a positive number, or one so large or small that no update can change the model
    (:data:`ALPHA_RANGE`). Checked whether or not LoRA is on: a ``lora_alpha`` of NaN is an error either way."""
    _checks.positive_float("lora_alpha", alpha, fix="pass a positive scale, usually 2 × lora_rank")
    lowest, highest = ALPHA_RANGE
    if not lowest <= alpha <= highest:
        why = ("the adapter's output is scaled by α / r, so every gradient overflows to ∞, clipping scales each "
               "update to 0, and nothing trains" if alpha > highest else
               "the adapter's output is scaled by α / r, so what it learns never reaches the model's output")
        _checks.fail("lora_alpha", f"must be from {lowest:g} to {highest:g}, got {alpha!r}: {why}",
                     "pass α from 1 to 2 × lora_rank (peft's usual values; 16 is the default)")


def check_settings(rank, alpha, target_modules):
    """Refuse settings that cannot apply to any model (rank, alpha, the module list's form)."""
    _checks.positive_int("lora_rank", rank, fix="pass a rank of 1 or more (8 or 16 are usual), or lora_rank=None "
                                                "for full fine-tuning")
    check_alpha(alpha)
    return target_list(target_modules)


def check_rank_fits(model, rank, targets):
    """Refuse a rank larger than a targeted layer's narrower side: A is (r, in) and B is (out, r), so B·A has
    rank at most min(in, out), and a larger r adds weights (more than the layer's own) but no rank."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    widths = {name.rsplit(".", 1)[-1]: min(module.in_features, module.out_features)
              for name, module in model.named_modules()
              if isinstance(module, torch.nn.Linear) and module is not head
              and (targets == ALL_LINEAR or name.rsplit(".", 1)[-1] in targets)}
    if widths and rank > min(widths.values()):
        narrow = min(widths, key=widths.get)
        _checks.fail("lora_rank", f"is {rank}, larger than the {widths[narrow]} of {narrow} (the narrower side of "
                     f"the smallest layer it adapts): B·A cannot have a rank above {widths[narrow]}, and the "
                     "'low-rank' adapter would hold more weights than the layer it adapts",
                     f"pass a rank of at most {widths[narrow]} (8 or 16 are usual), or leave lora_rank out for "
                     "full fine-tuning")


def linear_names(model):
    """The short names of the model's Linear layers (``q_proj``, …), the output head left out."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                   if isinstance(module, torch.nn.Linear) and module is not head})


def lora_config(rank=8, alpha=16.0, target_modules=ALL_LINEAR):
    """The ``peft.LoraConfig`` of these settings (no dropout, no bias: the adapter is B·A alone)."""
    targets = check_settings(rank, alpha, target_modules)
    return _peft().LoraConfig(r=rank, lora_alpha=alpha, target_modules=targets, lora_dropout=0.0, bias="none",
                              task_type="CAUSAL_LM")


def add_lora(model, rank=8, alpha=16.0, target_modules=ALL_LINEAR):
    """``model`` wrapped by ``peft`` with a LoRA adapter on ``target_modules``: only the adapter trains.

    A target the model does not have is refused here, with the names it does have."""
    targets = check_settings(rank, alpha, target_modules)
    if targets != ALL_LINEAR:
        have = linear_names(model)
        missing = [name for name in targets if name not in have]
        if missing:
            _checks.fail("lora_target_modules", f"names {', '.join(missing)}, which {type(model).__name__} does not "
                         f"have", f"pick from its Linear layers: {', '.join(have)}; or pass 'all-linear'")
    check_rank_fits(model, rank, targets)
    with warnings.catch_warnings():                     # peft calls transformers' deprecated names: not ours to fix
        warnings.simplefilter("ignore", FutureWarning)
        return _peft().get_peft_model(model, lora_config(rank, alpha, target_modules))


def load_adapter_weights(model, weights):
    """Put a saved adapter's tensors (peft's ``adapter_model.safetensors``, read as {name: tensor}) into
    ``model``'s adapter. Returns ``{"missing", "unexpected"}``: the adapter tensors the file lacks, and
    the file's tensors the model has no place for."""
    from peft import set_peft_model_state_dict

    expected = {k for k in model.state_dict() if "lora_" in k}
    result = set_peft_model_state_dict(model, weights)
    missing = sorted(k for k in getattr(result, "missing_keys", []) if k in expected)
    return {"missing": missing, "unexpected": sorted(getattr(result, "unexpected_keys", []))}


def is_lora(model):
    """True when ``model`` is a ``peft`` model with an adapter that can be switched off."""
    return hasattr(model, "disable_adapter") and hasattr(model, "peft_config")


class AdapterOff:
    """π_ref of a LoRA policy: the same network called with its adapter switched off (no second copy).

    Called like a model (``completion_logprobs(reference, …)`` works unchanged); holds no weights of its own.
    """

    def __init__(self, model):
        self.model = model

    def __call__(self, *args, **kwargs):
        with self.model.disable_adapter():
            return self.model(*args, **kwargs)

    @property
    def config(self):
        return self.model.config

    def parameters(self):
        return iter(())                                   # none of its own: it is the policy's base

    def eval(self):
        return self

    def requires_grad_(self, flag=True):
        return self


def reference_for(model):
    """π_ref for GRPO's KL term: the adapter switched off for a LoRA model, else a frozen copy of ``model``."""
    import copy

    if is_lora(model):
        return AdapterOff(model)
    return copy.deepcopy(model).eval().requires_grad_(False)


def trainable_fraction(model):
    """(trainable weights, all weights) of ``model``."""
    params = list(model.parameters())
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)


def merged_linear(module):
    """(weight, bias) that a Linear computes with, its LoRA adapters merged in: W + Σ (α/r)·B·A over the active
    adapters (each term ``peft``'s ``get_delta_weight``), the bias plus B's bias where ``lora_bias`` is on.

    That is what ``peft``'s ``merge_adapter()`` writes into W, and what TRL's vLLM path samples with (it merges
    the adapter, syncs the weights to vLLM, then unmerges). Here the sum is a new tensor beside W, so the model
    is never changed and there is nothing to undo (an in-place merge and unmerge, W + ΔW − ΔW, need not give W
    back bit for bit). A plain ``nn.Linear`` gives its own tensors; call :func:`merge_refusal` first.
    """
    refusal = merge_refusal(module)
    if refusal is not None:
        _checks.fail("module", f"cannot be merged: {refusal}", "sample it through its own forward")
    if not hasattr(module, "base_layer"):
        return module.weight, module.bias
    base = module.base_layer
    weight, bias = base.weight, base.bias
    if module.merged or module.disable_adapters:                 # merged: W holds ΔW already; off: W alone
        return weight, bias
    for name in module.active_adapters:
        if name in module.lora_A:
            weight = weight + module.get_delta_weight(name).to(weight.dtype)            # (out, in)
            if module.lora_bias.get(name):
                bias = bias + module.lora_B[name].bias * module.scaling[name]          # (out,)
    return weight, bias


def merge_refusal(module):
    """Why :func:`merged_linear` cannot stand for ``module``'s forward (a short reason), or None when it can."""
    if type(module) is torch.nn.Linear:
        return None
    layer = _peft().tuners.lora.layer
    if type(module) is not layer.Linear or type(getattr(module, "base_layer", None)) is not torch.nn.Linear:
        return f"{type(module).__name__} is not a Linear or peft's LoRA Linear over one"
    if getattr(module, "fan_in_fan_out", False):
        return "its weight is stored transposed (fan_in_fan_out)"
    if module.merged and module.disable_adapters:
        return "its adapter is merged and switched off at once"
    active = [name for name in module.active_adapters if name in module.lora_A]
    if any(name in getattr(module, "lora_variant", {}) or getattr(module, "use_dora", {}).get(name)
           for name in active):
        return "it is a LoRA variant (DoRA or another), not h = W x + (α/r)·B A x"
    if module.training and any(getattr(module.lora_dropout[name], "p", 0) > 0 for name in active):
        return "its LoRA dropout is on (training mode)"
    return None
