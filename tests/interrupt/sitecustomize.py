"""Test-only fault injection, for resuming a multi-process run: put this folder on PYTHONPATH and set
RAGEN_TEST_INTERRUPT_AT=N, and every rank stops with KeyboardInterrupt when it is about to train step N, as a
killed job would (its last checkpoint is the one before). Python imports ``sitecustomize`` in every process it
starts, so the torchrun-launched ranks get the patch without any hook in ragen itself."""

import os

_AT = os.environ.get("RAGEN_TEST_INTERRUPT_AT")
if _AT:
    import ragen.train.trainer as _trainer

    _real_step = _trainer.Trainer.step

    def _interrupted_step(self):
        if self.step_idx + 1 == int(_AT):
            raise KeyboardInterrupt(f"test interruption before step {_AT}")
        return _real_step(self)

    _trainer.Trainer.step = _interrupted_step
