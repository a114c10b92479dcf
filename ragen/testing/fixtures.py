"""The pytest fixtures of ``ragen.testing`` (registered by its ``pytest_configure`` hook; this module imports
pytest)."""

from __future__ import annotations

import pytest


@pytest.fixture
def fresh_plugins():
    """Rediscover plugins before and after the test, so throwaway registrations never leak; yields the loader
    module (``fresh_plugins.get_registry(kind)``)."""
    from ragen.plugins import loader

    loader.reset()
    yield loader
    loader.reset()


@pytest.fixture
def train_two_steps(tmp_path):
    """``run_two_steps`` writing into this test's ``tmp_path``: ``run, rows = train_two_steps("corridor")``, extra
    overrides as further arguments."""
    from ragen.testing.runs import run_two_steps

    def train(env: str, *extra: str, response_length: int | None = 48):
        return run_two_steps(env, tmp_path, *extra, response_length=response_length)

    return train
