"""The lessons' experiments: forgetting (lesson 06), the replay article's advice (``replay_advice``, lesson 06),
the clinic's sick runs (``clinic``, lessons 09 and 09b), the race of GRPO's variants (``variants``, lesson 12) and
over-optimising a learned reward (``overoptimisation``, lesson 17)."""
