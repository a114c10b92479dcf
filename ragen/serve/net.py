"""What the servers and their clients share on the wire: the token's variable, the longest action, loopback."""

from __future__ import annotations

import ipaddress

#: the environment variable holding the shared token, read by ``ragen serve-env`` and by every client (``remote``,
#: the ``openenv`` plugin): a token on the command line would be visible to every user in ``ps``
TOKEN_ENV = "RAGEN_ENV_TOKEN"
#: characters of one action (or answer) a server accepts; longer is refused before the env sees it
MAX_ACTION_CHARS = 100_000


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (``localhost`` or a loopback address)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
