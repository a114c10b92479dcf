"""Running one env: the episode under the core's budget, the prompt frame, run env lists, ``check-env``, ``play``,
the env server and its ``remote`` client, the ``new-env`` scaffold."""
