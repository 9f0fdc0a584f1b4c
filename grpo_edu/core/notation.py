"""One notation table for the whole course: paper symbol → grpo_edu name → TRL / verl name.

Lessons print it, the README shows it, and every module uses these names.
Shape alphabet: B prompts per step, G completions per prompt, N = B·G sequences,
T completion tokens, V vocabulary size.
"""

NOTATION = [
    # (symbol, grpo_edu name, meaning, 中文, TRL name, verl name)
    ("B", "batch_size", "prompts per step", "批大小",
     "per_device_train_batch_size × devices × gradient_accumulation_steps / num_generations",
     "data.train_batch_size"),
    ("G", "num_generations", "completions per prompt (group size)", "组大小", "num_generations",
     "actor_rollout_ref.rollout.n"),
    ("N = B·G", "completions_per_step", "sequences per step", "每步样本数", "generation batch", "train_batch_size × n"),
    ("q", "prompt", "the question", "提示/问题", "prompt", "prompt"),
    ("o_i", "completion", "the i-th sampled answer", "回答/轨迹", "completion", "response"),
    ("R_i", "rewards", "reward of o_i", "奖励", "rewards", "token_level_scores"),
    ("μ, σ", "group_stats", "mean and unbiased std of a group's rewards", "组均值/标准差", "mean_grouped_rewards", "id2mean / id2std"),
    ("Â_i", "advantages", "(R_i − μ)/(σ + eps)", "优势值", "advantages", "advantages"),
    ("π_θ", "logprobs", "current policy", "策略模型", "per_token_logps", "log_prob"),
    ("π_θold", "old_logprobs", "policy that sampled the batch", "旧策略", "old_per_token_logps", "old_log_prob"),
    ("π_ref", "ref_logprobs", "frozen starting model", "参考模型", "ref_per_token_logps", "ref_log_prob"),
    ("r", "ratio", "π_θ / π_θold per token", "概率比", "coef_1", "ratio"),
    ("ε", "epsilon", "clip range (low side)", "裁剪范围", "epsilon", "clip_ratio_low"),
    ("ε_high", "epsilon_high", "clip range (high side)", "上裁剪范围", "epsilon_high", "clip_ratio_high"),
    ("β", "beta", "KL coefficient", "KL 系数", "beta", "kl_loss_coef"),
    ("—", "num_iterations", "updates per generated batch (DeepSeekMath writes μ; here μ is the group mean)", "内层迭代次数", "num_iterations", "ppo_epochs"),
    ("T", "max_completion_length", "longest completion", "最大生成长度", "max_completion_length", "response_length"),
]

COLUMNS = ("symbol", "grpo_edu", "meaning", "中文", "TRL", "verl")


def notation_table():
    """The table as a list of dicts (for pandas-free display in a notebook)."""
    return [dict(zip(COLUMNS, row)) for row in NOTATION]
