"""Serving envs to other processes: ``ragen serve-env`` over HTTP (ragen's protocol or OpenEnv's), the ``remote`` env
that plays a served env, and the worker processes that hold envs for a server or for the rollout's "process" envs.

* ``net``: what both protocols and the client share (the token's variable, the longest action, loopback).
* ``hosts``: env instances in this process (``LocalHost``, the one env pool: a lock for envs not declared
  concurrency-safe, env failures mapped to HTTP 400/409/422) and what ``/info`` says about an env.
* ``workers``: env instances in worker processes (``WorkerHost``: placement on the least busy worker, a dead worker
  replaced), the one pipe protocol.
* ``table``: ``EpisodeTable``, ragen's protocol as ``(method, path, body) -> (status, json)`` with episode ids,
  admission by weight and reaping; ``ProcessEnvPool`` serves it to the rollout of this process without a socket.
* ``http``: the WSGI app over a table, the token rules, ``make_server`` (waitress).
* ``openenv``: the same envs behind OpenEnv's own server (``--protocol openenv``; needs the ``openenv`` extra).
* ``remote``: the ``remote`` env, a client of a table over HTTP or in this process (a default plugin).
"""
