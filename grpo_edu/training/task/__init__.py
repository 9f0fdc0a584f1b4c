"""The task: what a model is asked (addition, sums, the calculator task, word problems
in English and Chinese), how an answer is scored (rewards), and
held-out accuracy."""
