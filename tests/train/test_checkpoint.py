"""`ragen run --resume` on a copied run folder never executes code: checkpoints load weights only."""

from pathlib import Path

import pytest
import torch

from ragen.errors import RagenError
from ragen.models.distributed import init_distributed, make_engine
from ragen.train import checkpoint


class _Payload:
    """What the red team put in mp_rank_00_model_states.pt: unpickling it runs a command."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "payload ran"))


def _engine():
    init_distributed(torch.device("cpu"))
    torch.manual_seed(0)
    return make_engine(torch.nn.Linear(4, 4), lr=1e-3, weight_decay=0.0, grad_clip=1.0, zero_stage=0,
                       dtype=torch.float32)


def test_a_real_checkpoint_round_trips_weights_only(tmp_path):
    actor = _engine()
    state = {"step": 3, "rng": checkpoint.rng_state(), "early_stop": {"empty": 0}, "kl_beta": 0.0, "collapse": None}
    checkpoint.save(tmp_path, 3, actor, None, state, keep=2)
    expected = torch.rand(3)
    fresh = _engine()
    loaded = checkpoint.load(tmp_path, fresh, None)
    assert loaded["step"] == 3 and isinstance(fresh.checkpoint_engine, checkpoint.WeightsOnly)
    checkpoint.set_rng_state(loaded["rng"])
    assert torch.equal(torch.rand(3), expected)  # the RNG continues where the checkpoint left it
    for a, b in zip(actor.module.parameters(), fresh.module.parameters()):
        assert torch.equal(a, b)


def test_a_crafted_checkpoint_runs_no_code(tmp_path):
    actor = _engine()
    checkpoint.save(tmp_path, 1, actor, None, {"step": 1, "rng": checkpoint.rng_state()}, keep=2)
    [states] = list((tmp_path / "checkpoints" / "actor").glob("step1/mp_rank_00_model_states.pt"))
    marker = tmp_path / "pwned"
    real = torch.load(states, weights_only=False)
    real["evil"] = _Payload(marker)
    torch.save(real, states)
    with pytest.raises(RagenError, match="holds more than weights and was not loaded") as exc:
        checkpoint.load(tmp_path, _engine(), None)
    assert "\n" not in str(exc.value)
    assert not marker.exists()
    # the same file does run the payload under plain pickle semantics: the test's attack is real
    torch.load(states, weights_only=False)
    assert marker.read_text() == "payload ran"


@pytest.mark.parametrize("latest", ["../../../evil_tag", "/etc", "..", "step1/../../../evil_tag", "no_such_step",
                                    "\x1b[2Jstep1"])
def test_latest_is_confined_to_the_run_folder(tmp_path, latest):
    """DeepSpeed follows `latest` wherever it points; a copied run folder's `latest` may name only a checkpoint
    folder beside it."""
    run = tmp_path / "run"
    actor = _engine()
    checkpoint.save(run, 1, actor, None, {"step": 1, "rng": checkpoint.rng_state()}, keep=2)
    evil = tmp_path / "evil_tag"
    evil.mkdir()  # what `../../../evil_tag` reaches from run/checkpoints/actor
    (run / "checkpoints" / "actor" / "latest").write_text(latest)
    with pytest.raises(RagenError, match="not a checkpoint folder beside it; refused") as raised:
        checkpoint.load(run, _engine(), None)
    assert "\n" not in str(raised.value) and "\x1b" not in str(raised.value)


def test_latest_that_is_no_regular_file_is_refused(tmp_path):
    run = tmp_path / "run"
    checkpoint.save(run, 1, _engine(), None, {"step": 1, "rng": checkpoint.rng_state()}, keep=2)
    latest = run / "checkpoints" / "actor" / "latest"
    latest.unlink()
    latest.symlink_to("/dev/zero")
    with pytest.raises(RagenError, match="leads out of|not a regular file"):
        checkpoint.load(run, _engine(), None)
