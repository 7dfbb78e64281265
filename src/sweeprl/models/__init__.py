"""Model construction: the embedded tiny model, hub/local models, LoRA adapters."""
