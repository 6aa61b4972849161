"""Llama-architecture inference from a Hugging Face checkpoint directory.

    python examples/llama.py PATH --prompt-ids 1 15043 29892 --max-new-tokens 20
    python examples/llama.py PATH --prompt "Once upon a time" --temperature 0.8 --top-k 40

PATH holds `config.json` and `model.safetensors` (or sharded safetensors with an index) as
`transformers`' `save_pretrained` writes them; `--prompt` text needs a `tokenizer.json`
there too (read with the `tokenizers` package).

A checkpoint to try it with, written by tensorlite itself (random weights, 2 layers):

    python examples/llama.py /tmp/tiny-llama --write-random
    python examples/llama.py /tmp/tiny-llama --prompt-ids 1 2 3 --max-new-tokens 8

Real checkpoints of the LlamaForCausalLM architecture in safetensors load the same way, e.g.
`huggingface-cli download TinyLlama/TinyLlama-1.1B-Chat-v1.0 --local-dir tinyllama` (also
SmolLM2 and Llama 3.x: grouped-query attention, tied embeddings and llama3 rope scaling are
handled; tests/test_examples.py checks them on random checkpoints of those configurations
against transformers, no real checkpoint is downloaded in CI).

From Python:

    import llama                                   # examples/ on sys.path
    model = llama.load(PATH, device="cuda")
    logits = model([1, 15043, 29892])              # (seq, vocab) f32 Tensor; 2-D ids -> (b, seq, vocab)
    new_ids = llama.generate(model, [1, 15043], max_new_tokens=16, temperature=0.0)

The architecture, as in transformers' LlamaForCausalLM: token embedding; per layer
RMSNorm -> attention with half-split rotary position embedding (`F.rope`) and grouped-query
attention (fewer key/value heads than query heads) -> residual, RMSNorm -> SwiGLU MLP
(down(silu(gate(x)) * up(x)), F.silu_mul) -> residual; final RMSNorm; LM head (or the tied embedding).
Each RMSNorm runs inside the projection after it (`F.rms_norm_linear`) and each residual add
inside the projection before it (`tl.addmm`): for one row (a decode step) each is one GEMV
kernel on GPUs, SwiGLU's gate included.
Parameter names are those of the checkpoint, so its state dict loads as is.

Generation prefills the prompt once and then feeds one token per step, keeping every
layer's keys and values in a preallocated, static cache (`KVCache`): new keys are written
at their positions, and the queries attend over the whole cache with a mask that hides the
positions not yet written. Sampling runs on the device too, so on a GPU the decode step is
captured once as a graph (tl.graphs) and replayed: one launch per token. The model keeps that
state (`Decoder`: cache, graph) for the next generate() call of the same sizes.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # for common.py when run as a script
import tensorlite as tl  # noqa: E402
import tensorlite.nn.functional as F  # noqa: E402
from tensorlite import nn  # noqa: E402
from common import add_device_args, progress, resolve_device, token_ids, warm_up_kernels  # noqa: E402


# ---- configuration and rotary tables -----------------------------------------------------

def _rope_parameters(config: dict) -> dict:
    """rope_theta and scaling from either config style: transformers >= 5 writes a
    `rope_parameters` dict, older versions `rope_theta` plus an optional `rope_scaling`."""
    params = dict(config.get("rope_parameters") or {})
    params.update({k: v for k, v in (config.get("rope_scaling") or {}).items() if k not in params})
    params.setdefault("rope_theta", config.get("rope_theta", 10000.0))
    params["rope_type"] = params.get("rope_type", params.get("type", "default"))
    return params


def inverse_frequencies(config: dict, head_dim: int) -> np.ndarray:
    """Rotation frequency of each of the head_dim/2 pairs (float64), with the 'linear' and
    'llama3' scalings applied; other scalings are refused rather than silently ignored."""
    rope = _rope_parameters(config)
    inv_freq = 1.0 / rope["rope_theta"] ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    kind = rope["rope_type"]
    if kind == "default":
        return inv_freq
    if kind == "linear":  # positions divided by `factor` == frequencies divided by it
        return inv_freq / rope["factor"]
    if kind == "llama3":
        # Long wavelengths (beyond original_context / low_freq_factor) are slowed by `factor`,
        # short ones (below original_context / high_freq_factor) are kept, and the band in
        # between is interpolated linearly in context/wavelength.
        factor, low, high = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
        context = rope["original_max_position_embeddings"]
        wavelength = 2 * math.pi / inv_freq
        smooth = np.clip((context / wavelength - low) / (high - low), 0.0, 1.0)
        return (1 - smooth) * inv_freq / factor + smooth * inv_freq
    raise ValueError(f"llama: rope scaling {kind!r} is not supported (default, linear and llama3 are)")


def rope_tables(config: "LlamaConfig", start: int, length: int, device, dtype):
    """cos/sin (length, head_dim/2) for positions start..start+length-1 (angles in float64)."""
    angles = np.arange(start, start + length, dtype=np.float64)[:, None] * inverse_frequencies(config.raw,
                                                                                                config.head_dim)
    return tuple(tl.tensor(f(angles), device=device, dtype=dtype) for f in (np.cos, np.sin))


class LlamaConfig:
    def __init__(self, config: dict):
        if config.get("hidden_act", "silu") != "silu":
            raise ValueError(f"llama: hidden_act {config['hidden_act']!r} is not supported (silu is)")
        self.raw = config
        self.vocab_size = config["vocab_size"]
        self.hidden_size = config["hidden_size"]
        self.intermediate_size = config["intermediate_size"]
        self.num_layers = config["num_hidden_layers"]
        self.num_heads = config["num_attention_heads"]
        self.num_kv_heads = config.get("num_key_value_heads") or self.num_heads
        self.head_dim = config.get("head_dim") or self.hidden_size // self.num_heads
        self.rms_norm_eps = config.get("rms_norm_eps", 1e-6)
        self.attention_bias = config.get("attention_bias", False)
        self.mlp_bias = config.get("mlp_bias", False)
        self.tie_word_embeddings = config.get("tie_word_embeddings", False)
        self.max_position_embeddings = config.get("max_position_embeddings", 2048)
        self.eos_token_id = config.get("eos_token_id")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"llama: {self.num_heads} attention heads are not a multiple of "
                             f"{self.num_kv_heads} key/value heads")


# ---- the model --------------------------------------------------------------------------

class FusedLinears:
    """Linear layers that read one input, run as one GEMM: their parameters become views of
    one weight (and bias), so the checkpoint's names and state dict stay as they are. One
    launch instead of several, and a batch-1 product over the whole weight streams it at
    full bandwidth. Stale once a parameter is replaced (Module.to(), load_state_dict
    without assign): `current()` says so and the layers then run one by one."""

    def __init__(self, linears):
        self.linears = list(linears)
        with tl.no_grad():
            self.weight = tl.cat([m.weight for m in self.linears], 0)
            self.bias = tl.cat([m.bias for m in self.linears], 0) if self.linears[0].bias is not None else None
            start = 0
            for m in self.linears:
                n = m.weight.shape[0]
                m.weight.data = self.weight[start:start + n]
                if self.bias is not None:
                    m.bias.data = self.bias[start:start + n]
                start += n

    def current(self) -> bool:
        return all(m.weight._storage is self.weight._storage for m in self.linears)


def normed_linear(norm: nn.RMSNorm, x, weight, bias=None, gated: bool = False):
    """linear(norm(x), weight, bias); `gated`: silu(g) * u of its two halves (SwiGLU). weight may
    be an nn.Int8Linear (weight-only int8: its weight, scale and bias)."""
    if isinstance(weight, nn.Int8Linear):
        weight, bias, scale = weight.weight, weight.bias, weight.scale
        return F.rms_norm_linear(x, norm.normalized_shape, norm.weight, weight, bias, norm.eps, gated, scale=scale)
    return F.rms_norm_linear(x, norm.normalized_shape, norm.weight, weight, bias, norm.eps, gated)


def add_linear(x, y, linear: nn.Linear):
    """x + linear(y), the add in the product (tl.addmm) where the layer has no bias."""
    if isinstance(linear, nn.Int8Linear):
        return F.linear_int8(y, linear.weight, linear.scale, linear.bias, residual=x)
    if linear.bias is not None:
        return x + linear(y)
    rows = tl.addmm(x.reshape(-1, x.shape[-1]), y.reshape(-1, y.shape[-1]), linear.weight.mT)
    return rows.reshape(x.shape)


class KVCache:
    """Per-layer key/value buffers (b, kv_heads, capacity, head_dim), filled left to right,
    and the rotary tables of every position up to the capacity.

    Static, so a decode step can be captured as a graph and replayed (tl.graphs): the
    buffers never move, and the next position is a device tensor (`pos`) that the step
    itself advances. New keys (rotated) and values are written at their positions by
    F.rope_kv_cache, which also rotates the queries (one kernel on GPUs), and the queries
    attend over the whole capacity with a mask hiding the positions not yet written. Run
    eagerly, the positions are uploaded from the host's count (`length`), so the cache write
    knows them in range and never waits for the device."""

    def __init__(self, config: LlamaConfig, batch: int, capacity: int, device, dtype):
        shape = (batch, config.num_kv_heads, capacity, config.head_dim)
        self.keys = [tl.zeros(shape, device=device, dtype=dtype) for _ in range(config.num_layers)]
        self.values = [tl.zeros(shape, device=device, dtype=dtype) for _ in range(config.num_layers)]
        self.capacity, self.device = capacity, device
        self.length = 0                                       # positions filled, as the host counts them
        self.pos = tl.zeros(1, dtype=tl.int64, device=device)  # the same count on the device
        self._arange = tl.arange(capacity, device=device)
        self.cos, self.sin = rope_tables(config, 0, capacity, device, dtype)

    def positions(self, t: int) -> tl.Tensor:
        """The positions (t,) of the next t tokens: from the device count while a graph is
        being captured (a replay must read the count of its own time), else from the host's."""
        if self.length + t > self.capacity:
            raise ValueError(f"KVCache: {self.length + t} positions exceed the capacity of {self.capacity}")
        if tl.graphs.is_capturing(self.device):
            return self.pos + self._arange[:t]
        return tl.tensor(np.arange(self.length, self.length + t), device=self.device)

    def reset(self) -> None:
        """Empty: the next tokens start at position 0 (the old keys and values are masked out)."""
        self.length = 0
        self.pos.zero_()

    def advance(self, t: int) -> None:
        self.pos += t
        self.length += t

    def write(self, layer: int, positions: tl.Tensor, qkv: tl.Tensor, cos: tl.Tensor, sin: tl.Tensor):
        """Rotate one layer's new queries and keys, write the keys and values at `positions`
        (qkv: (b, heads + 2*kv_heads, t, head_dim)); return the queries and the layer's whole
        key and value buffers."""
        q = F.rope_kv_cache(qkv, cos, sin, self.keys[layer], self.values[layer], positions)
        return q, self.keys[layer], self.values[layer]


