"""Config validation at load time: every field rejects a bad value of its type with one line naming the
full key, the value and what is allowed; bad files and absurd nesting give one line; `ragen run` stops before any
model is built."""

import math
import subprocess
import typing

import attrs
import pytest
from conftest import ragen_cmd

from ragen.config import RunConfig, load_config, structure
from ragen.contract.algorithm import AlgorithmPreset
from ragen.errors import ConfigError


def _leaves(cls, prefix=""):
    """(full key, owning class, attrs field) of every leaf field under ``cls``."""
    for f in attrs.fields(attrs.resolve_types(cls)):
        key = prefix + f.name
        if isinstance(f.type, type) and attrs.has(f.type):
            yield from _leaves(f.type, key + ".")
        else:
            yield key, cls, f


def _scalar(tp):
    """The scalar type of a field: ``float | None`` -> float; containers -> their origin."""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) in (typing.Union, getattr(__import__("types"), "UnionType", None)) and len(args) == 1:
        return args[0]
    return typing.get_origin(tp) or tp


#: a wrong-kind value for each field type (each must be rejected whatever the field)
WRONG_KIND = {
    int: [1.9, 2.0, True, "many", None, [1]],
    float: ["fast", True, math.nan, math.inf, [0.1], None],
    bool: ["maybe", 1, 0, "yes please", None],
    str: [[1], {"a": 1}, True, None],
    dict: ["x", 3, [1, 2]],
    tuple: [5, {"a": 1}],
}

FIELDS = [*_leaves(RunConfig), *((f"algo.options.{k}", c, f) for k, c, f in _leaves(AlgorithmPreset))]


def _load(key, value):
    """Load a config with ``key`` set to ``value`` (algo.options through the trainer's preset structuring)."""
    if key.startswith("algo.options."):
        from ragen.config import converter

        base = converter.unstructure(AlgorithmPreset(estimator="grpo"))
        return structure(AlgorithmPreset, {**base, key.rsplit(".", 1)[1]: value}, path="algo.options")
    data: dict = {}
    node = data
    *parents, leaf = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return load_config(base=data)


def _out_of_range(rng, kind):
    """Values of the field's own type just outside its range."""
    cands = []
    for edge in (rng.lo, rng.hi):
        if edge is not None:
            cands += [edge - 1, edge + 1, edge - 0.5, edge + 0.5, edge - 2, edge]
    cands = [kind(c) for c in cands if kind is float or float(c).is_integer()]
    return [c for c in cands if c not in rng]


@pytest.mark.parametrize("key, owner, field", FIELDS, ids=[k for k, _, _ in FIELDS])
def test_every_field_rejects_a_bad_value(key, owner, field):
    kind = _scalar(field.type)
    kind = {list: tuple, typing.Any: str}.get(kind, kind)
    assert kind in WRONG_KIND, f"{key}: no bad values known for {field.type}"
    bad = [v for v in WRONG_KIND[kind] if not (v is None and type(None) in typing.get_args(field.type))]
    if kind in (int, float):
        rng = field.metadata.get("range")
        assert rng is not None, f"{key}: a numeric field needs a range on its option(range=...)"
        outside = _out_of_range(rng, kind)
        assert outside, f"{key}: range {rng} is unbounded; say why in a test if that is right"
        bad += outside
    if kind is str and field.metadata.get("choices") is not None:
        bad.append("no-such-choice")
    for value in bad:
        with pytest.raises(ConfigError) as exc:
            _load(key, value)
        msg = str(exc.value)
        assert "\n" not in msg and msg.startswith(key), f"{key}={value!r}: {msg}"


