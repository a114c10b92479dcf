"""The expert warm start: demonstrations through the real rollout loop, the fine-tune, and its cache."""
