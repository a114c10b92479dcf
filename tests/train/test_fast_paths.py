"""A fast StarPO step: reused old log-probs, sampled-position log-probs, token-budget micro-batches,
the thread policy and no DeepSpeed op compiled at run time."""

import os
import subprocess
import sys

import pytest
import torch

from ragen.config import load_config
from ragen.errors import ConfigError
from ragen.rollout.engine import old_logprobs_reusable
from ragen.train.batch import collate, token_micro_batches
from ragen.train.losses import AggNorm, policy_loss, sampled_logprobs, token_logprobs
from ragen.train.trainer import Trainer

SMALL = [
    "env.name=frozenlake",  # multi-turn: several sampled spans per row, observations between them
    "env.options.response_length=24",
    "rollout.n_groups=2",
    "rollout.group_size=2",
    "rollout.n_val_groups=2", "rollout.n_paired_levels=2",
    "trainer.ppo_mini_batch_size=4",
    "trainer.micro_batch_size=2",
    "logging.progress=false",
    "logging.name=run",
    "trainer.threads=1",
]


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fast")
    t = Trainer(load_config(overrides=[*SMALL, f"logging.run_dir={tmp}"]), tmp / "run")
    yield t
    t.close()


@pytest.fixture(scope="module")
def rollout(trainer):
    """One multi-turn rollout batch of the untrained policy (the engine's log-probs included)."""
    result = trainer._rollout.train_batch(0, policy_version=0, seed=trainer._seed(1, 0))
    trajs = result.trajectories
    assert max(len(t.turns) for t in trajs) > 1, "the test needs multi-turn rows"
    return collate(trajs, trainer.tokenizer.pad_token_id, [t.score for t in trajs]).to(trainer.device)


# ---- acceptance 1a: reuse where the rule allows it, recomputation where it does not -------------------------------
def test_reused_old_logprobs_equal_the_recomputed_ones(trainer, rollout):
    assert old_logprobs_reusable(trainer.engine, ppo_epochs=1, tis_cap=0.0) is None  # HF, fp32, 1 epoch, no TIS
    metrics: dict = {}
    trainer.policy.old_logprobs(rollout, metrics, trainer.engine)
    assert metrics["rollout/old_logprobs_reused"] == 1.0
    reused = rollout.old_logprobs
    with torch.no_grad():
        recomputed, _ = trainer.policy.logprobs(rollout, with_entropy=False)
    mask = rollout.loss_mask.bool()
    assert mask.sum() > 20
    assert torch.allclose(reused[mask], recomputed[mask], atol=1e-5, rtol=0), float(
        (reused - recomputed)[mask].abs().max()
    )
    assert torch.count_nonzero(reused[~mask]) == 0


def test_recomputation_where_the_rule_forbids_reuse(trainer, rollout):
    from ragen.rollout.expert import ExpertEngine
    from ragen.rollout.hf import HFEngine
    from ragen.rollout.vllm import VLLMEngine

    assert old_logprobs_reusable(trainer.engine, ppo_epochs=2, tis_cap=0.0) == "several PPO epochs"
    assert "importance sampling" in old_logprobs_reusable(trainer.engine, ppo_epochs=1, tis_cap=2.0)
    vllm = VLLMEngine.__new__(VLLMEngine)  # the class's rule only: vLLM's kernels are not the trainer's
    assert old_logprobs_reusable(vllm, ppo_epochs=1, tis_cap=0.0) is not None
    expert = ExpertEngine(trainer.tokenizer, trainer.engine.eos_token_ids[0])
    assert old_logprobs_reusable(expert, ppo_epochs=1, tis_cap=0.0) is not None
    import copy

    bf16 = HFEngine(copy.deepcopy(trainer.actor.module).to(torch.bfloat16), trainer.tokenizer)
    assert not bf16.logprobs_exact and old_logprobs_reusable(bf16, ppo_epochs=1, tis_cap=0.0) is not None

    # ppo_epochs > 1 in the trainer: the forward pass runs, its result is the old log-probs, the gap is reported
    calls = []
    real = trainer.policy.logprobs

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    trainer.policy.cfg = load_config(
        overrides=[*SMALL, f"logging.run_dir={trainer.run_dir.parent}", "trainer.ppo_epochs=2"]
    )
    trainer.policy.logprobs = spy
    try:
        metrics: dict = {}
        trainer.policy.old_logprobs(rollout, metrics, trainer.engine)
    finally:
        del trainer.policy.logprobs
        trainer.policy.cfg = trainer.cfg
    assert calls and metrics["rollout/old_logprobs_reused"] == 0.0
    assert 0.0 <= metrics["rollout/logprob_abs_diff_max"] < 1e-5 and metrics["actor/entropy"] > 0
    assert not torch.equal(rollout.old_logprobs, rollout.rollout_logprobs)  # recomputed, not copied