#: the issue's examples (the first ten also go through `ragen run`) and a few more
EXAMPLES = [
    ("trainer.steps=0", "trainer.steps: must be >= 1, got 0"),
    ("trainer.steps=-1", "trainer.steps: must be >= 1, got -1"),
    ("trainer.steps=1.9", "trainer.steps: expected int, got 1.9"),
    ("trainer.actor_lr=-1", "trainer.actor_lr: must be > 0, got -1.0"),
    ("trainer.micro_batch_size=0", "trainer.micro_batch_size: must be >= 1, got 0"),
    ("rollout.max_model_len=0", "rollout.max_model_len: must be >= 1, got 0"),
    ("rollout.temperature=-1", "rollout.temperature: must be > 0, got -1.0"),
    ("rollout.group_size=0", "rollout.group_size: must be >= 1, got 0"),
    ("rollout.n_groups=0", "rollout.n_groups: must be >= 1, got 0"),
    ("logging.wandb=maybe", "logging.wandb: expected bool, got 'maybe'"),
    ("rollout.top_p=0", "rollout.top_p: must be in (0, 1], got 0.0"),
    ("logging.save_trajectories=-2", "logging.save_trajectories: must be -1 or >= 0, got -2"),
    ("trainer.actor_lr=.nan", "trainer.actor_lr: expected float (finite), got nan"),
    ("model.dtype=fp8", "model.dtype: expected one of 'auto', 'float32', 'bfloat16', 'float16', got 'fp8'"),
]


@pytest.mark.parametrize("override, message", EXAMPLES)
def test_the_issue_examples_name_key_value_and_range(override, message):
    with pytest.raises(ConfigError) as exc:
        load_config(overrides=[override])
    assert str(exc.value) == message


def test_good_values_still_load():
    cfg = load_config(overrides=["trainer.actor_lr=1e-5", "trainer.device=cuda:1", "logging.save_trajectories=-1",
                                 "logging.name=2024", "rollout.val_temperature=0", "collapse.h_threshold=0.5"])
    assert cfg.trainer.actor_lr == 1e-5 and cfg.logging.name == "2024" and cfg.collapse.h_threshold == 0.5


def test_binary_and_absurdly_nested_files_give_one_line(tmp_path):
    binary = tmp_path / "c.yaml"
    binary.write_bytes(bytes(range(256)) * 4)
    nul = tmp_path / "nul.yaml"
    nul.write_bytes(b"trainer:\n  steps: 3\x00\n")
    deep_flow = tmp_path / "deep.yaml"
    deep_flow.write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    deep_block = tmp_path / "block.yaml"
    deep_block.write_text("".join(" " * i + "k:\n" for i in range(5000)))
    moderately_deep = tmp_path / "mid.yaml"
    moderately_deep.write_text("env:\n  options:\n    x: " + "[" * 40 + "]" * 40 + "\n")
    for path, words in ((binary, "not UTF-8 text"), (nul, "binary"), (deep_flow, "nested"), (deep_block, "nested"),
                        (moderately_deep, "nested deeper than 32 levels")):
        with pytest.raises(ConfigError) as exc:
            load_config(path)
        assert "\n" not in str(exc.value) and words in str(exc.value), str(exc.value)
    with pytest.raises(ConfigError, match="override trainer.steps: value nested"):
        load_config(overrides=["trainer.steps=" + "[" * 5000])


def test_a_config_file_over_the_cap_is_refused_before_it_is_read(tmp_path):
    """A run folder's config.yaml is read back by a resume, `ragen doctor` and the report: data, so its size is
    capped before a byte is parsed (a sparse file: no disk is used)."""
    from ragen.config.bounded import MAX_FILE_BYTES

    huge = tmp_path / "config.yaml"
    with open(huge, "wb") as f:
        f.truncate(MAX_FILE_BYTES + 1)
    with pytest.raises(ConfigError, match="over the") as exc:
        load_config(huge)
    assert "\n" not in str(exc.value) and "config.yaml" in str(exc.value)


def test_ragen_run_prints_one_line_and_builds_nothing(tmp_path):
    """Each example in its own `ragen run` process (started together: the machine is the bottleneck, not the order);
    each exits non-zero with exactly one line and leaves the run folder parent empty: no model was built."""
    runs = tmp_path / "runs"
    procs = [(msg, subprocess.Popen(ragen_cmd("run", "--env", "frozenlake", ov, f"logging.run_dir={runs}"),
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path))
             for ov, msg in EXAMPLES[:10]]
    for msg, proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode != 0
        assert err.strip() == f"Error: {msg}", err
    assert not runs.exists() or not any(runs.iterdir())


