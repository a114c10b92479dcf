"""Contract tests a plugin's test module binds to ``test_*`` names, parametrised over its variants or components:
``env_contract_tests`` (``check_env`` and Gymnasium's checker) and ``component_contract_tests``. pytest is imported
when they are called, from a test module."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ragen.testing.checks import assert_checks_pass, check_component

#: gymnasium warns that a text env declares no render modes besides "ansi": expected for every ragen env
NO_SPEC_WARNING = "ignore:.*alternative render modes:UserWarning"


def env_contract_tests(variants: Sequence[str]) -> tuple[Callable, Callable]:
    """A plugin's env contract as two tests parametrised over its ``variants``: ragen's ``check_env`` (what ``ragen
    check-env`` runs) and Gymnasium's ``env_checker``. Bind them at module level so pytest collects them::

        test_ragen_check_env, test_gymnasium_check_env = env_contract_tests(["corridor", "corridor-long"])
    """
    import pytest
    from gymnasium.utils import env_checker as gym_checker

    from ragen.envs.checker import check_env
    from ragen.plugins.components import make_env

    @pytest.mark.filterwarnings(NO_SPEC_WARNING)
    @pytest.mark.parametrize("name", list(variants))
    def test_ragen_check_env(name):
        assert_checks_pass(check_env(name), f"check_env({name!r})")

    @pytest.mark.filterwarnings(NO_SPEC_WARNING)
    @pytest.mark.parametrize("name", list(variants))
    def test_gymnasium_check_env(name):
        env = make_env(name)
        try:
            gym_checker.check_env(env, skip_close_check=False)
        finally:
            env.close()

    return test_ragen_check_env, test_gymnasium_check_env


def component_contract_tests(kind: str, names: Sequence[str]) -> Callable:
    """The contract checks of ``kind`` components (``parser``, ``shaper``, ``estimator``, ``filter``) as one test
    parametrised over ``names``; an entry may be ``(name, options)`` to check a component with options::

        test_filter_contract = component_contract_tests(
            "filter", ["corridor-spread", ("corridor-spread", {"min_spread": 1})]
        )
    """
    import pytest

    cases = [(n, {}) if isinstance(n, str) else (n[0], dict(n[1])) for n in names]
    ids = [name if not options else f"{name}-{'-'.join(f'{k}={v}' for k, v in sorted(options.items()))}"
           for name, options in cases]

    @pytest.mark.parametrize("name, options", cases, ids=ids)
    def test_component_contract(name, options):
        assert_checks_pass(check_component(kind, name, **options), f"{kind} {name!r}")

    test_component_contract.__name__ = f"test_{kind}_contract"
    return test_component_contract
