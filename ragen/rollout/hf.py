"""``HFEngine``: the transformers rollout engine (batched ``model.generate`` on token ids, left padding).

* The attention mask is built from the prompt lengths, never from ids (the pad id may equal an EOS id).
* Sampling is exactly temperature / top-p (top-k, repetition penalty and other hub defaults are switched off: the
  model's own ``generation_config`` is set aside during the call).
* Log-probs are ``log_softmax(raw logits / temperature)`` at the sampled ids (temperature 1 when greedy), gathered
  step by step by a logits processor that sees the raw logits, so only one step of vocabulary-sized scores is kept
  per batch (``output_logits=True`` would keep all of them).
* Each continuation is cut after its first EOS id (inclusive); without one, ``finish_reason = 'length'``.
* ``seed`` makes a call reproducible: each chunk samples under ``torch.random.fork_rng`` seeded from it, so the
  global RNG is not disturbed.
* The module is put in eval mode for the call (no dropout) and back in its previous mode after.
* KV reuse across turns (``kv_reuse=True``): after each call the engine keeps, per row, the keys/values of the
  prompt and the sampled ids (all but the last, which was never fed). A later prompt that starts with such a sequence
  (the next turn: previous ids + sampled ids + the new message tokens) feeds only its new tokens. Rows are laid out
  ``[pad | cached | pad | new]``; positions come from the attention mask (``cumsum - 1``), so each row keeps the
  positions its cached keys were computed at. Entries not consumed by the next call are dropped (memory = one call's
  rows), and ``sync_weights`` clears them all: keys computed by old weights are never reused. A model with
  sliding-window layers (Gemma 3: a 512-token window on five layers of six) reuses keys only in calls whose layout
  and response fit in its window (``_attention_window``, ``_room``): past it those layers keep only their last window
  of keys, and the padding in the middle of a reused row would move keys across the window's edge; wider calls
  prefill in full, as without reuse.
* Decode paths (``decode=``): ``'plain'`` grows an eager cache (``_new_cache``) and runs the model eagerly, as above.
  ``'static'`` keeps the keys/values in transformers' ``StaticCache`` (fixed shapes, written in place), which is what
  lets ``generate`` run its decoding step through ``torch.compile`` (mode ``reduce-overhead``: CUDA graphs) - on CUDA
  only by default, transformers' own rule: CUDA graphs exist only on CUDA, and on a CPU inductor compiled the tiny
  model's step in 38-70 s and then decoded at about half the plain path's speed (docs/gpu.md). ``'static-eager'`` is
  the static cache without compilation (the reference that separates the two effects). Everything else is shared with
  the plain path: the same left-padded layout, the same logits processor, ``multinomial`` on the same tensors (so the
  same RNG draws), the same stop handling, and cross-turn KV reuse and shared prefills too (cached columns are written
  into the static buffer before the call). The trade-offs: the buffer is sized to the call's whole length rounded up
  to ``_STATIC_BUCKET`` tokens (attention reads every column, masked ones included), and one buffer is kept between
  calls and only grows (compiled graphs are specialised on shapes, and CUDA graphs on the addresses of the cache
  tensors, which transformers marks static: a fresh buffer per call would re-record the graphs every call, and after
  torch's ``cudagraph_unexpected_rerecord_limit`` (128) re-records run the step without graphs). So the static path
  holds up to ``_STATIC_KEPT`` caches (rows x layers x 2 x KV heads x length x head dim each) through the trainer's
  update, where the plain path frees its cache after each call: for the 0.49 B model of docs/gpu.md at 64 rows and
  1,024 columns that is 0.94 GB in bf16, for a 3 B model at 64 rows and 4,096 columns about 10 GB each.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence
from typing import Any

import torch

from ragen.errors import ConfigError
from ragen.rollout.context import stop_ids
from ragen.rollout.engine import Generation, SamplingParams, check_prompts, cut_at_stop


class _LogprobRecorder:
    """A logits processor (placed before every warper) gathering log π(sampled id) of each step."""

    def __init__(self, prompt_len: int, temperature: float):
        self.prompt_len = prompt_len
        self.temperature = temperature if temperature > 0 else 1.0
        self.prev: torch.Tensor | None = None
        self.values: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.prev is not None:  # input_ids now ends with the id sampled from the previous step's distribution
            self.values.append(self.prev.gather(1, input_ids[:, -1:]).squeeze(1))
        self.prev = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def finish(self, sequences: torch.Tensor) -> torch.Tensor:
        n = sequences.shape[1] - self.prompt_len
        if len(self.values) < n and self.prev is not None:
            # sequences come back on the CPU
            last = sequences[:, self.prompt_len + len(self.values)][:, None].to(self.prev.device)
            self.values.append(self.prev.gather(1, last).squeeze(1))
        if n <= 0:
            return torch.zeros(sequences.shape[0], 0)
        return torch.stack(self.values[:n], dim=1).cpu()


def _cache_name(model: Any) -> str:
    """The keyword a model's ``forward`` and ``generate`` take the KV cache by: transformers 5.2x renamed
    ``past_key_values`` to ``cache`` (the old name still works there, with a deprecation warning on every run). A
    LoRA-wrapped model's forward takes ``**kwargs``: its base model's says."""
    import inspect

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    try:
        return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"
    except (AttributeError, TypeError, ValueError):  # no inspectable forward: the name every version takes
        return "past_key_values"


def _output_cache(out: Any) -> Any:
    """The KV cache of a model or ``generate`` output under either name, read without the deprecated alias."""
    keys = out.keys() if hasattr(out, "keys") else ()
    return next((out[name] for name in ("cache", "past_key_values") if name in keys), None)


@functools.cache
def _growing_layer_class():
    """A ``DynamicLayer`` whose keys/values live in a preallocated buffer: each decoding step writes its new columns in
    place and attention reads a view of the filled part, where ``DynamicLayer`` concatenates (a copy of the whole cache,
    per layer, per token: quadratic in the turn's length). The buffer holds the prefill plus ``reserve`` tokens (the
    call's ``max_new_tokens``) and doubles if outgrown."""
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        def __init__(self, reserve: int):
            super().__init__()
            self.reserve, self._buf, self._n = int(reserve), None, 0

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            k = key_states.shape[-2]
            if self._buf is None or self.keys is not self._view[0]:  # first write, or the tensors were replaced
                held = (self.keys, self.values) if self.keys.dim() == 4 else None
                self._alloc(key_states, value_states, k + self.reserve, held)
            elif self._n + k > self._buf[0].shape[-2]:
                self._alloc(key_states, value_states, 2 * (self._n + k), (self.keys, self.values))
            n = self._n
            self._buf[0][:, :, n : n + k] = key_states
            self._buf[1][:, :, n : n + k] = value_states
            self._n = n + k
            self._view = (self._buf[0][:, :, : self._n], self._buf[1][:, :, : self._n])
            self.keys, self.values = self._view
            return self.keys, self.values

        def _alloc(self, ks: torch.Tensor, vs: torch.Tensor, extra: int, held) -> None:
            n = held[0].shape[-2] if held is not None else 0
            self._buf = tuple(t.new_empty((t.shape[0], t.shape[1], n + extra, t.shape[-1])) for t in (ks, vs))
            if held is not None:
                self._buf[0][:, :, :n] = held[0]
                self._buf[1][:, :, :n] = held[1]
            self._n = n

    return GrowingLayer


def _new_cache(config: Any, reserve: int, prefill: list | None = None):
    """An empty ``DynamicCache`` (or one holding ``prefill``'s per-layer (K, V)) whose full-attention layers grow in
    place (``_growing_layer_class``); sliding-window or other special layers keep transformers' own class."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    cache = DynamicCache(config=config)
    growing = _growing_layer_class()
    cache.layers = [growing(reserve) if type(layer) is DynamicLayer else layer for layer in cache.layers]
    for layer, (k, v) in zip(cache.layers, prefill or []):
        layer.update(k, v)
    return cache


def _attention_window(config: Any) -> int | None:
    """The smallest sliding window among the model's cache layers, None when every layer attends to the whole
    sequence (read from the cache transformers builds for the config: Gemma 3's ``layer_types``, Mistral's
    ``sliding_window``)."""
    from transformers import DynamicCache

    windows = [getattr(layer, "sliding_window", None) for layer in DynamicCache(config=config).layers]
    windows = [int(w) for w in windows if w]
    return min(windows) if windows else None


#: a static cache's length is the call's prompt width + max_new_tokens rounded up to this: fewer distinct shapes, so
#: fewer compilations, for at most this many masked columns of extra attention per step
_STATIC_BUCKET = 256
#: static caches kept at once (one per row count: a run's full chunks and its remainder, training and validation)
_STATIC_KEPT = 2
DECODE_PATHS = ("plain", "static", "static-eager")


class HFEngine:
    """Generation with a transformers causal LM; the trainer's module itself, so weights are always in sync."""

    def __init__(self, model: Any, tokenizer: Any, eos_token_ids: Sequence[int] | None = None, max_batch: int = 32,
                 kv_reuse: bool = True, share_prefill: bool = True, decode: str = "plain", compile_config: Any = None):
        if decode not in DECODE_PATHS:
            raise ConfigError(f"rollout.decode: expected one of {DECODE_PATHS}, got {decode!r}")
        self.model = model
        self.decode = decode
        # decode='static' only: a transformers CompileConfig for the decoding step; None = transformers' default
        # (reduce-overhead) on the devices transformers compiles for (CUDA, XPU), eager elsewhere. Tests pass one
        # with ``_compile_all_devices`` to trace the compiled step on a CPU.
        self.compile_config = compile_config
        self._static: dict = {}  # (rows, dtype, device) -> (length, StaticCache): buffers kept between calls
        self.tokenizer = tokenizer
        self.max_batch = max(1, int(max_batch))
        self.kv_reuse = kv_reuse
        self.share_prefill = share_prefill
        self._kv: dict[tuple[int, ...], list[tuple[torch.Tensor, torch.Tensor]]] = {}  # ids -> per-layer (k, v)
        self.kv_stats = {"prompt_tokens": 0, "reused_tokens": 0}
        self._window_of: tuple[Any, int | None] = (None, None)  # (config, its attention window), read once
        if eos_token_ids is None:
            eos_token_ids = stop_ids(tokenizer, model)
        self._eos = list(dict.fromkeys(int(i) for i in eos_token_ids))
        if not self._eos:
            raise ConfigError("the model has no EOS token id; pass eos_token_ids")
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_token_id = int(pad) if pad is not None else self._eos[0]

    @property
    def logprobs_exact(self) -> bool:
        """The sampling log-probs equal the trainer's forward on the same ids to fp32 rounding (about 1e-6): the
        trainer's own module, in float32. In bf16/fp16 incremental decoding and a full forward differ visibly."""
        return next(self.model.parameters()).dtype == torch.float32

    @property
    def eos_token_ids(self) -> list[int]:
        return list(self._eos)

    def sync_weights(self, model: Any) -> dict[str, float]:
        """HF shares the trainer's module: nothing to copy (swap the module if a different one is given), nothing to
        report. The weights changed, so no cached key/value may be reused."""
        self._kv.clear()
        if model is not None and model is not self.model:
            self.model = model
            self._static.clear()  # sized and typed for the old module's keys
        return {}

    def close(self) -> None:
        """Nothing to release: the module is the trainer's."""

    def generate_for_envs(self, envs: Sequence[Any], prompts: list[list[int]],
                          params: SamplingParams) -> list[Generation]:
        """The model answers from the prompts alone."""
        return self.generate(prompts, params)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        if not prompts:
            return []
        check_prompts(prompts)
        # longest first, so chunks hold similar lengths (less padding); results return in the caller's order
        order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
        out: list[Generation | None] = [None] * len(prompts)
        kept: dict = {}  # this call's rows replace the previous call's entries
        for c, start in enumerate(range(0, len(order), self.max_batch)):
            idx = order[start : start + self.max_batch]
            chunk_params = params.derive(c) if params.seed is not None else params
            for i, gen in zip(idx, self._generate_chunk([prompts[i] for i in idx], chunk_params, kept)):
                out[i] = gen
        self._kv = kept
        return out  # type: ignore[return-value]

    def _cached_prefix(self, prompt: list[int]) -> tuple[int, list | None]:
        """The longest kept sequence that is a proper prefix of ``prompt``: (its length, its per-layer k/v)."""
        best, entry = 0, None
        for key, kv in self._kv.items():
            n = len(key)
            if best < n < len(prompt) and tuple(prompt[:n]) == key:
                best, entry = n, kv
        return best, entry

    def _room(self, max_new_tokens: int) -> int | None:
        """The widest ``[pad | cached | pad | new]`` layout whose cached keys may be used in this call: None (any)
        unless the model has sliding-window layers, else what leaves the response cap inside the window (module
        doc). It bounds the layout's width, not the longest prompt: the padding between a row's cached and new
        tokens counts too, since those layers keep their last window of cache columns, padding included."""
        config = self.model.config
        if self._window_of[0] is not config:
            self._window_of = (config, _attention_window(config))
        window = self._window_of[1]
        return None if window is None else window - int(max_new_tokens) - 1

    def _layout(self, prompts: list[list[int]], reuse: bool = True, room: int | None = None):
        """Input ids, attention mask and (if any row starts from cached keys) the per-layer (K, V) of the cached part:
        ``[pad | cached | pad | new]``. Cached parts come from the previous call (KV reuse) or, for prompts that
        several rows share (a group's first turn), from one prefill of the shared prompt (``_shared_prefill``).
        ``reuse=False``, or a cached layout wider than ``room`` (``_room``): plain left padding, no cached part."""
        reuse = reuse and (room is None or max(map(len, prompts)) <= room)
        hits = [self._cached_prefix(p) if self.kv_reuse and reuse else (0, None) for p in prompts]
        reused = sum(n for n, _ in hits)  # across turns; shared prefills are counted apart
        if self.share_prefill and reuse:
            hits = self._shared_prefill(prompts, hits)
        if room is not None and max(n for n, _ in hits) + max(len(p) - n for p, (n, _) in zip(prompts, hits)) > room:
            hits, reused = [(0, None)] * len(prompts), 0
        self.kv_stats["reused_tokens"] += reused
        C = max(n for n, _ in hits)
        S = max(len(p) - n for p, (n, _) in zip(prompts, hits))
        width = C + S
        input_ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, (p, (n, _)) in enumerate(zip(prompts, hits)):
            input_ids[row, C - n : C] = torch.tensor(p[:n], dtype=torch.long)
            attention_mask[row, C - n : C] = 1
            input_ids[row, width - (len(p) - n) :] = torch.tensor(p[n:], dtype=torch.long)
            attention_mask[row, width - (len(p) - n) :] = 1
        self.kv_stats["prompt_tokens"] += sum(map(len, prompts))
        if C == 0:
            return input_ids, attention_mask, None
        first = next(kv for _, kv in hits if kv is not None)  # per layer (k, v): [kv_heads, n, head_dim]
        layers = []
        for layer, (k0, v0) in enumerate(first):
            K = k0.new_zeros((len(prompts), k0.shape[0], C, k0.shape[-1]))
            V = v0.new_zeros((len(prompts), v0.shape[0], C, v0.shape[-1]))
            for row, (n, kv) in enumerate(hits):
                if kv is not None:
                    K[row, :, C - n :] = kv[layer][0]
                    V[row, :, C - n :] = kv[layer][1]
            layers.append((K, V))
        return input_ids, attention_mask, layers

    @torch.no_grad()
    def _shared_prefill(self, prompts: list[list[int]], hits: list) -> list:
        """Rows with no cache hit whose prompt other rows of the chunk share (a group's members see one prompt) get
        the keys/values of that prompt but its last token from ONE forward pass per distinct prompt; ``_layout`` then
        feeds each row only the last token. The cached columns are the same keys a per-row prefill computes (up to
        float rounding), at the same positions."""
        rows: dict[tuple[int, ...], list[int]] = {}
        for r, (p, (n, _)) in enumerate(zip(prompts, hits)):
            if n == 0 and len(p) > 1:
                rows.setdefault(tuple(p[:-1]), []).append(r)
        shared = [key for key, rs in rows.items() if len(rs) > 1]
        if not shared:
            return hits
        width = max(map(len, shared))
        ids = torch.full((len(shared), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(shared), width), dtype=torch.long)
        for i, key in enumerate(shared):
            ids[i, width - len(key) :] = torch.tensor(key, dtype=torch.long)
            mask[i, width - len(key) :] = 1
        device = self.device
        was_training = bool(getattr(self.model, "training", False))
        try:
            self.model.eval()
            out = self.model(input_ids=ids.to(device), attention_mask=mask.to(device),
                             position_ids=(mask.cumsum(-1) - 1).clamp(min=0).to(device), use_cache=True)
        finally:
            self.model.train(was_training)
        kv = [(layer.keys, layer.values) for layer in _output_cache(out).layers]
        hits = list(hits)
        for i, key in enumerate(shared):
            entry = [(k[i][:, width - len(key) :], v[i][:, width - len(key) :]) for k, v in kv]
            for r in rows[key]:
                hits[r] = (len(key), entry)
        self.kv_stats["shared_prefill_tokens"] = self.kv_stats.get("shared_prefill_tokens", 0) + sum(
            len(key) * (len(rows[key]) - 1) for key in shared)
        return hits

    def _keep(self, prompts, gens, attention_mask: torch.Tensor, cache: Any, kept: dict) -> None:
        """Put into ``kept`` each row's keys/values of its prompt and all sampled ids but the last, for the next
        call."""
        if not self.kv_reuse or cache is None:
            return
        width = attention_mask.shape[1]
        kv = [(layer.keys, layer.values) for layer in cache.layers]
        if len({k.shape[-2] for k, _ in kv}) > 1:  # a sliding-window layer dropped its oldest keys: nothing to reuse
            return
        for row, (p, g) in enumerate(zip(prompts, gens)):
            n = len(g.token_ids)
            if n == 0:
                continue
            idx = torch.cat([attention_mask[row].nonzero().flatten(), width + torch.arange(n - 1)]).to(kv[0][0].device)
            kept[tuple(p) + tuple(g.token_ids[:-1])] = [(k[row][:, idx], v[row][:, idx]) for k, v in kv]

    @torch.no_grad()
    def _generate_chunk(self, prompts: list[list[int]], params: SamplingParams, kept: dict) -> list[Generation]:
        from transformers import GenerationConfig, LogitsProcessorList

        device = self.device
        # left padding (and cached rows, if any)
        input_ids, attention_mask, prefill = self._layout(prompts, room=self._room(params.max_new_tokens))
        width = input_ids.shape[1]
        cached = prefill[0][0].shape[-2] if prefill else 0
        if self.decode == "plain":
            past = _new_cache(self.model.config, width - cached + int(params.max_new_tokens), prefill)
        else:
            past = self._static_cache(len(prompts), width + int(params.max_new_tokens), prefill)
        greedy = params.temperature <= 0
        cfg = GenerationConfig(
            do_sample=not greedy,
            temperature=None if greedy else float(params.temperature),
            top_p=None if greedy else float(params.top_p),
            top_k=None if greedy else 0,
            max_new_tokens=int(params.max_new_tokens),
            eos_token_id=self._eos,
            pad_token_id=self.pad_token_id,
            repetition_penalty=1.0,
            return_dict_in_generate=True,
            use_cache=True,
            disable_compile=self.decode != "static",
            compile_config=self.compile_config if self.decode == "static" else None,
        )
        recorder = _LogprobRecorder(width, params.temperature)
        saved = getattr(self.model, "generation_config", None)
        was_training = bool(getattr(self.model, "training", False))
        rng = (torch.random.fork_rng(devices=[device] if device.type == "cuda" else []) if params.seed is not None
               else contextlib.nullcontext())
        try:
            self.model.eval()  # sampling never uses dropout; the trainer's mode is restored below
            self.model.generation_config = GenerationConfig(eos_token_id=self._eos, pad_token_id=self.pad_token_id)
            with rng:
                if params.seed is not None:
                    torch.manual_seed(params.seed)
                result = self.model.generate(
                    input_ids=input_ids.to(device),
                    attention_mask=attention_mask.to(device),
                    generation_config=cfg,
                    logits_processor=LogitsProcessorList([recorder]),
                    **{_cache_name(self.model): past},
                )
        finally:
            self.model.generation_config = saved
            self.model.train(was_training)
        sequences = result.sequences.cpu()
        logprobs = recorder.finish(sequences)
        new = sequences[:, width:].tolist()
        lps = logprobs.tolist()
        eos = set(self._eos)
        gens = [cut_at_stop(ids, lp, eos, params.max_new_tokens) for ids, lp in zip(new, lps)]
        self._keep(prompts, gens, attention_mask, _output_cache(result), kept)
        return gens

    def _static_cache(self, rows: int, length: int, prefill: list | None):
        """A kept ``StaticCache`` for ``rows`` rows reset for this call (a new one if none is kept for these rows,
        dtype and device, or it is too short), with ``prefill``'s per-layer (K, V) written at columns 0.. . Lengths
        only grow (bucketed), so a run's calls share one buffer per row count (a full chunk and the remainder): see the
        module doc for why."""
        from transformers import StaticCache

        param = next(self.model.parameters())
        length = -(-int(length) // _STATIC_BUCKET) * _STATIC_BUCKET
        key = (int(rows), param.dtype, param.device)
        held_len, cache = self._static.pop(key, (0, None))
        if cache is not None and held_len >= length:
            cache.reset()  # zeroes the buffers (masked columns must hold finite values) and the write positions
        else:
            length = max(length, held_len)
            cache = None  # the old buffer goes before the new one is allocated
            while len(self._static) >= _STATIC_KEPT:
                self._static.pop(next(iter(self._static)))
            cache = StaticCache(config=self.model.config, max_cache_len=length)  # allocated at its first write
        self._static[key] = (max(length, held_len), cache)  # most recently used last
        for layer, (k, v) in zip(cache.layers, prefill or []):
            layer.update(k.to(param.device), v.to(param.device))
        return cache