# ---- acceptance 1b: the sampled-position path gives the full path's loss and gradients ---------------------------
def _loss_and_grads(trainer, batch, logprob_fn):
    module = trainer.actor.module
    module.zero_grad(set_to_none=True)
    lp, ent = logprob_fn(module, batch)
    mask = batch.loss_mask
    adv = torch.linspace(-1.0, 1.0, mask.numel()).reshape(mask.shape)
    old = (lp.detach() + 0.05 * torch.sin(torch.arange(mask.numel(), dtype=torch.float32)).reshape(mask.shape)) * mask
    norm = AggNorm.of([mask])
    loss, _ = policy_loss(lp, old, adv, mask, clip_low=0.2, clip_high=0.28, clip_c=3.0, agg_mode="seq-mean-token-mean",
                          norm=norm)
    loss = loss - 0.01 * (ent * mask).sum() / norm.tokens
    loss.backward()
    grads = {k: p.grad.detach().clone() for k, p in module.named_parameters() if p.grad is not None}
    module.zero_grad(set_to_none=True)
    return float(loss.detach()), grads, lp.detach() * mask, ent.detach() * mask


def test_sampled_position_logprobs_give_the_full_paths_loss_and_gradients(trainer, rollout):
    def full(module, batch):  # every position, the whole row: the path before the fast-step work
        hidden = module.get_decoder()(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                                      position_ids=batch.position_ids).last_hidden_state
        return token_logprobs(hidden, module.get_output_embeddings(), batch.input_ids,
                              temperature=trainer.cfg.rollout.temperature, chunk=7,
                              with_entropy=True)

    def sampled(module, batch):
        return trainer.policy.logprobs(batch, with_entropy=True)

    loss_a, grads_a, lp_a, ent_a = _loss_and_grads(trainer, rollout, full)
    loss_b, grads_b, lp_b, ent_b = _loss_and_grads(trainer, rollout, sampled)
    assert abs(loss_a - loss_b) < 1e-5
    assert torch.allclose(lp_a, lp_b, atol=1e-5, rtol=0) and torch.allclose(ent_a, ent_b, atol=1e-5, rtol=0)
    assert grads_a.keys() == grads_b.keys() and len(grads_a) > 10
    for k in grads_a:
        assert torch.allclose(grads_a[k], grads_b[k], atol=1e-5, rtol=1e-4), k


def test_sampled_logprobs_of_a_masked_row_still_reach_every_weight():
    torch.manual_seed(0)
    head = torch.nn.Linear(8, 11)
    hidden = torch.randn(2, 5, 8, requires_grad=True)
    ids = torch.randint(0, 11, (2, 5))
    lp, _ = sampled_logprobs(hidden, head, ids, torch.zeros(2, 5))
    (lp * 0).sum().backward()  # what a masked padding row contributes: nothing, through a graph
    assert head.weight.grad is not None and hidden.grad is not None


def test_entropy_without_grad_is_the_same_number():
    torch.manual_seed(0)
    head = torch.nn.Linear(8, 11)
    hidden = torch.randn(2, 6, 8, requires_grad=True)
    ids = torch.randint(0, 11, (2, 6))
    mask = torch.tensor([[0, 0, 1, 1, 0, 1], [0, 1, 1, 0, 0, 0]], dtype=torch.float32)
    _, e1 = sampled_logprobs(hidden, head, ids, mask, with_entropy=True, chunk=2)
    _, e2 = sampled_logprobs(hidden, head, ids, mask, with_entropy=True, entropy_grad=False, chunk=3)
    assert e1.requires_grad and not e2.requires_grad
    assert torch.allclose(e1.detach(), e2)
    _, ref = token_logprobs(hidden, head, ids, with_entropy=True)
    assert torch.allclose(e2, ref * mask)


# ---- micro-batches by token budget -------------------------------------------------------------------------------
def test_token_micro_batches_keep_each_within_the_budget_and_every_row_once():
    rows = [3, 7, 1, 9, 4, 0]
    lengths = [50, 400, 120, 90, 60, 700]
    parts = token_micro_batches(rows, lengths, 400)
    assert sorted(r for p in parts for r in p) == sorted(rows)
    by_row = dict(zip(rows, lengths))
    for p in parts:
        assert len(p) == 1 or len(p) * max(by_row[r] for r in p) <= 400
    assert parts[0] == [0]  # longer than the budget: alone
    assert [by_row[r] for p in parts for r in p] == sorted(lengths, reverse=True)  # length-sorted
    assert len(parts) < len(rows)  # short rows share a micro-batch


