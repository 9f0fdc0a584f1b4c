"""Rollouts: sampling G answers per prompt with their log-probs (the loop and the faster engine, whose decode steps
may run over a static cache in CUDA graphs), the teacher-forced passes over each answer, tools and multi-turn
rollouts."""
