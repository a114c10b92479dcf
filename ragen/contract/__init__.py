"""The plugin surface: what a plugin implements or receives (hook specs, Env, presets, parsing, trajectories).

Imports only ``ragen.config.fields`` and ``ragen.errors`` (tests/test_architecture.py)."""
