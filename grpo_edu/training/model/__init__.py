"""The model: loading one (bundled, a folder, a run, a hub name), the bundled models' tokenizers (one
character a token; a byte-level BPE with a chat template) and recipe, LoRA
adapters, and PPO's critic."""
