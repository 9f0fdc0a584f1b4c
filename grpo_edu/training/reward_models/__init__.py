"""Learned rewards (lesson 17): a reward model trained on preference pairs, and used as GRPO's reward.

``reward_model``     a scalar-head model on a bundled backbone (loads as ``AutoModelForSequenceClassification``, one label)
``gold``             the gold judge: a program with several facets (answer, working, length) the proxy never sees
``preference_data``  pairs sampled from a model and labelled by the gold judge, checked
``reward_trainer``   training the reward model with the Bradley–Terry loss (``core.preference``), TRL's names
``reward_function``  a reward model (or an ensemble: mean or min) as a reward function GRPOTrainer accepts
"""
