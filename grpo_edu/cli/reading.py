"""``grpo-edu replay`` and ``diagnose``: read what a run left behind (its buffer file, its metrics); nothing is changed."""

from pathlib import Path

from grpo_edu.cli.runs import _fail

# --- replay --------------------------------------------------------------------------------
def cmd_replay(args):
    from grpo_edu.training.trainers.replay import describe_file

    if args.show < 0:
        _fail("--show", f"is {args.show}", "give how many of the strongest samples to print, 0 or more")
    if Path(args.path).is_dir():
        _fail("path", f"{args.path} is a folder", "name the buffer file inside it, e.g. replay.sqlite")
    print(describe_file(args.path, show=args.show))
    return 0


# --- diagnose ------------------------------------------------------------------------------
def cmd_diagnose(args):
    from grpo_edu.beyond.diagnose import coverage, diagnose, format_findings, plot_evidence

    if args.plot and Path(args.plot).is_dir():
        _fail("--plot", f"{args.plot} is a folder", f"name the image file, e.g. {Path(args.plot) / 'evidence.png'}")
    if args.plot and not Path(args.plot).resolve().parent.is_dir():
        _fail("--plot", f"the folder of {args.plot} does not exist", "create it, or write the plot elsewhere")
    if args.plot and not Path(args.plot).suffix:
        args.plot += ".png"                                   # what matplotlib would write anyway: say it
    if args.plot:
        _check_plot_file(args.plot, overwrite=args.overwrite)
    findings = diagnose(args.path, evals=args.evals)        # every input is checked before any output
    print(f"{args.path}: {format_findings(findings)}")
    if not findings:
        print("\n".join(f"  {line}" for line in coverage(args.path, evals=args.evals)))
    if args.plot:
        plot_evidence(args.path, findings).savefig(args.plot, dpi=120)
        print(f"evidence plot written to {args.plot}")
    return 0



def _check_plot_file(path, *, overwrite):
    """Refuse a ``--plot`` that matplotlib cannot write (an unknown extension), or that would write through a
    link, or that cannot be written or would replace a file (``output_file_problem``, as for every command's
    result file), before any work; an existing plain file is replaced only with ``--overwrite``."""
    from matplotlib.figure import Figure

    from grpo_edu.common import _checks

    kinds = Figure().canvas.get_supported_filetypes()
    extension = Path(path).suffix.lstrip(".").lower()
    if extension not in kinds:
        _fail("--plot", f"matplotlib cannot write a .{extension} file", f"end the name in one of "
              f"{', '.join('.' + k for k in sorted(kinds))}, e.g. evidence.png")
    if Path(path).is_symlink():
        _fail("--plot", f"{path} is a link, and writing the plot would replace the file it points to",
              "name a new file")
    problem = _checks.output_file_problem(path, overwrite=overwrite)
    if problem:
        _fail("--plot", *problem)


def add_replay(sub):
    rp = sub.add_parser("replay", help="show what a replay buffer file holds (.jsonl, .sqlite or .db)",
                        description="Print a replay buffer file's size, rounds, advantage and reward summary "
                                    "and a few samples. The file is only read, never changed.")
    rp.add_argument("path", metavar="PATH", help="The buffer file (.jsonl, .sqlite or .db).")
    rp.add_argument("--show", type=int, default=5, metavar="INT",
                    help="Print this many samples, the strongest first. (default: 5)")
    rp.set_defaults(func=cmd_replay)


def add_diagnose(sub):
    dg = sub.add_parser("diagnose", help="find what went wrong in a run from its metrics, and what to change",
                        description="Read a run's per-step metrics and print each problem found (rewards that "
                                    "never vary, collapse, KL runaway, entropy collapse, truncation, ...), with the "
                                    "numbers that show it, likely causes, config fixes and the lesson that "
                                    "explains it. The file is only read.")
    dg.add_argument("path", metavar="FILE",
                    help="The run's metrics: the JSONL of grpo-edu train --metrics-out, a checkpoint's "
                         "trainer_state.json (its held-out evaluations and config are used too), or TRL's "
                         "trainer_state.json.")
    dg.add_argument("--evals", metavar="FILE",
                    help="Held-out evaluations, a JSON or JSONL list of {\"step\", \"accuracy\"} (or a "
                         "checkpoint's trainer_state.json), to check the reward against held-out accuracy.")
    dg.add_argument("--plot", metavar="OUT.png", help="Also draw the metrics behind the findings into this image "
                                                      "(a new file, or an existing one with --overwrite).")
    dg.add_argument("--overwrite", action="store_true", help="Let --plot replace an existing image.")
    dg.set_defaults(func=cmd_diagnose)
