"""The hook specifications of ragen (pluggy project ``ragen``).

Every hook is a registration hook: it receives a ``register`` callback and calls it once per component it
provides. Hooks are called once, lazily, the first time a registry of their kind is asked for (never at
``import ragen``). A plugin never changes a run just by being installed: a run uses exactly the components
its config names.

``register(name, factory, *, config=None, description=None, defaults=None)`` is common to all hooks:

- ``name``: unique across all plugins (a duplicate is refused with a warning naming both distributions; the first
  registration keeps the name and the rest of the second plugin loads);
- ``factory``: what the core calls (or reads) to get the component; each hook says what it must be;
- ``config``: an attrs class; user options are structured into it with unknown keys rejected;
- ``description``: one line for listings (defaults to the first line of the factory's docstring);
- ``defaults``: preset option values layered under the user's options (variants, presets).
"""

import pluggy

hookspec = pluggy.HookspecMarker("ragen")
#: the marker plugins decorate their hook implementations with
hookimpl = pluggy.HookimplMarker("ragen")


@hookspec
def register_envs(register):
    """Register environments and their variants.

    Called the first time the ``env`` registry is used (``make_env``, ``ragen envs``, a run).
    ``factory`` is a ``ragen.Env`` subclass; ``config`` its attrs config class (a ``ragen.EnvConfig``
    subclass, whose budget fields the core reads); ``defaults`` the variant's settings. Register one name per
    variant, e.g. ``register("sokoban-large", SokobanEnv, config=SokobanConfig, defaults={"dim_room": (8, 8)})``.
    """


@hookspec
def register_action_parsers(register):
    """Register parsers that turn a model response into an answer text.

    Called the first time the ``parser`` registry is used (building a rollout, ``ragen play``, ``ragen eval``).
    ``factory(config)`` returns a callable ``parse(response: str) -> ragen.Parsed``, called on ``prefill + response``.
    The config's ``enable_think`` (True when absent) decides the prompt: True asks for ``<think>`` and prefills it,
    False asks for ``<answer>`` alone and prefills ``<answer>``.
    """


@hookspec
def register_reward_shapers(register):
    """Register reward shapers applied to the kept trajectories' scores after filtering, before advantages.

    Called the first time the ``shaper`` registry is used (building a trainer).
    ``factory(config)`` returns a callable ``shape(ragen.ShapeInput) -> list[float]`` (one score per trajectory), or
    a ``ragen.ShapeOutput`` (scores and new turn scores) for a shaper that credits turns, such as ``potential``.
    The callable may carry ``check_preset(preset)``, called with the run's ``AlgorithmPreset`` before any model is
    built, raising ``ragen.ConfigError`` when the shaper does not fit the rest of the preset (its estimator).
    """


@hookspec
def register_advantage_estimators(register):
    """Register advantage estimators.

    Called the first time the ``estimator`` registry is used (building a trainer, ``ragen plugins``).
    ``factory(config)`` returns a callable computing per-token advantages and returns from a batch. An estimator
    that reads critic values registers with ``needs_critic=True``: a preset that names it without a critic
    (``use_critic`` false) is refused before the run is built.
    """


@hookspec
def register_rollout_filters(register):
    """Register rollout filters, which keep or drop whole groups of trajectories.

    Called the first time the ``filter`` registry is used (building a trainer, ``ragen plugins``).
    ``factory(config)`` returns a callable ``apply(ragen.FilterInput) -> ragen.FilterResult`` (kept group ids +
    metrics); it sees RAW rewards only. An ``apply.needs_entropy = True`` attribute asks for per-trajectory entropies.
    """


@hookspec
def register_algorithms(register):
    """Register named algorithm presets, the values of ``--algo``.

    Called the first time the ``algorithm`` registry is used (``ragen run --algo NAME``, ``ragen plugins``).
    ``factory`` is a ``ragen.AlgorithmPreset``: the estimator, filter, loss settings and whether a critic is
    used; ``config`` is not used.
    """
