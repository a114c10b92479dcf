"""Policy models: the built-in ``tiny``/``small``, loading real ones, DeepSpeed engines, LoRA, the critic."""
