"""A third-party plugin whose env name `tiny-coin` clashes with ragen-tinyenv's; its other components must still load.

Its entry point is named `zz-tinyclash` so it loads after `tinyenv` (entry points load in name order): ragen-tinyenv
keeps `tiny-coin`."""

from ragen_tinyenv import CoinEnv

from ragen import Parsed, hookimpl


class FlippedCoinEnv(CoinEnv):
    """The same coin, under this plugin's own name."""


@hookimpl
def register_envs(register):
    register("tiny-coin", FlippedCoinEnv, description="clashes with ragen-tinyenv")
    register("tiny-coin-flipped", FlippedCoinEnv)


@hookimpl
def register_action_parsers(register):
    register("shout", lambda config: (lambda response: Parsed(True, "", response.upper())), description="upper-cases")
