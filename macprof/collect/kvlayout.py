"""The attention memory layout (macprof.measure.kvmodel) of a model, from its GGUF header or its
MLX config.json, as the engine that runs it lays its caches out:

GGUF, as llama.cpp (src/llama-hparams.cpp, src/models/*.cpp): K and V of n_head_kv(il) x
key_length and value_length per layer; sliding-window layers from
``<arch>.attention.sliding_window`` and ``sliding_window_pattern`` (a per-layer bool array, or
n: layer il is sliding when il % n < n - 1, 0 meaning all), with each architecture's default
pattern; MLA (``attention.key_length_mla`` present): one latent of key_length =
kv_lora_rank + rope dims per layer, V a view of it; recurrent layers (n_head_kv(il) = 0 in
hybrids, ``attention.recurrent_layers`` or ``full_attention_interval`` in qwen3next) hold
n_embd_r + n_embd_s f32 values: LFM2 n_embd x (l_cache - 1); SSM / gated delta net
(d_conv - 1) x (d_inner + 2 n_group d_state) + d_state x d_inner; RWKV (``wkv.head_size`` set)
token_shift_count (default 2) x n_embd + n_embd x wkv head size. The purely recurrent
architectures (llm_arch_is_recurrent: mamba, mamba2, rwkv6, rwkv6qwen2, rwkv7, arwkv7) keep
that state in every layer and nothing per position, so their kv(c) is a constant.

MLX, as mlx-lm's models/*.py make_cache: KVCache (all positions), RotatingKVCache (the window),
the MLA latent and rope key (deepseek_v2/v3), ArraysCache for recurrent layers (conv state in
the activations' dtype, gated-delta state in float32).

An architecture not listed here gets an unknown layout with the reason: never a guess.
"""

from __future__ import annotations

from typing import Any, Callable

from macprof.measure.kvmodel import KvGroup, KvLayout

F32, ACT = 4, 2  # llama.cpp keeps recurrent state in f32; mlx-lm's conv state is in bf16/f16 activations

# llama.cpp architectures whose loader reads no sliding window and marks no layer recurrent
GGUF_FULL = frozenset("""llama qwen2 qwen2moe qwen3 qwen3moe gemma starcoder2 granite granitemoe command-r
internlm2 stablelm smollm3 deepseek mistral3 olmo olmoe ernie4_5 ernie4_5-moe glm4 glm4moe exaone dbrx
seed_oss minicpm baichuan gpt2 gptneox bitnet deepseek2""".split()) | {"macprof-fake"}  # engines/fake.py: full K/V
# arch -> (load_swa_pattern's default n, default window when the key is absent)
GGUF_SWA = {"gemma2": (2, 4096), "gemma3": (6, 0), "gemma-embedding": (6, 0), "gpt-oss": (2, 0),
            "cohere2": (4, 0), "olmo2": (4, 0), "exaone4": (4, 0)}
GGUF_HYBRID_KVH0 = frozenset({"lfm2", "lfm2moe", "granitehybrid", "jamba"})  # n_head_kv(il) == 0: recurrent
# llama-arch.cpp llm_arch_is_recurrent: one llama_memory_recurrent, no K/V cache at all
GGUF_RECURRENT_ONLY = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
RWKV_TOKEN_SHIFT = 2  # llama_hparams::token_shift_count's default when the header has no key

# keys (after "<arch>.") the layout reads; the header reader keeps these arrays
GGUF_KEYS = ("attention.head_count_kv", "attention.key_length", "attention.value_length",
             "attention.sliding_window", "attention.sliding_window_pattern", "attention.key_length_mla",
             "attention.kv_lora_rank", "attention.recurrent_layers", "full_attention_interval",
             "shortconv.l_cache", "ssm.conv_kernel", "ssm.inner_size", "ssm.state_size", "ssm.group_count",
             "rope.dimension_count", "wkv.head_size", "token_shift_count")


def _per_layer(value: Any, n: int) -> list[int] | None:
    if value is None:
        return None
    if isinstance(value, tuple):
        return list(value) if len(value) == n else None
    return [value] * n


