import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


@pytest.fixture
def fresh_plugins():
    """Rediscover plugins before and after the test, so throwaway registrations never leak."""
    from ragen import plugins

    plugins.reset()
    yield plugins
    plugins.reset()


def ragen_cmd(*args: str) -> list[str]:
    """The ragen CLI of this interpreter's environment."""
    return [sys.executable, "-m", "ragen", *args]
