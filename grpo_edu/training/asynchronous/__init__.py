"""Sampling and training apart (lesson 18): asynchronous GRPO.

At scale a sampler (vLLM) and a trainer run at once on separate GPUs, so the answers the trainer learns from
were drawn by an older copy of its weights. This room does the same on a laptop:

``versions``   the trainer publishes its weights under a version number (in memory, or safetensors files in the
               run folder), and every batch carries the version that drew it and the sampler's log-probs
``lagged``     ``AsyncGRPOTrainer``: the GRPO trainer with a sampler that lags k updates behind, in one process
               (deterministic: the lessons' and the tests' mode), staleness dropped or kept, and the
               off-policy correction of ``grpo_edu.core.off_policy``
``processes``  the same run with the sampler in a second process (one core each), equal to the one-process run
               at the same lag; a sampler or trainer that dies ends the run with a message and a checkpoint

Imports ``core``, ``common`` and the other rooms of ``training``.
"""