def gguf_layout(raw: Callable[[str], Any], arch: str | None, n_layers: int | None, n_embd: int | None,
                n_heads: int | None, elem: float, kv_type: str) -> KvLayout:
    """``raw(key)`` gives "<arch>.<key>"'s integer, tuple of per-layer values, or None."""
    if not arch or not n_layers:
        return KvLayout.unknown("no architecture or block count in the GGUF header", kv_type)
    known = arch in GGUF_FULL or arch in GGUF_SWA or arch in GGUF_HYBRID_KVH0 or arch in GGUF_RECURRENT_ONLY \
        or arch == "qwen3next"
    if not known:
        return KvLayout.unknown(f"architecture '{arch}': macprof does not know how llama.cpp lays out its "
                                f"attention cache (sliding windows, recurrent layers)", kv_type)
    kvh = _per_layer(raw("attention.head_count_kv") or n_heads, n_layers)
    head = n_embd // n_heads if n_embd and n_heads else None
    dk = raw("attention.key_length") or head
    dv = raw("attention.value_length") or dk
    if arch in GGUF_RECURRENT_ONLY:
        recurrent = [True] * n_layers
    elif arch == "qwen3next":
        flags = _per_layer(raw("attention.recurrent_layers"), n_layers)
        interval = raw("full_attention_interval") or 4
        recurrent = [bool(f) for f in flags] if flags else [(i + 1) % interval != 0 for i in range(n_layers)]
    elif arch in GGUF_HYBRID_KVH0:
        recurrent = [h == 0 for h in kvh] if kvh else [False] * n_layers
    else:
        recurrent = [False] * n_layers
    if kvh is None or not dk or not dv:
        if not all(recurrent):
            return KvLayout.unknown("the GGUF header gives no per-layer KV heads or head size", kv_type)
    sliding, window = _gguf_sliding(raw, arch, n_layers, recurrent)
    if isinstance(sliding, str):
        return KvLayout.unknown(sliding, kv_type)
    groups: list[KvGroup] = []
    if any(recurrent):
        state = _gguf_state(raw, n_embd)
        if isinstance(state, str):
            return KvLayout.unknown(state, kv_type)
        groups.append(KvGroup("state", sum(recurrent), state_bytes=state))
    mla = raw("attention.key_length_mla") is not None
    per: dict[tuple[str, float], int] = {}
    for il in range(n_layers):
        if recurrent[il]:
            continue
        assert kvh is not None and dk and dv
        # MLA: K holds the latent (kv_lora_rank + rope dims) and V is a view of it
        elems = kvh[il] * dk if mla else kvh[il] * (dk + dv)
        kind = "latent" if mla else "sliding" if sliding[il] else "full"
        per[(kind, elems * elem)] = per.get((kind, elems * elem), 0) + 1
    for (kind, bytes_), layers in per.items():
        groups.append(KvGroup(kind, layers, bytes_, window if kind == "sliding" else None))
    return KvLayout(tuple(groups), kv_type)


def _gguf_sliding(raw, arch: str, n_layers: int, recurrent: list[bool]) -> tuple[list[bool] | str, int | None]:
    """Which layers slide, and the window; a string where the header cannot say."""
    window = raw("attention.sliding_window")
    if arch in ("lfm2", "lfm2moe"):  # every attention layer slides when a window is given
        return ([not r for r in recurrent] if window else [False] * n_layers), window
    if arch not in GGUF_SWA:
        return [False] * n_layers, None
    n, default = GGUF_SWA[arch]
    window = window if window is not None else default
    if not window:
        return [False] * n_layers, None
    pattern = raw("attention.sliding_window_pattern")
    if isinstance(pattern, tuple):
        if len(pattern) != n_layers:
            return f"{arch}.attention.sliding_window_pattern has {len(pattern)} entries for {n_layers} layers", None
        return [bool(p) for p in pattern], window
    n = pattern if pattern is not None else n
    return [n == 0 or il % n < n - 1 for il in range(n_layers)], window


def _gguf_state(raw, n_embd: int | None) -> float | str:
    """Bytes of one recurrent layer's state (llama_hparams::n_embd_r + n_embd_s, f32)."""
    wkv = raw("wkv.head_size")
    if wkv:  # RWKV: the token-shift rows and the wkv state (n_embd_r and n_embd_s check it first)
        if not n_embd:
            return "RWKV header without embedding_length"
        shift = raw("token_shift_count")
        return ((RWKV_TOKEN_SHIFT if shift is None else shift) * n_embd + n_embd * wkv) * F32
    l_cache = raw("shortconv.l_cache")
    if l_cache and n_embd:
        return n_embd * (l_cache - 1) * F32
    d_conv, d_inner, d_state = raw("ssm.conv_kernel"), raw("ssm.inner_size"), raw("ssm.state_size")
    if d_conv and d_inner and d_state:
        n_group = raw("ssm.group_count") or 0
        return ((d_conv - 1) * (d_inner + 2 * n_group * d_state) + d_state * d_inner) * F32
    return "recurrent layers without shortconv.l_cache, ssm.* or wkv.head_size sizes in the GGUF header"


# -- MLX (mlx-lm's make_cache) -------------------------------------------------------------
MLX_FULL = frozenset("""llama mistral qwen2 qwen3 qwen2_moe qwen3_moe mixtral phi3 gemma gemma2 granite
granitemoe starcoder2 smollm3 olmo olmoe glm4 deepseek""".split())
MLX_LATENT = frozenset({"deepseek_v3", "kimi_k2"})  # cache the latent and the rope key (deepseek_v3.py)


