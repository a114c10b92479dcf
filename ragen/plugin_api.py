"""The marker plugins decorate their hook implementations with."""

import pluggy

hookimpl = pluggy.HookimplMarker("ragen")
