"""The task: what a model is asked (addition, sums, the calculator task), how an answer is scored (rewards), and
held-out accuracy."""
