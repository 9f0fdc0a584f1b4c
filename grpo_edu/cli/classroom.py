"""``grpo-edu lessons`` and ``check-answers``: the lessons copied into a student's folder, a class's answers read."""

import os
import shlex

# --- lessons ------------------------------------------------------------------------------------
def cmd_lessons(args):
    from grpo_edu.common.safe_files import shown
    from grpo_edu.course.classroom.copy_lessons import copy_lessons

    written, info = copy_lessons(args.folder, force=args.force)
    for path, backup in info["kept"].items():
        print(f"kept your version of {shown(path.name)} as {shown(backup.name)}")
    print(f"{len(written)} lesson(s) written to {shown(args.folder)}, {len(info['unchanged'])} already up to date. "
          f"Open them with: jupyter lab {shlex.quote(shown(args.folder))}")
    return 0


# --- check-answers ---------------------------------------------------------------------------
def cmd_check_answers(args):
    from grpo_edu.common.safe_files import shown
    from grpo_edu.course.classroom.answers import format_table, read_class, write_csv

    missing = [p for p in args.notebooks if not os.path.exists(p)]
    if missing:
        named = ", ".join(shown(p) + (" (a link to nothing)" if os.path.lexists(p) else "") for p in missing)
        raise ValueError(f"notebooks: {named} not found. Fix: pass the students' .ipynb files or "
                         "the folder that holds them")
    rows, _ = read_class(args.notebooks, report=args.csv, force=args.force)   # --csv refused before any reading
    if not rows:
        raise ValueError(f"notebooks: no .ipynb file in {', '.join(shown(p) for p in args.notebooks)} (folders are "
                         "searched three levels deep). Fix: pass the students' saved .ipynb files or the folder that "
                         "holds them")
    print(format_table(rows))
    if args.csv:
        write_csv(rows, args.csv, force=args.force)
        print(f"wrote {shown(args.csv)}")
    return 0



def add_lessons(sub):
    le = sub.add_parser("lessons", help="copy the lessons into a folder of your own, to work in",
                        description="Copy the course's lesson notebooks into FOLDER (created if missing). A copy you "
                                    "have changed is never overwritten unless you pass --force, and then your version "
                                    "is kept beside it under a name no other file has. Each lesson is written whole "
                                    "or not at all; a second run on the same folder waits for the first; a lesson "
                                    "that is a link, a folder or a FIFO is refused by name.")
    le.add_argument("folder", metavar="FOLDER")
    le.add_argument("--force", action="store_true", help="update changed copies too (keeping yours as a backup)")
    le.set_defaults(func=cmd_lessons)


def add_check_answers(sub):
    ca = sub.add_parser("check-answers", help="a class's exercises at a glance, read from the students' saved "
                                              "notebooks (never run)",
                        description="Read students' executed lesson notebooks (files or folders, searched three "
                                    "levels of subfolders deep) and print, per lesson, student × exercise: passed, "
                                    "failed, unanswered, not run; and each exercise's success rate. Nothing in the "
                                    "notebooks is executed; a file that cannot be read is named, not counted.")
    ca.add_argument("notebooks", nargs="+", metavar="NOTEBOOK", help="a student's .ipynb, or a folder of them")
    ca.add_argument("--csv", metavar="FILE", help="also write one line per student and exercise (never one of the "
                                                  "notebooks, never through a link)")
    ca.add_argument("--force", action="store_true", help="replace the --csv file if it exists")
    ca.set_defaults(func=cmd_check_answers)