def test_token_budget_update_matches_row_count_update(tmp_path):
    """The same step with micro_batch_tokens and with micro_batch_size: the gradient does not depend on the cut."""
    weights = [_weights_after_one_step([*SMALL, f"logging.run_dir={tmp_path}", "trainer.actor_lr=1e-3", *extra],
                                       tmp_path / extra[0].split("=")[0])
               for extra in (["trainer.micro_batch_size=1"], ["trainer.micro_batch_tokens=600"])]
    _assert_same_weights(*weights)


def _weights_after_one_step(overrides: list[str], run_dir, share_prefix: bool = True) -> dict:
    """The actor's weights after one training step of a fresh Trainer."""
    t = Trainer(load_config(overrides=overrides), run_dir)
    t.policy.share_prefix = share_prefix
    try:
        t.step()
        return {k: v.detach().clone() for k, v in t.actor.module.named_parameters()}
    finally:
        t.close()


def _assert_same_weights(a: dict, b: dict) -> None:
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-6), k


# ---- thread policy and no run-time compilation -----------------------------------------------------------------
def test_thread_policy(monkeypatch):
    from ragen.models.distributed import default_threads, set_threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # the user's setting wins: tests/models/test_threads.py
    before = torch.get_num_threads()
    try:
        assert set_threads(1) == 1 and torch.get_num_threads() == 1
        assert set_threads(0) == default_threads() == max(1, len(os.sched_getaffinity(0)))
    finally:
        torch.set_num_threads(before)
    with pytest.raises(ConfigError, match=r"trainer\.threads: must be >= 0"):
        load_config(overrides=["trainer.threads=-1"])
    with pytest.raises(ConfigError, match=r"trainer\.micro_batch_tokens: must be >= 0"):
        load_config(overrides=["trainer.micro_batch_tokens=-5"])


def test_local_processes_share_the_cores(monkeypatch):
    from ragen.models.distributed import default_threads

    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(4 * len(os.sched_getaffinity(0))))
    assert default_threads() == 1


def test_cpu_init_compiles_no_deepspeed_op(tmp_path):
    """A fresh torch extensions folder stays empty through init_distributed and engine creation (the shm comm op
    used to be JIT-compiled here: about 83 CPU-seconds before the first step)."""
    code = (
        "import torch\nfrom ragen.models.distributed import init_distributed, make_engine\n"
        "init_distributed(torch.device('cpu'))\n"
        "make_engine(torch.nn.Linear(4, 4), lr=1e-3, weight_decay=0.0, grad_clip=1.0, zero_stage=0, "
        "dtype=torch.float32)\n"
        "import deepspeed.comm.comm as c\nassert c.cdb.shm_comm_op is None\nprint('ok')\n"
    )
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-2000:]
    assert not (tmp_path / "ext").exists() or not any((tmp_path / "ext").rglob("*")), "a C++ op was built"


# ---- generation: group prompts prefilled once, decoding without whole-cache copies --------------------------------
@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from ragen.models.load import load_model_and_tokenizer

    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as trainer.threads=1: on a loaded shared CPU more threads stall in OpenMP barriers
    yield load_model_and_tokenizer("tiny", tmp_path_factory.mktemp("tiny"), ["frozenlake-slippery"])
    torch.set_num_threads(threads)


def _rollout_with(model, tok, **engine_kwargs):
    from ragen.rollout import ChatFormat, EnvGroups, HFEngine, RolloutSettings, SamplingParams, run_rollout

    engine = HFEngine(model, tok, **engine_kwargs)
    # 24 tokens a turn: the env's response_length caps each turn (the runner's max_new_tokens), and the random tiny
    # model would otherwise write frozenlake's 400 every turn (34 s here, for the same claim)
    with EnvGroups("frozenlake-slippery", group_size=3, n_groups=2, options={"response_length": 24}) as groups:
        res = run_rollout(
            engine,
            groups,
            SamplingParams(temperature=1.0, seed=123),
            RolloutSettings(chat_format=ChatFormat(tok)),
        )
    return res.trajectories, engine.kv_stats


def test_group_prefill_sharing_gives_identical_trajectories(tiny):
    model, tok = tiny
    plain, _ = _rollout_with(model, tok, share_prefill=False)
    shared, stats = _rollout_with(model, tok, share_prefill=True)
    assert stats["shared_prefill_tokens"] > 0  # the groups' first-turn prompts were prefilled once each
    assert max(len(t.turns) for t in plain) > 1
    assert [t.input_ids for t in shared] == [t.input_ids for t in plain]  # token-exact, every turn
    assert [t.loss_mask for t in shared] == [t.loss_mask for t in plain]
    for a, b in zip(plain, shared):
        assert max(abs(x - y) for x, y in zip(a.rollout_logprobs, b.rollout_logprobs)) < 1e-5


