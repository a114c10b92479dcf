"""ragen.testing: the contract checks a plugin's own tests call, installed with ragen.

* envs: ``check_env`` (what ``ragen check-env`` runs) and ``env_contract_tests(variants)``, the two parametrised tests
  (ragen's checks, Gymnasium's checker) a test module binds to ``test_*`` names;
* parsers, reward shapers, advantage estimators, rollout filters: ``check_component(kind, name, **options)`` (or
  ``check_parser``, ``check_shaper``, ``check_estimator``, ``check_filter``) and ``component_contract_tests(kind,
  names)``, run on synthetic rollouts (``ragen.testing.batches``);
* a training smoke test: ``run_two_steps(env, tmp_path)``, two small GRPO steps of the tiny model through the CLI;
* ``assert_checks_pass(checks)``: one readable assertion for a list of failed ``Check`` objects.

It is also a pytest plugin (entry point ``pytest11: ragen``), loaded by every pytest run where ragen is installed; it
adds the fixtures ``fresh_plugins`` and ``train_two_steps`` (see ``ragen.testing.fixtures``). Importing this package
does not import pytest or torch: they load when a helper that needs them runs.
"""

from ragen.envs.checker import Check, check_env
from ragen.testing.checks import (
    KINDS,
    assert_checks_pass,
    check_component,
    check_estimator,
    check_filter,
    check_parser,
    check_shaper,
)
from ragen.testing.contracts import NO_SPEC_WARNING, component_contract_tests, env_contract_tests
from ragen.testing.runs import TINY, ragen_cmd, run_two_steps

__all__ = [
    "KINDS",
    "NO_SPEC_WARNING",
    "TINY",
    "Check",
    "assert_checks_pass",
    "check_component",
    "check_env",
    "check_estimator",
    "check_filter",
    "check_parser",
    "check_shaper",
    "component_contract_tests",
    "env_contract_tests",
    "ragen_cmd",
    "run_two_steps",
]


def pytest_configure(config):
    """pytest hook: register the fixtures of ``ragen.testing.fixtures`` (this package itself never imports pytest)."""
    from ragen.testing import fixtures

    if not config.pluginmanager.is_registered(fixtures):
        config.pluginmanager.register(fixtures, "ragen.testing.fixtures")
