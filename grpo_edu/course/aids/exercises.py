"""Self-check exercises, code-writing exercises and predict-then-run questions for the lessons.

Each exercise's expected answer is *computed by the library* when you check, never typed
in by hand, so the exercises stay true to the code. Three kinds:

* ``Exercise``: a number, a string or a list. ``check("01.1", 250)``.
* ``CodeExercise``: you write a function; ``check("02.4", my_function)`` runs it on seeded
  random inputs and compares every output with the library function it re-creates.
* ``Prediction``: you write a guess *before* running an experiment; ``reveal("02.P1", guess,
  measured)`` then prints the measured value beside your guess, and the prediction's explanation (``why``)
  after it. Without a guess it shows nothing, so the lesson cannot give the answer away; a prediction
  that has a ``why`` then shows the answer after a note, so "Run all" leaves nothing out.

In a notebook, an exercise cell ends with ``ok = check(...)``: the assignment keeps the returned
True/False from being echoed under the cell (a trailing ``;`` would not do it under nbval,
which runs cells without storing history, and IPython's ``;`` check reads the history):

>>> from grpo_edu.course.aids.exercises import check, reveal, show
>>> show("01.1")                     # prints the question
>>> ok = check("01.1", 250)          # prints ✅ or ❌ with a hint; ok is True/False
"""

import math

import numpy as np

from grpo_edu.course.aids.exercise_bank import EXERCISES, MYSTERY_RUNS, PREDICTIONS, CodeExercise


def show(exercise_id):
    """Print the question of an exercise or a prediction."""
    ex = PREDICTIONS[exercise_id] if exercise_id in PREDICTIONS else _get(exercise_id)
    print(f"{'Prediction' if exercise_id in PREDICTIONS else 'Exercise'} {exercise_id}: {ex.question}")


def check(exercise_id, answer):
    """Compare ``answer`` with the library's result; print ✅ or ❌ (with a hint). Returns a bool.

    ``answer=None`` (or ``...``) means "not answered yet" and prints the question. For a
    ``CodeExercise`` the answer is your function; a function that still returns None (the
    stub in the lesson) also counts as not answered yet.
    """
    ex = _get(exercise_id)
    if answer is None or answer is Ellipsis:
        print(f"Exercise {exercise_id}: not answered yet. {ex.question}")
        return False
    if isinstance(ex, CodeExercise):
        return _check_code(exercise_id, ex, answer)
    ok = _matches(answer, ex.solution(), ex.tolerance)
    if ok:
        print(f"✅ Exercise {exercise_id}: correct.")
    else:
        print(f"❌ Exercise {exercise_id}: not quite. Hint: {ex.hint}")
    return ok


def _check_code(exercise_id, ex, function):
    """Run ``function`` on ``ex.trials`` seeded inputs; compare with ``ex.reference``."""
    if not callable(function):
        print(f"❌ Exercise {exercise_id}: pass your function itself (its name, without parentheses), "
              f"not {type(function).__name__}.")
        return False
    rng = np.random.default_rng(0)
    for trial in range(ex.trials):
        args = ex.inputs(rng)
        expected = np.asarray(ex.reference(*args))
        try:
            got = function(*(np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args))
        except Exception as err:  # noqa: BLE001 -- the learner's code: report any error, do not crash
            print(f"❌ Exercise {exercise_id}: your function raised {type(err).__name__}: {err}")
            return False
        if got is None:
            if trial == 0:
                print(f"Exercise {exercise_id}: not answered yet (your function returns None). {ex.question}")
            else:
                print(f"❌ Exercise {exercise_id}: your function returned None on input {trial + 1}.")
            return False
        if not _same_array(got, expected, ex.tolerance):
            shown = ", ".join(_short(a) for a in args)
            print(f"❌ Exercise {exercise_id}: not quite. For the input ({shown}) the library gives "
                  f"{_short(expected)} and your function gives {_short(got)}. Hint: {ex.hint}")
            return False
    print(f"✅ Exercise {exercise_id}: your function matches the library on {ex.trials} random inputs.")
    return True


