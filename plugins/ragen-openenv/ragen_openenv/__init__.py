"""ragen-openenv: the `openenv` env, any OpenEnv environment server played over its WebSocket protocol."""

from ragen import hookimpl
from ragen_openenv.env import OpenEnvConfig, OpenEnvEnv, OpenEnvError

__all__ = ["OpenEnvConfig", "OpenEnvEnv", "OpenEnvError", "register_envs"]


@hookimpl
def register_envs(register):
    register("openenv", OpenEnvEnv, config=OpenEnvConfig,
             description="Any OpenEnv environment server (env.options.url), over OpenEnv's WebSocket protocol")
