"""Whole runs and what reads them: the run loop (``train()``), ``ragen eval``, ``ragen sft``, the summary, plots and
the HTML report."""