def _same_array(got, expected, tol):
    try:
        got = np.asarray(got, dtype=expected.dtype if expected.dtype == bool else np.float64)
    except (TypeError, ValueError):
        return False
    if got.shape != expected.shape:
        return False
    if expected.dtype == bool:
        return bool((got == expected).all())
    return bool(np.allclose(got, expected, rtol=0, atol=tol, equal_nan=False))


def _short(x):
    """An argument or result, printed compactly (4 significant digits)."""
    if isinstance(x, (np.ndarray, list, tuple)):
        return np.array2string(np.asarray(x), precision=4, separator=", ", suppress_small=True).replace("\n", "")
    return f"{x:.4g}" if isinstance(x, float) else repr(x)


def reveal(prediction_id, guess, measured, *, show=None):
    """Print the measured value beside the learner's ``guess`` (predict-then-run). Returns None.

    With ``guess=None`` nothing is revealed: it prints the question and asks for a guess
    first. ``show``: a table or figure to display too, once a guess is given. A numeric guess
    counts as right within the prediction's ``tolerance``; a choice must match exactly
    (case and surrounding spaces ignored).
    """
    if prediction_id not in PREDICTIONS:
        known = ", ".join(sorted(PREDICTIONS))
        raise ValueError(f"prediction_id: unknown prediction {prediction_id!r}. Fix: use one of {known}.")
    pred = PREDICTIONS[prediction_id]
    if guess is None or guess is Ellipsis:
        print(f"Prediction {prediction_id}: no guess yet. {pred.question}\n"
              "Write your guess in `guess` in the cell above, run that cell, then run this one again.")
        if pred.why:                                  # "Run all": the answer, after a note, so nothing is lost
            shown = f"{float(measured):.4g}" if not pred.choices else repr(measured)
            print(f"(This cell ran without a guess, as \"Run all\" does; the answer follows. On a first pass, "
                  f"guess before you read it.)\nThe experiment gives {shown}.\nWhy: {pred.why}")
            _display(show)
        return
    if pred.choices:
        answer = str(guess).strip().lower()
        if answer not in pred.choices:
            options = ", ".join(repr(c) for c in pred.choices)
            print(f"Prediction {prediction_id}: {guess!r} is not one of the choices; write one of {options}.")
            return
        ok = answer == str(measured).strip().lower()
        print(f"Prediction {prediction_id}: you said {answer!r}; the experiment says {measured!r}. "
              + ("✅ Right." if ok else "❌ Not this time: read on to see why."))
    else:
        try:
            value = float(guess)
        except (TypeError, ValueError):
            print(f"Prediction {prediction_id}: write a number for your guess, not {guess!r}.")
            return
        off = abs(value - float(measured))
        verdict = ("✅ Right." if off < 1e-9 else "✅ Close enough." if off <= pred.tolerance
                   else "❌ Off: read on to see why.")
        print(f"Prediction {prediction_id}: you guessed {value:.4g}; "
              f"the experiment gives {float(measured):.4g}. {verdict}")
    if pred.why:
        print(f"Why: {pred.why}")
    _display(show)


def _display(show):
    if show is not None:
        from IPython.display import display

        display(show)


def mystery_settings(exercise_id):
    """The settings of an unknown run a learner diagnoses (``run(**mystery_settings("05.7"))``): a new dict."""
    if exercise_id not in MYSTERY_RUNS:
        known = ", ".join(sorted(MYSTERY_RUNS))
        raise ValueError(f"exercise_id: {exercise_id!r} has no unknown run. Fix: use one of {known}.")
    return dict(MYSTERY_RUNS[exercise_id])


def _get(exercise_id):
    if exercise_id not in EXERCISES:
        known = ", ".join(sorted(EXERCISES))
        raise ValueError(f"exercise_id: unknown exercise {exercise_id!r}. Fix: use one of {known}.")
    return EXERCISES[exercise_id]


def _matches(answer, expected, tol):
    if isinstance(expected, (list, tuple)):
        try:
            answer = list(answer)
        except TypeError:
            return False
        return len(answer) == len(expected) and all(_matches(a, e, tol) for a, e in zip(answer, expected))
    if isinstance(expected, str):
        return str(answer).strip() == expected
    try:
        return math.isclose(float(answer), float(expected), rel_tol=0, abs_tol=tol)
    except (TypeError, ValueError):
        return False
