"""What every ``grpo-edu`` command does with its command line before any work: parse it, and refuse an empty value.

An empty string reads as "not given" in many places (``--output-dir ""`` would quietly mean the default
folder, ``--json ""`` no file at all), so a command that got one would run and do something other than
what was typed. :func:`parse_args` refuses it up front, naming the option, the way argparse refuses a
missing value.
"""


def parse_args(parser, argv=None):
    """``parser.parse_args(argv)``, then refuse any option or positional argument whose value is empty (or
    only spaces), in the chosen subcommand's arguments too. A value equal to the argument's default is left
    alone: it may be the default itself. Exits with argparse's usage error (status 2), as a bad flag does.

    A flag the command does not know is named by the parser of the subcommand it was typed after
    (``grpo-edu train --bogus`` shows ``usage: grpo-edu train …``), not by the top-level one, whose usage
    line lists only the subcommands."""
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        _innermost(parser, args).error(f"unrecognized arguments: {' '.join(unknown)}")
    _refuse_empty(parser, args)
    return args


def _innermost(parser, args):
    """The parser of the subcommand chosen in ``args`` (followed down), or ``parser`` itself."""
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = getattr(args, action.dest, None)
            if chosen in action.choices:
                return _innermost(action.choices[chosen], args)
    return parser


def _refuse_empty(parser, args):
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = getattr(args, action.dest, None)
            if chosen in action.choices:
                _refuse_empty(action.choices[chosen], args)
            continue
        value = getattr(args, action.dest, None)
        if value == action.default:
            continue
        values = value if isinstance(value, (list, tuple)) else [value]
        if any(isinstance(v, str) and not v.strip() for v in values):
            name = "/".join(action.option_strings) or action.metavar or action.dest
            optional = action.option_strings or action.nargs in ("?", "*")
            parser.error(f"argument {name}: is empty. Fix: give it a value"
                         + (", or leave it out for its default" if optional else ""))


def check_output(parser, flag, path, *, overwrite=False, names=None):
    """Before any work: refuse (argparse's usage error, status 2) an output ``path`` the command could not write
    at the end, or one that would replace stored results without ``--overwrite``. ``path`` is a file in an
    existing folder, or, with ``names``, a folder (made if missing) the command writes those files into."""
    from grpo_edu.common import _checks

    if names is None:
        problem = _checks.output_file_problem(path, overwrite=overwrite)
    else:
        problem = _checks.output_folder_problem(path, names, overwrite=overwrite)
    if problem:
        parser.error(f"{flag}: {problem[0]}. Fix: {problem[1]}")
