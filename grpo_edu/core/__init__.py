"""The GRPO math a learner must read, top to bottom: the schedule (``schedule``), the policy
gradient (``policy_gradient``), group advantages (``advantages``), the KL estimators (``kl``,
``kl_gradients``) and the clipped loss (``losses``), with the paper's symbols (``notation``).
Pure functions, tensors or arrays in, ``(result, info)`` out; imports only ``common``."""
