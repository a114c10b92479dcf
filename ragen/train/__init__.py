"""One StarPO step and its parts: the step (``trainer``), batches, losses, log-probs, the update, checkpoints,
diagnostics and the run folder's files."""