class Attention(nn.Module):
    def __init__(self, c: LlamaConfig, layer: int):
        super().__init__()
        self.layer, self.c = layer, c
        self.q_proj = nn.Linear(c.hidden_size, c.num_heads * c.head_dim, bias=c.attention_bias)
        self.k_proj = nn.Linear(c.hidden_size, c.num_kv_heads * c.head_dim, bias=c.attention_bias)
        self.v_proj = nn.Linear(c.hidden_size, c.num_kv_heads * c.head_dim, bias=c.attention_bias)
        self.o_proj = nn.Linear(c.num_heads * c.head_dim, c.hidden_size, bias=c.attention_bias)
        self.qkv = None  # FusedLinears of q/k/v_proj (Llama.fuse_projections)
        self.qkv_int8 = None  # nn.Int8Linear of q/k/v_proj's weights side by side (Llama.quantize_int8)

    def forward(self, x, norm: nn.RMSNorm, cos, sin, cache: KVCache = None, positions=None, mask=None):
        """x + o_proj(attention(norm(x))): the residual stream x after this block."""
        b, t, _ = x.shape
        c = self.c

        def heads(y, n):  # (b, t, n*hd) -> (b, n, t, hd)
            return y.reshape(b, t, n, c.head_dim).transpose(1, 2)
        # q, k and v side by side (one GEMM when fused), so q and k take one rotary launch,
        # with the cache write in it where there is a cache
        if self.qkv_int8 is not None:
            y = normed_linear(norm, x, self.qkv_int8)
        elif self.qkv is not None and self.qkv.current():
            y = normed_linear(norm, x, self.qkv.weight, self.qkv.bias)
        else:
            h = norm(x)
            y = tl.cat([self.q_proj(h), self.k_proj(h), self.v_proj(h)], -1)
        if cache is not None:
            q, k, v = cache.write(self.layer, positions, heads(y, c.num_heads + 2 * c.num_kv_heads), cos, sin)
        else:
            qk_width = (c.num_heads + c.num_kv_heads) * c.head_dim
            qk = F.rope(heads(y[..., :qk_width], c.num_heads + c.num_kv_heads), cos, sin)
            q, k, v = qk[:, :c.num_heads], qk[:, c.num_heads:], heads(y[..., qk_width:], c.num_kv_heads)
        # GQA: sdpa maps query head h to kv head h // (num_heads / num_kv_heads)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None)
        return add_linear(x, out.transpose(1, 2).reshape(b, t, c.num_heads * c.head_dim), self.o_proj)