def mlx_layout(get: Callable[[str], Any], model_type: str | None, n_layers: int | None, kv_heads: int | None,
               head_dim: int | None, elem: float, kv_type: str) -> KvLayout:
    """``get(key)`` reads config.json (its text_config where there is one)."""
    if not model_type or not n_layers:
        return KvLayout.unknown("no model_type or num_hidden_layers in config.json", kv_type)
    if model_type in MLX_LATENT:
        rank, rope = get("kv_lora_rank") or 512, get("qk_rope_head_dim") or 64  # deepseek_v3.py's defaults
        return KvLayout((KvGroup("latent", n_layers, (rank + rope) * elem),), kv_type)
    if model_type == "deepseek_v2":  # deepseek_v2.py caches decompressed K (nope + rope) and V per head
        heads = get("num_attention_heads")
        k = (get("qk_nope_head_dim") or 0) + (get("qk_rope_head_dim") or 0)
        if not heads or not k or not get("v_head_dim"):
            return KvLayout.unknown("deepseek_v2 config.json without head sizes", kv_type)
        return KvLayout((KvGroup("full", n_layers, heads * (k + get("v_head_dim")) * elem),), kv_type)
    kinds = _mlx_kinds(get, model_type, n_layers)
    if isinstance(kinds, str):
        return KvLayout.unknown(kinds, kv_type)
    groups: list[KvGroup] = []
    n_state = kinds.count("state")
    if n_state:
        state = _mlx_state(get, model_type)
        if isinstance(state, str):
            return KvLayout.unknown(state, kv_type)
        groups.append(KvGroup("state", n_state, state_bytes=state))
    if kv_heads is None or head_dim is None:
        if n_state < n_layers:
            return KvLayout.unknown("config.json gives no KV heads or head size", kv_type)
    per_token = 2 * (kv_heads or 0) * (head_dim or 0) * elem
    window = get("sliding_window")
    if kinds.count("sliding") and not window:
        return KvLayout.unknown(f"{model_type}: sliding layers without sliding_window in config.json", kv_type)
    for kind in ("full", "sliding"):
        if kinds.count(kind):  # mlx-lm quantizes no RotatingKVCache: sliding layers stay f16
            bytes_ = per_token if kind == "full" else 2 * (kv_heads or 0) * (head_dim or 0) * ACT
            groups.append(KvGroup(kind, kinds.count(kind), bytes_, window if kind == "sliding" else None))
    return KvLayout(tuple(groups), kv_type)


def _mlx_kinds(get, model_type: str, n: int) -> list[str] | str:
    """Each layer's cache kind: full, sliding or state."""
    types = get("layer_types")
    if types is not None and (not isinstance(types, list) or len(types) != n):
        return f"config.json layer_types must list {n} layer types"
    if model_type == "llama":  # llama.py: RotatingKVCache where layer_types says sliding_attention
        return ["sliding" if t == "sliding_attention" else "full" for t in types or ["full"] * n]
    if model_type in MLX_FULL:
        return ["full"] * n
    if model_type in ("gemma3_text", "gemma3"):
        pattern = get("sliding_window_pattern") or 6
        return ["sliding" if (i + 1) % pattern else "full" for i in range(n)]
    if model_type == "gpt_oss":
        types = types or ["sliding_attention", "full_attention"] * (n // 2)
        return ["sliding" if t == "sliding_attention" else "full" for t in types]
    if model_type == "lfm2":
        full = get("full_attn_idxs") or [i for i, t in enumerate(types or []) if t == "full_attention"]
        return ["full" if i in full else "state" for i in range(n)]
    if model_type == "qwen3_next":
        interval = get("full_attention_interval") or 4
        return ["state" if (i + 1) % interval else "full" for i in range(n)]
    if model_type == "granitemoehybrid" and types:
        return ["state" if t == "mamba" else "full" for t in types]
    return f"model_type '{model_type}': macprof does not know how mlx-lm lays out its cache"


def _mlx_state(get, model_type: str) -> float | str:
    """Bytes of one recurrent layer's cache: conv state in the activations' dtype, the
    gated-delta / SSM state in float32."""
    if model_type == "lfm2" and get("conv_L_cache") and get("hidden_size"):
        return (get("conv_L_cache") - 1) * get("hidden_size") * ACT
    if model_type == "qwen3_next":
        hk, dk = get("linear_num_key_heads"), get("linear_key_head_dim")
        hv, dv, kernel = get("linear_num_value_heads"), get("linear_value_head_dim"), get("linear_conv_kernel_dim")
        if hk and dk and hv and dv and kernel:
            conv_dim = 2 * hk * dk + hv * dv
            return (kernel - 1) * conv_dim * ACT + hv * dv * dk * F32
    if model_type == "granitemoehybrid":
        heads, d_head, d_state = get("mamba_n_heads"), get("mamba_d_head"), get("mamba_d_state")
        groups, d_conv = get("mamba_n_groups"), get("mamba_d_conv")
        if heads and d_head and d_state and groups and d_conv:
            return (d_conv - 1) * (heads * d_head + 2 * groups * d_state) * ACT + heads * d_head * d_state * F32
    return f"{model_type}: config.json lacks the recurrent layers' sizes"
