"""Lesson aids: what the lessons show and check. Figures (``viz``: the math; ``viz_runs``: training runs), panels
(``widgets``), exercises and predictions (``exercises``, ``exercise_bank``, ``exercise_solutions``, ``prediction_bank``)
and a lesson's claims about a run checked with measured margins (``claims``)."""
