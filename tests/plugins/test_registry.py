"""What a registration declares beside its factory: an estimator that needs a critic, checked before a run builds."""

import pytest
from conftest import TINY

from ragen.config import load_config
from ragen.errors import ConfigError, RegistrationError
from ragen.plugins.registry import Registry


def test_only_an_estimator_declares_that_it_needs_a_critic():
    reg = Registry("estimator")
    assert reg.register("plain", object, dist="d").needs_critic is False
    assert reg.register("critic", object, dist="d", needs_critic=True).needs_critic is True
    with pytest.raises(RegistrationError, match="needs_critic of estimator 'odd' must be True or False"):
        reg.register("odd", object, dist="d", needs_critic="yes")
    with pytest.raises(RegistrationError, match="declared by advantage estimators, not by the filter 'f'"):
        Registry("filter").register("f", object, dist="d", needs_critic=True)


@pytest.mark.parametrize("estimator", ["gae", "turn-gae", "bi-level-gae"])
def test_an_estimator_that_needs_a_critic_is_refused_without_one(tmp_path, estimator):
    """The registration says so (the core names no estimator): refused before any model is built."""
    from ragen.train.trainer import Trainer

    cfg = load_config(overrides=[*TINY, "env.name=sokoban", "algo.name=grpo", f"algo.options.estimator={estimator}",
                                 f"logging.run_dir={tmp_path}", "logging.name=r", "logging.progress=false"])
    with pytest.raises(ConfigError, match=f"algo.options.use_critic: the {estimator} estimator needs a critic"):
        Trainer(cfg, tmp_path / "r")