class MLP(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=c.mlp_bias)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=c.mlp_bias)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=c.mlp_bias)
        self.gate_up = None  # FusedLinears of gate/up_proj (Llama.fuse_projections)
        self.gate_up_int8 = None  # nn.Int8Linear of gate/up_proj's weights (Llama.quantize_int8)

    def forward(self, x, norm: nn.RMSNorm):
        """x + down(silu(gate(norm(x))) * up(norm(x))): the residual stream after this block."""
        if self.gate_up_int8 is not None:
            act = normed_linear(norm, x, self.gate_up_int8, gated=True)
        elif self.gate_up is not None and self.gate_up.current():
            act = normed_linear(norm, x, self.gate_up.weight, self.gate_up.bias, gated=True)
        else:
            h = norm(x)
            act = F.silu_mul(self.gate_proj(h), self.up_proj(h))  # silu(gate) * up, one kernel
        return add_linear(x, act, self.down_proj)


class DecoderLayer(nn.Module):
    def __init__(self, c: LlamaConfig, layer: int):
        super().__init__()
        self.input_layernorm = nn.RMSNorm(c.hidden_size, eps=c.rms_norm_eps)
        self.self_attn = Attention(c, layer)
        self.post_attention_layernorm = nn.RMSNorm(c.hidden_size, eps=c.rms_norm_eps)
        self.mlp = MLP(c)

    def forward(self, x, cos, sin, cache=None, positions=None, mask=None):
        """The residual stream x after the layer's two blocks, each of which runs its norm
        (the layer's) inside its first projection and its residual add inside its last."""
        x = self.self_attn(x, self.input_layernorm, cos, sin, cache, positions, mask)
        return self.mlp(x, self.post_attention_layernorm)


