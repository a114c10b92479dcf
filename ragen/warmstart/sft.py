"""Expert warm start: demonstrations from the env's expert, in exactly the rollout's prompt/response format,
then supervised fine-tuning of the policy on their sampled-position tokens.

The demos go through the real rollout loop (``run_rollout``) with an ``ExpertEngine`` in place of the model, so
the prompts, deltas, masks and parsing are the ones RL will use.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from ragen.config import RunConfig
from ragen.envs.resolved import DEMO_SEED_BASE, ResolvedRun, SeedRule, as_resolved  # the seed bases live together
from ragen.log import log
from ragen.log import progress as progress_bar
from ragen.rollout import EnvGroups, GroupSpec, RolloutSettings, run_rollout
from ragen.rollout.engine import SamplingParams
from ragen.rollout.expert import ExpertEngine
from ragen.train.batch import collate, micro_batches, mini_batches
from ragen.train.losses import AggNorm, aggregate, output_head, sampled_logprobs, token_logprobs
from ragen.warmstart.defaults import settings as warm_settings


def expert_demos(tokenizer, chat_format, env_name: str, options: dict, episodes: int, noise: float, seed: int,
                 max_model_len: int, format_penalty: float = -0.1, seed_base: int = DEMO_SEED_BASE,
                 progress: bool = False, prompt: str = "full", window: int = 0):
    """Play ``episodes`` expert episodes (seeds from ``seed_base``, 900000) through the rollout loop; returns the
    rollout result (trajectories and metrics). ``progress``: show a bar of turns played; ``prompt``: the frame's
    style (``rollout.prompt``); ``window``: the past turns each prompt holds (``rollout.max_context_window``), so the
    demos show the model the contexts it will play with."""
    engine = ExpertEngine(tokenizer, chat_format.eos_id, chat_format.enable_think, noise=noise, seed=seed)
    groups = EnvGroups([GroupSpec(env_name, episodes, dict(options))], group_size=1, split="train",
                       seeds=SeedRule(seed_base))  # episode g plays seed_base + g, the same at every call
    settings = RolloutSettings(max_model_len=max_model_len, chat_format=chat_format, format_penalty=format_penalty,
                               prompt=prompt, max_context_window=window)
    try:
        with progress_bar(0, 0, progress, desc=f"expert demos ({env_name})", unit="turn") as bar:
            res = run_rollout(engine, groups, SamplingParams(temperature=0.0, seed=seed), settings, progress=bar)
    finally:
        groups.close()
    return res


def sft(engine, tokenizer, trajectories, *, epochs: int, batch_size: int, micro_batch_size: int, seed: int,
        chunk: int = 256, device: torch.device | None = None, progress: bool = False, stop=None,
        prompt_weight: float = 0.0) -> dict:
    """Cross-entropy on the sampled (mask-1) tokens of ``trajectories``, one DeepSpeed step per mini-batch.

    ``prompt_weight`` > 0 adds ``prompt_weight`` x the token-mean loss of the prompt and env tokens (``context_mask``):
    language modelling of the env's own text, which is how a randomly initialised model learns to read the state.

    ``stop()`` True (a first Ctrl-C, ragen/train/interrupt.py) ends training after the current update; the metrics then
    carry ``sft/interrupted`` 1.0."""
    module = engine.module
    batch = collate(trajectories, tokenizer.pad_token_id, [0.0] * len(trajectories))
    if device is not None:
        batch = batch.to(device)
    gen = torch.Generator().manual_seed(seed)
    losses = []
    module.train()
    n_minis = max(1, round(len(batch) / batch_size)) if len(batch) else 0
    bar = progress_bar(epochs * n_minis, 0, progress, desc="warm start", unit="update")
    interrupted = False
    for _ in range(epochs):
        for mini in mini_batches(len(batch), batch_size, gen):
            if stop is not None and stop():
                interrupted = True
                break
            micros = [batch.rows(r) for r in micro_batches(mini, micro_batch_size)]
            contexts = [context_mask(m) if prompt_weight > 0 else None for m in micros]
            norm = AggNorm.of([m.loss_mask for m in micros])
            ctx_norm = AggNorm.of(contexts) if prompt_weight > 0 else None
            total = 0.0
            for m, ctx in zip(micros, contexts):
                hidden = module.get_decoder()(input_ids=m.input_ids, **forward_masks(m)).last_hidden_state
                lp, _ = response_logprobs(hidden, output_head(module), m, chunk, every=ctx is not None)
                loss = aggregate(-lp, m.loss_mask, "token-mean", norm)
                if ctx is not None:  # its own token mean: the prompt's many tokens do not dilute the responses' loss
                    loss = loss + prompt_weight * aggregate(-lp, ctx, "token-mean", ctx_norm)
                engine.backward(loss)
                total += float(loss.detach())
            engine.step()
            losses.append(total)
            bar.update(1)
            bar.set_postfix(loss=f"{total:.3f}")
        if interrupted:
            break
    bar.close()
    return {"sft/loss_first": losses[0] if losses else 0.0, "sft/loss_last": losses[-1] if losses else 0.0,
            "sft/updates": len(losses), **({"sft/interrupted": 1.0} if interrupted else {})}


def response_logprobs(hidden, lm_head, batch, chunk: int, every: bool) -> tuple:
    """The log-probs the SFT loss reads: at every position when the prompt is in the loss (``every``), else only at
    the sampled tokens (``sampled_logprobs``, the update's path). Without the prompt loss (a real model's default) the
    prompt and env tokens are most of a row, and their vocabulary-sized logits were most of the LM head's time and,
    kept for the backward pass, most of the warm start's memory: SmolLM2's 49k-word and Gemma 3's 262k-word heads on
    every position of a batch of 4 episodes held several GB. The loss is the same (only mask-1 positions count)."""
    if every:
        return token_logprobs(hidden, lm_head, batch.input_ids, chunk=chunk)
    return sampled_logprobs(hidden, lm_head, batch.input_ids, batch.loss_mask, chunk=chunk)


def forward_masks(batch) -> dict:
    """The attention mask and positions ``sft`` gives the model for ``batch``'s rows: the padding mask and collate's
    positions. ``causal_forward_masks`` is faster and equal up to floating point, but not the default: its last-bit
    differences were enough to turn the main job's 24-epoch sokoban warm start from one that reads the board into a
    blind one (docs/notes/2026-11-28-warmstart-speed.md), so the warm start keeps the arithmetic it was measured on."""
    return {"attention_mask": batch.attention_mask, "position_ids": batch.position_ids}


def causal_forward_masks(batch) -> dict:
    """The faster forward pass (bench/warmstart_speed.py, 0.83-0.90x time per update; not the default).

    Rows without history-window blocks are right-padded, so causal attention alone keeps every real token off the
    padding (which only follows it): no mask and default positions (0, 1, ... on every real token, as collate's), and
    SDPA takes its causal kernel instead of a materialised padding mask (faster per micro-batch). Padding's own
    outputs change, but no loss reads them. Explicit positions would not do: padding repeats the last one, which the
    model reads as packed sequences and masks again."""
    if batch.blocks is None:
        return {"attention_mask": None, "position_ids": None}
    return forward_masks(batch)


def context_mask(batch) -> torch.Tensor:
    """1 on every real token that is not sampled and has a prediction (prompts and env replies; the first token of a
    row has none), 0 on the sampled tokens and on padding: the tokens the warm start's prompt loss covers.

    Why the prompt counts for the built-in models (docs/models.md, "Reading the state"): trained on the responses
    alone, the 2-layer models never learnt to copy from the prompt (the bandit answer's arm name and the FrozenLake
    player's coordinates were predicted at chance), so the warm-started policy was blind to the state. The prompts
    are full of copies (the arm names listed, then quoted in the answer format; the player's coordinates and the
    grid), and modelling them teaches the attention that reading the state needs."""
    context = (batch.attention_mask > 0).float() - batch.loss_mask
    context[:, 0] = 0.0
    return context.clamp(min=0.0)


class TorchOptimizer:
    """The slice of a DeepSpeed engine ``sft`` uses (``module``, ``backward``, ``step``), on a plain AdamW.

    The warm start runs before the run's DeepSpeed engines exist, on one process (rank 0 under a launcher), so it
    needs no collective and no engine of its own; its weights are saved and the RL engines load them.
    """

    def __init__(self, module: torch.nn.Module, lr: float, weight_decay: float, grad_clip: float, total_steps: int = 0):
        self.module, self.grad_clip = module, grad_clip
        self.optimizer = torch.optim.AdamW(module.parameters(), lr=lr, weight_decay=weight_decay)
        # warm up over the first 5% of the updates, then decay linearly to 10%: a from-scratch model trained at a
        # constant high rate plateaus and then drifts (measured on frozenlake: success fell from 20% to 8%)
        warm = max(1, total_steps // 20)
        self.schedule = (torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda i: min((i + 1) / warm, max(0.1, 1 - 0.9 * (i - warm) / max(1, total_steps - warm))))
            if total_steps else None)

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self) -> None:
        if self.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.module.parameters(), self.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.schedule is not None:
            self.schedule.step()


def _run_demos(run: ResolvedRun, tokenizer, fmt):
    """Expert demos of every training env: ``warmstart.episodes`` shared in proportion to the envs' groups per step
    (largest remainder; an env whose share is 0 gets none), each env with its own parser's prompt frame."""
    from ragen.envs.env_lists import apportion
    from ragen.rollout import ChatFormat, RolloutResult, rollout_metrics

    cfg, plan = run.cfg, run.train_plan
    w = warm_settings(cfg)
    results = []
    for p, n in zip(plan, apportion([q.n_groups for q in plan], w.episodes)):
        if n:
            own = ChatFormat(tokenizer, enable_think=run.env_parsers[p.name][1]) if p.parser else fmt
            results.append(expert_demos(tokenizer, own, p.name, dict(p.options), n, w.noise, w.seed,
                                        cfg.rollout.max_model_len, cfg.trainer.format_penalty,
                                        seed_base=run.demo_seeds.base, progress=cfg.logging.progress,
                                        prompt=run.prompt, window=cfg.rollout.max_context_window))
    if len(results) == 1:
        return results[0]
    trajs = [t for r in results for t in r.trajectories]
    failed = sum(r.failed_envs for r in results)
    return RolloutResult(trajs, failed, [e for r in results for e in r.errors], rollout_metrics(trajs, failed))


def prompt_weight(cfg) -> float:
    """``warmstart.prompt_loss_weight``, or its default: 1.0 for a built-in (randomly initialised) model, which must
    learn to read the env's text, 0.0 for a real model (plain response-only SFT)."""
    from ragen.models.builtin import BUILTIN_MODELS

    w = cfg.warmstart.prompt_loss_weight
    if w is not None:
        return w
    return 1.0 if cfg.model.name in BUILTIN_MODELS else 0.0


def warm_start_model(run: ResolvedRun | RunConfig, out, model_name: str | None = None, stop=None) -> dict:
    """Fine-tune the run's model on ``warmstart.episodes`` expert demos of its training envs and save it in ``out``
    (``run``: the resolved run; a ``RunConfig`` is resolved here).

    The model is built (or loaded) exactly as a run builds it, trained in float32, and saved as a plain Hugging Face
    folder with its tokenizer; returns the ``sft/*`` metrics. ``model_name`` replaces ``cfg.model.name`` (a folder the
    caller already built). ``stop``: see ``sft`` (the model so far is saved all the same).
    """
    from ragen.models.distributed import pick_device, set_threads
    from ragen.models.load import load_model_and_tokenizer, save_parser
    from ragen.rollout import ChatFormat

    run = as_resolved(run)
    cfg = run.cfg
    out, w = Path(out), warm_settings(cfg)
    device = pick_device(cfg.trainer.device)
    set_threads(cfg.trainer.threads)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(w.seed)
        model, tokenizer = load_model_and_tokenizer(model_name or cfg.model.name, out / "model-source",
                                                    list(run.env_names), dtype="float32", device=str(device),
                                                    attn_implementation=cfg.model.attn_implementation)
        fmt = ChatFormat(tokenizer, enable_think=run.thinks)
        demos = _run_demos(run, tokenizer, fmt)
        updates = w.epochs * max(1, round(len(demos.trajectories) / w.batch_size))
        opt = TorchOptimizer(model, lr=w.lr, weight_decay=cfg.trainer.weight_decay, grad_clip=cfg.trainer.grad_clip,
                             total_steps=updates)
        metrics = sft(opt, tokenizer, demos.trajectories, epochs=w.epochs, batch_size=w.batch_size,
                      micro_batch_size=cfg.trainer.micro_batch_size, seed=w.seed, chunk=cfg.trainer.logprob_chunk,
                      device=device, progress=cfg.logging.progress, stop=stop, prompt_weight=prompt_weight(cfg))
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    save_parser(out, cfg.rollout.parser, cfg.rollout.parser_options, cfg.rollout.prompt, cfg.rollout.max_context_window)
    shutil.rmtree(out / "model-source", ignore_errors=True)
    metrics.update({"sft/demo_success": demos.metrics.get("success", 0.0),
                    "sft/demos": float(len(demos.trajectories))})
    log.info("warmstart_done", **{k.split("/")[-1]: round(float(v), 4) for k, v in metrics.items()})
    return metrics