def test_check_env_names_an_unknown_option():
    res = subprocess.run(ragen_cmd("check-env", "frozenlake", "-o", "bogus=1"), capture_output=True, text=True,
                         timeout=300)
    assert res.returncode != 0
    assert res.stderr.strip().startswith("Error: frozenlake.bogus: unknown key"), res.stderr
    assert "check(s) failed" not in res.stderr + res.stdout


def test_plugin_config_validator_message_reaches_the_user():
    """A plugin's own validator (attrs ``validator=`` or ``__attrs_post_init__``) is quoted, not 'invalid value'."""
    import attrs

    from ragen import EnvConfig, option
    from ragen.config import structure

    @attrs.frozen(kw_only=True)
    class GridConfig(EnvConfig):
        n: int = option(3, "Grid side.", validator=attrs.validators.ge(2))

    @attrs.frozen(kw_only=True)
    class PostInitConfig(EnvConfig):
        n: int = option(3, "Grid side.")

        def __attrs_post_init__(self):
            if self.n < 2:
                raise ValueError("n must be at least 2 (a 1x1 grid has no moves)")

    with pytest.raises(ConfigError, match=r"^gridworld: 'n' must be >= 2: 1$"):
        structure(GridConfig, {"n": 1}, path="gridworld")
    with pytest.raises(ConfigError, match=r"^gridworld: n must be at least 2 \(a 1x1 grid has no moves\)$"):
        structure(PostInitConfig, {"n": 1}, path="gridworld")
    with pytest.raises(ConfigError, match=r"^gridworld\.n: expected int, got 'x'$"):  # cattrs' own errors unchanged
        structure(GridConfig, {"n": "x"}, path="gridworld")


def test_make_component_algorithm_returns_the_preset_with_options():
    import ragen

    preset = ragen.make_component("algorithm", "grpo", kl_coef=0.01)
    assert isinstance(preset, ragen.AlgorithmPreset) and preset.kl_coef == 0.01 and preset.estimator == "grpo"
    with pytest.raises(ConfigError, match="grpo.kl_cof: unknown key; did you mean 'kl_coef'"):
        ragen.make_component("algorithm", "grpo", kl_cof=0.01)


# ---- config and run-folder names are data, every error one line ------------------------------------------


def test_a_yaml_key_given_twice_is_refused(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("trainer:\n  steps: 3\n  steps: 4\n")
    with pytest.raises(ConfigError, match=r"key 'steps' is given twice \(line 3\)") as exc:
        load_config(path)
    assert "\n" not in str(exc.value)
    with pytest.raises(ConfigError, match="given twice"):
        load_config(overrides=["env.options={max_turns: 2, max_turns: 3}"])


def test_an_integer_of_5000_digits_is_one_line(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("trainer:\n  steps: " + "9" * 5000 + "\n")
    for args in ((path,), (None, ["trainer.seed=" + "9" * 5000])):
        with pytest.raises(ConfigError, match="5000 digits") as exc:
            load_config(*args)
        assert "\n" not in str(exc.value) and len(str(exc.value)) < 400


@pytest.mark.parametrize("name, problem", [
    ("../../x", "path separator"), ("a/b", "path separator"), ("..", "'.' or '..'"), ("a\0b", "control character"),
    ("x\x1b]0;title\x07", "control character"), ("a" * 300, "300 characters"),
])
def test_logging_name_is_one_path_component(name, problem):
    with pytest.raises(ConfigError, match="logging.name: a run folder name must be one path component") as exc:
        structure(RunConfig, {"logging": {"name": name}})
    assert problem in str(exc.value) and "\n" not in str(exc.value)
    assert structure(RunConfig, {"logging": {"name": "my-run_1.v2"}}).logging.name == "my-run_1.v2"
