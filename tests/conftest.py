"""The core's own test settings. What a plugin's tests need (contract checks, the two-step training run, the
``fresh_plugins`` fixture) is in ``ragen.testing``, which ragen installs as a pytest plugin."""

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# tests never read or fill the user's warm-start cache (~/.cache/ragen); a test that wants one sets its own
os.environ.setdefault("RAGEN_CACHE_DIR", os.path.join(__import__("tempfile").mkdtemp(prefix="ragen-test-cache-")))

# the "still importing plugin ... after 5 s" notice is for users; on a loaded CI machine it would land in the stderr
# that tests compare line by line (tests/plugins/test_loader.py sets its own threshold to test the notice)
os.environ.setdefault("RAGEN_SLOW_IMPORT_S", "300")

from ragen.testing import TINY, ragen_cmd, run_two_steps  # noqa: E402, F401  (the core's tests import them from here)

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
