"""Resume: every JSONL the run appends to is cut back to the checkpoint step, torn lines are dropped with
a warning, and no DeepSpeed op is compiled at run time (so no stale extension lock can hang a later run)."""

import json

from ragen.config import load_config
from ragen.train.runlog import RunWriter


def _write(path, rows, torn=""):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + torn)


def test_truncate_after_cuts_every_jsonl_and_drops_torn_lines(tmp_path, capsys):
    from ragen.log import configure_logging

    configure_logging()
    _write(tmp_path / "metrics.jsonl", [{"step": s, "x": 1} for s in range(5)], torn='{"step": 5, "x"')
    _write(tmp_path / "trajectories.jsonl", [{"step": s, "seed": i} for s in range(1, 5) for i in range(2)])
    _write(tmp_path / "val_trajectories.jsonl", [{"step": s} for s in (0, 2, 4)], torn="[1, 2")
    (tmp_path / "val_trajectories.jsonl").write_text((tmp_path / "val_trajectories.jsonl").read_text() + "\n7\n")
    RunWriter(tmp_path, {}, resume=True).truncate_after(2)

    def steps(name):
        return [json.loads(line)["step"] for line in (tmp_path / name).read_text().splitlines()]

    assert steps("metrics.jsonl") == [0, 1, 2]
    assert steps("trajectories.jsonl") == [1, 1, 2, 2]
    assert steps("val_trajectories.jsonl") == [0, 2]
    err = capsys.readouterr().err
    assert err.count("jsonl_line_dropped") == 3 and "metrics.jsonl" in err and "line=6" in err


def test_a_resumed_run_after_a_kill_has_each_step_once(tmp_path):
    """A run checkpointed at step 2 that wrote step 3's trajectories and a torn metrics line before dying resumes to
    step 4 with steps 1..4 each once in trajectories.jsonl and metrics.jsonl."""
    from ragen.runs.loop import train

    over = [
        "env.name=frozenlake",
        "model.name=tiny",
        "rollout.engine=expert",
        "rollout.n_groups=2",
        "rollout.group_size=2",
        "rollout.n_val_groups=2",
        "rollout.n_paired_levels=2",
        "trainer.short_run_steps=0",
        "trainer.ppo_mini_batch_size=4",
        "trainer.micro_batch_size=4",
        "trainer.test_freq=0",
        "trainer.save_freq=0",
        "early_stop.enabled=false",
        "collapse.enabled=false",
        "logging.progress=false",
        "logging.save_trajectories=2",
        f"logging.run_dir={tmp_path}",
        "logging.name=run",
    ]
    run = train(load_config(overrides=[*over, "trainer.steps=2"]), warmstart=False)
    # what a kill -9 during step 3 leaves: its trajectories written, its metrics line half written
    with open(run / "trajectories.jsonl", "a") as f:
        f.write(json.dumps({"step": 3, "seed": 1}) + "\n")
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "rollout/succ')
    cfg = (run / "config.yaml").read_text().replace("steps: 2", "steps: 4")
    (run / "config.yaml").write_text(cfg)
    train(None, resume=run)
    traj_steps = [json.loads(line)["step"] for line in (run / "trajectories.jsonl").read_text().splitlines()]
    assert traj_steps == [1, 1, 2, 2, 3, 3, 4, 4]
    metric_steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert sorted(set(metric_steps)) == [0, 1, 2, 3, 4] and metric_steps.count(3) == 1


def test_no_deepspeed_op_is_compiled_at_run_time(tmp_path, monkeypatch):
    """A kill during a JIT build leaves a lock in the torch extensions cache that hangs every later build; ragen never
    builds one (DeepSpeed's shm_comm op is disabled on CPU, the optimizer is torch's AdamW), so no lock can hang it."""
    from deepspeed.ops.op_builder.builder import OpBuilder
    from torch.utils import cpp_extension

    from ragen.train.trainer import Trainer

    def refuse(*args, **kwargs):
        raise AssertionError("a C++/CUDA extension was compiled at run time")

    monkeypatch.setattr(OpBuilder, "jit_load", refuse)
    monkeypatch.setattr(cpp_extension, "load", refuse)
    cfg = load_config(
        overrides=[
            "env.name=frozenlake",
            "model.name=tiny",
            "rollout.engine=expert",
            "rollout.n_groups=1",
            "rollout.group_size=2",
            "trainer.ppo_mini_batch_size=2",
            "logging.progress=false",
            "collapse.enabled=false",
            f"logging.run_dir={tmp_path}",
        ]
    )
    trainer = Trainer(cfg, tmp_path / "run")
    try:
        assert trainer.step().metrics["actor/skipped_updates"] == 0.0
    finally:
        trainer.close()