class LlamaModel(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList([DecoderLayer(c, i) for i in range(c.num_layers)])
        self.norm = nn.RMSNorm(c.hidden_size, eps=c.rms_norm_eps)


class Llama(nn.Module):
    """LlamaForCausalLM's structure (so parameter names match the checkpoint's)."""

    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.config = c
        self.model = LlamaModel(c)
        self.lm_head = None if c.tie_word_embeddings else nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        self._rope = None  # (device, dtype, cos, sin): rotary tables of positions 0.., see rope()

    def rope(self, length: int, device, dtype):
        """cos/sin of positions 0..length-1 for a forward without a cache: views of tables kept
        for the last device and dtype, computed again (on the host, in float64) only when a
        longer sequence comes, for the next power of two of positions."""
        kept = self._rope
        if kept is None or kept[:2] != (str(device), dtype) or kept[2].shape[0] < length:
            size = 1 << max(8, (length - 1).bit_length())
            self._rope = kept = (str(device), dtype) + rope_tables(self.config, 0, size, device, dtype)
        return kept[2][:length], kept[3][:length]

    def fuse_projections(self) -> "Llama":
        """Run q/k/v_proj and gate/up_proj as one GEMM each (FusedLinears), for inference; with
        the norm before each (and SwiGLU's gate after gate/up) one GEMV for a decode row."""
        for layer in self.model.layers:
            a, m = layer.self_attn, layer.mlp
            a.qkv = FusedLinears([a.q_proj, a.k_proj, a.v_proj])
            m.gate_up = FusedLinears([m.gate_proj, m.up_proj])
        return self

    def quantize_int8(self) -> "Llama":
        """Weight-only int8 for decoding (tl.quantize_weights' scheme): every projection and an untied
        LM head as nn.Int8Linear, q/k/v and gate/up each one layer of their weights side by side
        (a step then streams half the bytes of bf16 weights); the float weights are dropped, so
        the model is for inference only. Each norm runs inside the product after it, as in bf16."""
        def stacked(linears):
            weight = tl.cat([m.weight for m in linears], 0)
            bias = tl.cat([m.bias for m in linears], 0) if linears[0].bias is not None else None
            q, scale = F.quantize_per_channel_int8(weight)
            return nn.Int8Linear(weight.shape[1], weight.shape[0], q, scale, bias)
        with tl.no_grad():
            for layer in self.model.layers:
                a, m = layer.self_attn, layer.mlp
                a.qkv_int8, a.qkv = stacked([a.q_proj, a.k_proj, a.v_proj]), None
                m.gate_up_int8, m.gate_up = stacked([m.gate_proj, m.up_proj]), None
                a.q_proj = a.k_proj = a.v_proj = m.gate_proj = m.up_proj = None
                a.o_proj, m.down_proj = stacked([a.o_proj]), stacked([m.down_proj])
            if self.lm_head is not None:
                self.lm_head = stacked([self.lm_head])
        return self

    def forward(self, tokens, cache: KVCache = None, logits_to_keep: int = 0):
        """Logits (b, t, vocab), or (t, vocab) for 1-D ids, as float32. With a cache, the
        tokens continue the cached positions and the cache is extended by them.
        `logits_to_keep` (transformers' argument): the logits of only the last that many
        positions (0: all), so a step that samples the next token skips the LM head elsewhere."""
        emb = self.model.embed_tokens.weight
        ids = token_ids(tokens, emb.device)
        squeeze = ids.ndim == 1
        if squeeze:
            ids = ids.unsqueeze(0)
        if ids.ndim != 2:
            raise ValueError(f"llama: token ids must be 1-D or 2-D, got shape {tuple(ids.shape)}")
        if not isinstance(logits_to_keep, int) or logits_to_keep < 0:
            raise ValueError(f"llama: logits_to_keep must be an int >= 0, got {logits_to_keep!r}")
        t = ids.shape[1]
        positions = mask = None
        if cache is None:
            cos, sin = self.rope(t, emb.device, emb.dtype)
        else:  # query i at positions[i] sees the keys at positions up to its own
            positions = cache.positions(t)
            cos, sin = cache.cos.index_select(0, positions), cache.sin.index_select(0, positions)
            mask = cache._arange[None, :] <= positions[:, None]
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin, cache, positions, mask)
        if cache is not None:
            cache.advance(t)
        if 0 < logits_to_keep < t:
            x = x[:, t - logits_to_keep:]
        head = emb if self.lm_head is None else self.lm_head if isinstance(self.lm_head, nn.Int8Linear) else \
            self.lm_head.weight
        logits = normed_linear(self.model.norm, x, head).float()
        return logits.squeeze(0) if squeeze else logits


