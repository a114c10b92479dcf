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

# RAGEN_TEST_SLOW_STEP=N: step N first waits (up to 60 s, in short sleeps a signal interrupts), so a test's Ctrl-Cs
# land inside that step however fast the machine is. With RAGEN_TEST_SLOW_STEP_UNTIL_CTRL_C=1 the wait ends at the
# first Ctrl-C, for a test that needs only that one inside the step (the step then runs and the stop saves it);
# without it the wait goes on, so a second Ctrl-C sent moments later still lands inside the step
_SLOW = os.environ.get("RAGEN_TEST_SLOW_STEP")
if _SLOW:
    import time as _time

    import ragen.train.interrupt as _step_interrupt
    import ragen.train.trainer as _slow_trainer

    _plain_step = _slow_trainer.Trainer.step
    _UNTIL_CTRL_C = os.environ.get("RAGEN_TEST_SLOW_STEP_UNTIL_CTRL_C") == "1"

    def _slow_step(self):
        if self.step_idx + 1 == int(_SLOW):
            for _ in range(600):
                if _UNTIL_CTRL_C and _step_interrupt.requested():
                    break
                _time.sleep(0.1)
        return _plain_step(self)

    _slow_trainer.Trainer.step = _slow_step

# RAGEN_TEST_SLOW_EXIT=1: once a stopped run has saved its work, say so on stderr and linger 5 s before exiting, so a
# test can send a Ctrl-C in that window
if os.environ.get("RAGEN_TEST_SLOW_EXIT"):
    import sys as _sys
    import time as _time2

    import ragen.train.interrupt as _interrupt

    _plain_saved = _interrupt.saved

    def _lingering_saved():
        _plain_saved()
        _sys.stderr.write("test: stop saved\n")
        _sys.stderr.flush()
        for _ in range(50):
            _time2.sleep(0.1)

    _interrupt.saved = _lingering_saved

# RAGEN_TEST_SLOW_PAIRED=LABEL: the greedy paired pass LABEL ('before' or 'after' RL) first says so on stderr and waits
# (up to 60 s, in short sleeps a signal interrupts, until a Ctrl-C arrives), so a test's Ctrl-C lands inside that pass
# however fast the machine
_PAIRED = os.environ.get("RAGEN_TEST_SLOW_PAIRED")
if _PAIRED:
    import sys as _sys2
    import time as _time3

    import ragen.train.interrupt as _paired_interrupt
    import ragen.train.trainer as _paired_trainer

    _plain_paired = _paired_trainer.Trainer.paired_validate

    def _slow_paired(self, label):
        if label == _PAIRED:
            _sys2.stderr.write(f"test: greedy pass {label} started\n")
            _sys2.stderr.flush()
            for _ in range(600):
                if _paired_interrupt.requested():
                    break
                _time3.sleep(0.1)
        return _plain_paired(self, label)

    _paired_trainer.Trainer.paired_validate = _slow_paired
