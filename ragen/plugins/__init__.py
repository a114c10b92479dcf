"""Finding and building components: entry points and the core's default plugins, registries, ``make_env`` /
``make_component``, the built-in parsers, the generated API docs."""