def test_growing_cache_layer_writes_in_place():
    from ragen.rollout.hf import _growing_layer_class

    torch.manual_seed(0)
    layer = _growing_layer_class()(reserve=4)
    chunks = [torch.randn(2, 3, k, 5) for k in (6, 1, 1, 1, 1, 1, 3)]  # prefill, 5 decode steps, then past the reserve
    ptrs = []
    for i, c in enumerate(chunks):
        keys, values = layer.update(c, -c)
        ptrs.append(keys.data_ptr())
        assert torch.equal(keys, torch.cat(chunks[: i + 1], dim=-2)) and torch.equal(values, -keys)
    assert len(set(ptrs[:5])) == 1  # within the reserve, no step moved the cache
    assert layer.get_seq_length() == sum(c.shape[-2] for c in chunks)


# ---- the training passes run a group's shared prompt once ------------------------------------------------------------
def test_prefix_plan_groups_rows_by_prompt():
    from ragen.train.shared_prefix import prefix_plan

    ids = torch.tensor([[5, 6, 7, 8, 9, 0], [5, 6, 7, 8, 3, 4], [5, 6, 1, 8, 9, 9], [5, 6, 7, 8, 9, 9]])
    mask = torch.tensor([[0, 0, 0, 0, 1, 0], [0, 0, 0, 0, 1, 1], [0, 0, 0, 0, 1, 1], [0, 0, 0, 0, 1, 1]])
    # a row's prefix: its ids before the token that predicts its first sampled token (ids[:3] here)
    assert prefix_plan(ids, mask, min_saved=1) == ([0, 0, 1, 0], [3, 3])
    assert prefix_plan(ids, mask) is None  # 6 tokens saved: not worth a second pass
    mask[2] = 0
    assert prefix_plan(ids, mask, min_saved=1) is None  # a row with nothing sampled (a masked padding row): plain path


def test_micro_batches_keep_a_groups_rows_together(trainer, rollout):
    assert rollout.group_ids.tolist() == [0, 0, 1, 1]
    assert trainer.policy.micro_batches(rollout, [3, 0, 2, 1]) == [[0, 1], [3, 2]]


def test_shared_prompt_pass_gives_the_plain_passes_log_probs_and_gradients(trainer, rollout):
    """Multi-turn rows whose groups' prompts differ in length: one pass per prompt, then each row's remainder."""
    from ragen.train.shared_prefix import prefix_plan

    row_class, lengths = prefix_plan(rollout.input_ids, rollout.loss_mask)
    assert len(lengths) < len(rollout)  # rows do share prompts
    results = []
    for share in (False, True):
        trainer.policy.share_prefix = share
        try:
            results.append(
                _loss_and_grads(trainer, rollout, lambda module, batch: trainer.policy.logprobs(batch, True))
            )
        finally:
            del trainer.policy.share_prefix  # back to the class default
    (loss_a, grads_a, lp_a, ent_a), (loss_b, grads_b, lp_b, ent_b) = results
    assert abs(loss_a - loss_b) < 1e-5
    assert torch.allclose(lp_a, lp_b, atol=1e-5, rtol=0) and torch.allclose(ent_a, ent_b, atol=1e-5, rtol=0)
    assert grads_a.keys() == grads_b.keys() and len(grads_a) > 10
    for k in grads_a:
        assert torch.allclose(grads_a[k], grads_b[k], atol=1e-5, rtol=1e-4), k


def test_step_with_shared_prompt_passes_matches_the_plain_step(tmp_path):
    """One whole step each way (countdown: the prompt is most of each row): the same weights afterwards."""
    overrides = [*SMALL, "env.name=countdown", f"logging.run_dir={tmp_path}", "trainer.actor_lr=1e-3"]
    _assert_same_weights(*(_weights_after_one_step(overrides, tmp_path / f"share-{share}", share_prefix=share)
                           for share in (False, True)))


def test_trainer_recomputes_for_a_bf16_or_vllm_engine(trainer, rollout):
    """The trainer's own path, not only the rule: an engine whose log-probs are not exact gets a forward pass."""
    import copy

    from ragen.rollout.hf import HFEngine
    from ragen.rollout.vllm import VLLMEngine

    bf16 = HFEngine(copy.deepcopy(trainer.actor.module).to(torch.bfloat16), trainer.tokenizer)
    vllm = VLLMEngine.__new__(VLLMEngine)
    for engine in (bf16, vllm):
        metrics: dict = {}
        trainer.policy.old_logprobs(rollout, metrics, engine)
        assert metrics["rollout/old_logprobs_reused"] == 0.0 and "rollout/logprob_abs_diff_max" in metrics
        assert not torch.equal(rollout.old_logprobs, rollout.rollout_logprobs * rollout.loss_mask)
