"""Claims about training runs, checked in code with a margin that was measured.

A training run's digits depend on the machine: another CPU picks other floating-point
kernels, a sampled token flips, and from then on the run goes its own way. A lesson
therefore never asks you to trust the digits of the run it shows. It states a *claim* the
run supports ("held-out accuracy rose by at least 30 points") and checks it right under
the run, on your machine:

>>> check_claim("held-out accuracy rose by at least 30 points", after - before, at_least=0.30)
✓ claim holds: held-out accuracy rose by at least 30 points

A claim that fails raises :class:`ClaimFailed` with the measured value, so the notebook
stops right there instead of telling you something your run did not do. (While margins are
being measured, with ``$GRPO_EDU_CLAIMS_LOG`` set, a failed claim is recorded and printed
instead, so that the claims after it are measured too.)

Where the thresholds come from: each lesson that trains was run for several seeds and
under two sets of CPU kernels (the machine's own and ``ATEN_CPU_CAPABILITY=default``, the
portable ones); a threshold sits below the worst value seen, with room to spare.
``python -m grpo_edu.course.aids.claims lessons/05_toy_grpo.ipynb`` repeats that measurement and prints,
for every claim, its threshold and the range of values measured.
"""

import json
import os

from grpo_edu.common import _checks

LOG_ENV = "GRPO_EDU_CLAIMS_LOG"
"""When this environment variable names a file, every checked claim appends its value there."""


class ClaimFailed(AssertionError):
    """A lesson's claim did not hold for this run."""


def check_claim(statement, value, *, at_least=None, at_most=None):
    """Check that ``value`` (a number, or a bool) supports ``statement``; print ✓ or raise.

    Returns None, so a claim on a notebook cell's last line echoes nothing below its ✓ line.

    ``at_least`` / ``at_most``: the bound(s) the number must respect. A bool value needs no
    bound: True holds. The printed line names the claim and its bound, never the measured
    value, so it reads the same on every machine; the measured value is in the table or
    plot above the check, and in the error when the claim fails.
    """
    if not isinstance(statement, str) or not statement.strip():
        _checks.fail("statement", "must be a sentence saying what the run shows", 'pass e.g. "accuracy rose"')
    if isinstance(value, bool):
        if at_least is not None or at_most is not None:
            _checks.fail("at_least/at_most", "make no sense for a True/False claim", "leave them out")
        holds, bound = value, ""
    else:
        if hasattr(value, "item"):                       # a 0-d tensor or numpy number
            value = value.item()
        if not _checks.is_finite_number(value):
            _checks.fail("value", f"must be a finite number or a bool, got {value!r}",
                         "pass the measured quantity the claim is about")
        if at_least is None and at_most is None:
            _checks.fail("at_least/at_most", "neither is given, so the claim cannot fail",
                         "give the bound the measured value must respect")
        holds = (at_least is None or value >= at_least) and (at_most is None or value <= at_most)
        parts = [f"≥ {at_least:g}" if at_least is not None else "", f"≤ {at_most:g}" if at_most is not None else ""]
        bound = " (needs " + " and ".join(p for p in parts if p) + ")"
    if _log(statement, value, at_least, at_most, holds):
        # measuring margins (python -m grpo_edu.course.aids.claims): record and go on, so that one failed
        # claim does not hide the values of the claims after it
        print(f"{'✓' if holds else '✗'} claim {'holds' if holds else 'FAILS'}: {statement}{bound}")
        return None
    if not holds:
        shown = value if isinstance(value, bool) else f"{value:.6g}"
        raise ClaimFailed(f"claim does not hold for this run: {statement}{bound}; measured {shown}. "
                          "The lesson's text is then wrong for your machine: please report it, with this line.")
    print(f"✓ claim holds: {statement}{bound}")
    return None


def _log(statement, value, at_least, at_most, holds):
    """Append the claim to the file named by $GRPO_EDU_CLAIMS_LOG, if set; True when it did."""
    path = os.environ.get(LOG_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"statement": statement, "value": value, "at_least": at_least,
                                "at_most": at_most, "holds": holds}, ensure_ascii=False) + "\n")
    return bool(path)