def load(path, device="cpu", dtype=None, int8: bool = False) -> Llama:
    """A Llama from a Hugging Face checkpoint directory, on `device` (dtype: keep the
    checkpoint's, or e.g. 'f32', 'bf16'); int8: weight-only int8 projections (quantize_int8)."""
    config, state = tl.load_hf_checkpoint(path, device="cpu", dtype=dtype)
    c = LlamaConfig(config)
    model = Llama(c)
    if c.tie_word_embeddings:  # save_pretrained drops the tied copy; tolerate either
        state.pop("lm_head.weight", None)
    # HF keeps non-persistent buffers out of checkpoints, but older ones carry rotary tables
    state = {k: v for k, v in state.items() if not k.endswith("rotary_emb.inv_freq")}
    model.load_state_dict(state, assign=True)  # assign: keep the checkpoint's (or requested) dtype
    model = model.requires_grad_(False).eval().to(device)
    return model.quantize_int8() if int8 else model.fuse_projections()


def write_random_checkpoint(path, hidden_size=64, layers=2, heads=4, kv_heads=2, vocab_size=256, seed=0) -> None:
    """A small Llama with random weights saved as `save_pretrained` would (config.json +
    model.safetensors in the directory `path`), for trying the example without a download."""
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden_size,
              "intermediate_size": 2 * hidden_size, "num_hidden_layers": layers, "num_attention_heads": heads,
              "num_key_value_heads": kv_heads, "vocab_size": vocab_size, "rms_norm_eps": 1e-5,
              "rope_theta": 10000.0, "max_position_embeddings": 2048, "tie_word_embeddings": False,
              "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"}
    tl.manual_seed(seed)
    model = Llama(LlamaConfig(config))
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    tl.save_safetensors(model.state_dict(), os.path.join(path, "model.safetensors"), metadata={"format": "pt"})


