"""Running one env: the episode under the core's budget, the prompt frame, run env lists, ``check-env``, ``play``,
the ``new-env`` scaffold. Serving an env to other processes is ``ragen.serve``'s job."""
