"""ragen-webshop: WebShop (RAGEN WebShop) on a local Flask shop server, registered through ragen's env hook."""

from ragen import hookimpl, register_variants
from ragen_webshop.env import WebShopConfig, WebShopEnv

__all__ = ["VARIANTS", "WebShopConfig", "WebShopEnv", "register_envs"]

#: RAGEN's budget: 9 turns x 1 action, 9 actions (max_steps 9), max_tokens 200
_BUDGET = {"max_turns": 9, "max_actions_per_turn": 1, "max_actions_per_episode": 9, "max_tokens": 200, "max_steps": 9}

#: variant name -> (config defaults, one-line description)
VARIANTS = {
    "webshop": (
        {**_BUDGET, "source": "generated", "num_products": 1000, "max_goals_per_product": 4},
        "WebShop on a generated catalogue: 1,000 products, synthetic instructions (offline default)",
    ),
    "webshop-items": (
        {**_BUDGET, "source": "items", "num_products": None, "max_goals_per_product": 0},
        "WebShop on your WebShop-format files (set items_file and instructions_file)",
    ),
}


@hookimpl
def register_envs(register):
    register_variants(register, WebShopEnv, VARIANTS)
