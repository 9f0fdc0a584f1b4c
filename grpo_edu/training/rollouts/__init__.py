"""Rollouts: sampling G answers per prompt with their log-probs (the loop and the faster engine), the teacher-forced
passes over each answer, tools and multi-turn rollouts."""
