"""Trainer construction (TRL GRPO) and the callbacks that record every logged step."""
