"""The GRPO math a learner must read, top to bottom: the schedule (``schedule``), the policy
gradient (``policy_gradient``), group advantages (``advantages``) and their process-supervised form (``process_advantages``), the KL estimators (``kl``,
``kl_gradients``) and the clipped loss (``losses``), with the paper's symbols (``notation``).
Then GRPO's family, to compare it with: PPO's critic (``gae``), rejection-sampling fine-tuning
(``rejection_sampling``) and DPO (``dpo``). Then learned rewards: a reward model's
Bradley–Terry loss (``preference``) and the over-optimisation curves (``overoptimisation``). Pure functions, tensors or arrays in, ``(result, info)`` out; imports only ``common``."""
