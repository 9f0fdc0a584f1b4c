"""The model: loading one (bundled, a folder, a run, a hub name), the bundled models' tokenizer and recipe, LoRA
adapters, and PPO's critic."""