# ---- generation ---------------------------------------------------------------------------

def sample(logits: tl.Tensor, temperature: float = 0.0, top_k=None, uniform: tl.Tensor = None) -> tl.Tensor:
    """(b, vocab) logits -> (b,) int64 ids, on the device: the argmax when temperature is 0,
    else a sample of softmax(logits / temperature) restricted to the top_k largest, drawn
    with the Gumbel-max trick from `uniform`, (b, vocab) noise in [0, 1) (argmax of scores
    plus -log(-log(u)) is distributed as the softmax of the scores)."""
    if temperature <= 0.0:
        return logits.argmax(-1)
    scores = logits / temperature
    if top_k is not None and top_k < scores.shape[-1]:
        kth = scores.topk(top_k, -1)[0][:, -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    u = uniform.clamp(1e-20, 1.0 - 2.0 ** -24)  # keeps both logs finite
    return (scores - (-u.log()).log()).argmax(-1)


class Decoder:
    """generate()'s device state for one batch size, capacity (prompt + new tokens) and sampling
    setting: the static KV cache, the generated ids by position, the newest token of each row
    (the next step's input), the sampling noise, and the decode step captured as a graph once
    its kernels have run; likewise the prompt's step for the last prompt length (its ids copied
    into `prompt_ids`), captured on the second call of that length. A model keeps the Decoder of
    its last generate() call (`model.decoder`), so a later call with the same sizes replays
    those graphs from its first step instead of running eager steps and capturing again;
    `model.decoder = None` frees it (the graphs' memory included)."""

    def __init__(self, model: Llama, batch: int, capacity: int, temperature: float, top_k):
        emb = model.model.embed_tokens.weight
        self.model, self.temperature, self.top_k = model, temperature, top_k
        self.key = self.key_of(model, batch, capacity, temperature, top_k)
        self.cache = KVCache(model.config, batch, capacity, emb.device, emb.dtype)
        self.history = tl.zeros(batch, capacity, dtype=tl.int64, device=emb.device)
        self.last = tl.zeros(batch, 1, dtype=tl.int64, device=emb.device)
        self.uniform = tl.zeros(batch, model.config.vocab_size, device=emb.device) if temperature > 0 else None
        self.graph = None
        self.prompt_ids, self.prompt_graph = None, None

    @staticmethod
    def key_of(model: Llama, batch: int, capacity: int, temperature: float, top_k) -> tuple:
        """What a captured step depends on besides the data it reads: the sizes, the sampling
        setting, and where the weights are (a graph reads them in place: a parameter replaced
        by another tensor needs a new capture, one changed in place does not)."""
        return (batch, capacity, temperature, top_k, tuple(p.data_ptr() for p in model.parameters()))

    def step(self, inputs) -> None:
        """Forward `inputs` (b, t) through the cache, sample the next token of every row, keep it."""
        logits = self.model(inputs, self.cache, logits_to_keep=1)[:, -1]
        nxt = sample(logits, self.temperature, self.top_k, self.uniform)[:, None]
        self.last.copy_(nxt)
        self.history.index_copy_(1, self.cache.positions(1), nxt)

    def prompt(self, ids: tl.Tensor, graph: bool) -> None:
        """step() over the prompt ids (b, t). With `graph`, the first call of a prompt length runs
        eagerly (its kernels compile), the second captures the step and every later one replays
        it: one launch for the prompt instead of one per op."""
        if not graph:
            return self.step(ids)
        t = ids.shape[1]
        if self.prompt_ids is None or self.prompt_ids.shape != ids.shape:
            self.prompt_ids, self.prompt_graph = ids.clone(), None
            return self.step(self.prompt_ids)
        self.prompt_ids.copy_(ids)
        if self.prompt_graph is None:
            captured = tl.graphs.Graph()
            with tl.graphs.graph(captured, device=ids.device):
                self.step(self.prompt_ids)
            self.prompt_graph = captured
            self.cache.length -= t  # the capture ran nothing: the replay below makes this step
        self.prompt_graph.replay()
        self.cache.length += t  # the replay advanced the device's count

    def draw(self) -> None:
        """Fresh noise for a sampling step, outside any graph (a replay would repeat captured noise)."""
        if self.uniform is not None:
            self.uniform.copy_(tl.rand(*self.uniform.shape, device=self.uniform.device))


@tl.no_grad()
def generate(model: Llama, tokens, max_new_tokens: int, temperature: float = 0.0, top_k=None,
             seed=None, eos_token_id=None, show_progress: bool = False, graph=None) -> np.ndarray:
    """The new token ids (max_new_tokens,) for 1-D tokens or (b, max_new_tokens) for 2-D,
    as an int64 numpy array. Decoding stops early once every row has produced an end token
    (eos_token_id: an id or a list of ids, as config.json may give), and the result ends
    there; rows that finished earlier are padded with their end token.

    Every step stays on the device: the cache is static (KVCache), sampling runs there
    (sample(); `seed` seeds the device generator, tl.manual_seed), and the host reads the
    new tokens only every EOS_CHECK steps, to see whether every row has ended (never, when no
    end token is given, until the last step). On GPUs (`graph=None`; True/False to choose)
    the decode step is captured once as a graph and replayed, so a token costs one launch
    instead of one per op, and so is the prompt's step from the second call with its length on;
    the graphs stay with the model (Decoder) for the next call of the same sizes."""
    device = model.model.embed_tokens.weight.device
    ids = token_ids(tokens, device)
    squeeze = ids.ndim == 1
    if squeeze:
        ids = ids.unsqueeze(0)
    batch, prompt_len = ids.shape
    if seed is not None:
        tl.manual_seed(seed)
    use_graph = tl.backend.get_device(device).name != "cpu" if graph is None else graph
    capacity = prompt_len + max_new_tokens
    dec = getattr(model, "decoder", None)
    if dec is None or dec.key != Decoder.key_of(model, batch, capacity, temperature, top_k):
        model.decoder = None  # the old state's memory goes before the new one's is taken
        dec = model.decoder = Decoder(model, batch, capacity, temperature, top_k)
    dec.cache.reset()  # the graph reads the device's count of positions
    end_ids = np.atleast_1d(np.asarray([] if eos_token_id is None else eos_token_id, dtype=np.int64))

    def ended(n):  # whether every row's first n new tokens hold an end token (a host read, if any end id)
        if not end_ids.size:
            return False
        new = dec.history[:, prompt_len:prompt_len + n].numpy()
        return bool(np.isin(new, end_ids).any(axis=1).all())

    bar = progress(total=max_new_tokens, desc="generate", unit="tok", disable=not show_progress)
    dec.draw()
    dec.prompt(ids, use_graph)  # the prompt, and the first new token
    done, eager_steps = 1, 0
    bar.update()
    while done < max_new_tokens and not (done % EOS_CHECK == 0 and ended(done)):
        dec.draw()
        if use_graph and dec.graph is None and eager_steps >= 1:  # the step's kernels ran once: capture it
            captured = tl.graphs.Graph()
            with tl.graphs.graph(captured, device=device):
                dec.step(dec.last)
            dec.graph = captured
            dec.cache.length -= 1  # the capture ran nothing: the replay below makes this step
        if use_graph and dec.graph is not None:
            dec.graph.replay()
            dec.cache.length += 1  # the replay advanced the device's count
        else:
            dec.step(dec.last)
            eager_steps += 1
        done += 1
        bar.update()
    if done < max_new_tokens:
        bar.stop_early()
    bar.close()
    out = dec.history[:, prompt_len:prompt_len + done].numpy()
    lengths = []
    for row in out:  # a row that ended repeats its end token from there on
        hit = np.flatnonzero(np.isin(row, end_ids))
        if hit.size:
            row[hit[0]:] = row[hit[0]]
        lengths.append(hit[0] + 1 if hit.size else done)
    out = out[:, :max(lengths)]  # decoding ends where the last row ended (steps run past it are dropped)
    return out[0] if squeeze else out


EOS_CHECK = 16  # generate() reads the new tokens back every this many steps


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("path", help="Hugging Face checkpoint directory (config.json + model.safetensors)")
    prompt = p.add_mutually_exclusive_group(required=True)
    prompt.add_argument("--prompt-ids", type=int, nargs="+", help="prompt as token ids")
    prompt.add_argument("--prompt", help="prompt text (needs tokenizer.json in PATH)")
    prompt.add_argument("--write-random", action="store_true",
                        help="write a small random checkpoint to PATH (for trying the example) and exit")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--int8", action="store_true", help="weight-only int8 projections (half the bytes per token)")
    add_device_args(p, dtypes=("auto", "f32", "bf16", "f16"))
    args = p.parse_args(argv)
    if args.write_random:
        write_random_checkpoint(args.path)
        print(f"random checkpoint written to {args.path}")
        return 0

    device = resolve_device(args.device)
    warm_up_kernels(device)
    try:
        model = load(args.path, device=device, dtype=None if args.dtype == "auto" else args.dtype, int8=args.int8)
    except (FileNotFoundError, tl.FormatError) as e:  # a user's mistake: one line, not a traceback
        sys.exit(f"llama.py: {e}\n(a Hugging Face Llama checkpoint directory: config.json + model.safetensors; "
                 f"to try the example, write a small random one: python examples/llama.py {args.path} --write-random)")
    tokenizer = None
    tokenizer_path = os.path.join(args.path, "tokenizer.json")
    if os.path.isfile(tokenizer_path):
        from tokenizers import Tokenizer
        tokenizer = Tokenizer.from_file(tokenizer_path)
    if args.prompt is not None:
        if tokenizer is None:
            sys.exit(f"--prompt needs {tokenizer_path}; pass --prompt-ids instead")
        ids = tokenizer.encode(args.prompt).ids
    else:
        ids = args.prompt_ids
    new_ids = generate(model, ids, args.max_new_tokens, args.temperature, args.top_k, seed=args.seed,
                       eos_token_id=model.config.eos_token_id, show_progress=True)
    print("prompt ids:", list(ids))
    print("new ids:   ", new_ids.tolist())
    if tokenizer is not None:
        print("text:", tokenizer.decode(list(ids) + new_ids.tolist()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
