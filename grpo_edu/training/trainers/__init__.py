"""The trainers: GRPOConfig, GRPOTrainer (the algorithm box), its checkpointed state, GRPO's family as trainers,
and the replay buffer the trainer mixes in."""