# --- measuring the margins: run a lesson for several seeds and both kernel sets -------------

def _run_notebook(path, seed, capability, log, timeout):
    """Execute notebook ``path`` with ``SEED = seed`` under ``capability``; claims go to ``log``."""
    import subprocess
    import sys

    env = dict(os.environ, **{LOG_ENV: log})
    env.pop("ATEN_CPU_CAPABILITY", None)
    if capability != "native":
        env["ATEN_CPU_CAPABILITY"] = capability
    code = ("import sys, nbformat\n"
            "from nbclient import NotebookClient\n"
            "nb = nbformat.read(sys.argv[1], as_version=4)\n"
            "i = next(i for i, c in enumerate(nb.cells) if 'parameters' in c.metadata.get('tags', []))\n"
            "nb.cells.insert(i + 1, nbformat.v4.new_code_cell(f'SEED = {int(sys.argv[2])}'))\n"
            "NotebookClient(nb, timeout=int(sys.argv[3]), allow_errors=True,\n"
            "               resources={'metadata': {'path': sys.argv[4]}}).execute()\n")
    folder = os.path.dirname(os.path.abspath(path))
    subprocess.run([sys.executable, "-c", code, path, str(seed), str(timeout), folder], env=env, check=True)


def measure(notebooks, *, seeds=(0, 1, 2), capabilities=("native", "default"), timeout=900):
    """Run each notebook for every seed × capability; return {statement: record} with the values seen.

    A notebook takes part through a code cell tagged ``parameters`` that sets ``SEED``;
    the run for seed k inserts ``SEED = k`` after it (the papermill convention).
    """
    import tempfile

    table = {}
    for path in notebooks:
        for capability in capabilities:
            for seed in seeds:
                with tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False) as tmp:
                    log = tmp.name
                try:
                    _run_notebook(path, seed, capability, log, timeout)
                    with open(log, encoding="utf-8") as f:
                        entries = [json.loads(line) for line in f if line.strip()]
                finally:
                    os.unlink(log)
                for e in entries:
                    rec = table.setdefault(e["statement"], {"notebook": os.path.basename(path), "values": [],
                                                            "at_least": e["at_least"], "at_most": e["at_most"],
                                                            "failed": 0})
                    rec["values"].append((seed, capability, e["value"]))
                    rec["failed"] += not e["holds"]
                print(f"{os.path.basename(path)} seed {seed} {capability}: {len(entries)} claims, "
                      f"{sum(not e['holds'] for e in entries)} failed", flush=True)
    return table


def main(argv=None):
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m grpo_edu.course.aids.claims",
        description="Run lessons for several seeds and both CPU kernel sets; print each claim's measured range.")
    parser.add_argument("notebooks", nargs="+", help="lesson notebooks (each needs a 'parameters' cell setting SEED)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="default: 0 1 2")
    parser.add_argument("--capabilities", nargs="+", default=["native", "default"],
                        help="'native' (the machine's kernels) and/or ATEN_CPU_CAPABILITY values; default: native default")
    parser.add_argument("--json", metavar="FILE", help="also write the table as JSON")
    args = parser.parse_args(argv)
    table = measure(args.notebooks, seeds=args.seeds, capabilities=args.capabilities)
    print(f"\n{'claim':70} {'bound':>12} {'min':>9} {'max':>9} {'failed':>6}")
    for statement, rec in table.items():
        numbers = [float(v) for _, _, v in rec["values"]]
        bound = (f"≥ {rec['at_least']:g}" if rec["at_least"] is not None else "") + \
                (f" ≤ {rec['at_most']:g}" if rec["at_most"] is not None else "")
        print(f"{statement[:70]:70} {bound or 'True':>12} {min(numbers):9.4g} {max(numbers):9.4g} {rec['failed']:6d}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(table, f, indent=1, ensure_ascii=False)
    return 1 if any(rec["failed"] for rec in table.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
