"""Per-trial GPU memory and time estimate of a composed sweeprl config, before launch (``python -m sweeprl plan``).

Pure Python: nothing here imports torch. Each formula is stated where it is computed; docs/gpu.md collects them
with their sources. One trial runs on one device; its peak is what it always holds (weights, adapters, optimizer
state, reference model, vLLM's share) plus the larger of its two phases: the training step (gradients,
activations, LM head) and generation (the KV cache of ``model.generate``). Activations are counted tensor by
tensor as autograd saves them in transformers' Qwen2 decoder layer (the method of Korthikanti et al. 2022,
"Reducing Activation Recomputation in Large Transformer Models", applied to this layer instead of their GPT
layer); tests/test_plan.py checks the count against the tensors torch itself saves for the tiny model.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Sequence, Tuple

GiB = 1024**3
#: device memory kept free for the caching allocator's fragmentation and other processes' contexts
HEADROOM = 0.10
#: each trial's process holds its own CUDA context and loaded kernels (cuBLAS, cuDNN): ~0.3-1 GiB by CUDA version
CUDA_CONTEXT = GiB // 2
#: model FLOPs utilisation assumed for training and prefill (dense bf16 peak x MFU)
MFU = 0.35
#: share of the HBM bandwidth a decode step reaches (weights + KV cache read once per generated token)
MBU = 0.5
#: launch-bound floor of a decode step in eager PyTorch, per decoder layer: the gpt-fast baseline (PyTorch blog
#: "Accelerating Generative AI with PyTorch II: GPT, Fast", 2023) decodes Llama-2-7B (32 layers) in eager mode at
#: 25.5 tokens/s on an A100, 39 ms a step where the bandwidth bound is ~7 ms. transformers' generate is eager too.
EAGER_DECODE_S_PER_LAYER = 1 / 25.5 / 32
#: the tiny model's vocabulary: 256 bytes + <|endoftext|> (sweeprl.models.tiny.build_tokenizer)
TINY_VOCAB = 257
#: prompt length assumed when data.max_prompt_length is null (short synthetic prompts)
DEFAULT_PROMPT_TOKENS = 64
#: GRPOConfig fields of vLLM generation that the estimate reads (from generation.*, null: TRL's defaults)
VLLM_KEYS = "vllm_mode vllm_gpu_memory_utilization vllm_enable_sleep_mode vllm_importance_sampling_correction".split()
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
DTYPE_BYTES = {"auto": 2, "bfloat16": 2, "float16": 2, "float32": 4}  # auto: bf16 on a bf16-capable GPU


@dataclass(frozen=True)
class Architecture:
    """A decoder of the Qwen2/Llama layout (RMSNorm, GQA attention with RoPE, SwiGLU MLP), sized by config.json."""

    name: str
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    tie_word_embeddings: bool
    head_dim: int = 0  # 0: hidden_size // num_attention_heads
    qkv_bias: bool = True  # Qwen2's q/k/v projections have a bias; Llama's follow attention_bias

    @property
    def q_width(self) -> int:
        return self.num_attention_heads * (self.head_dim or self.hidden_size // self.num_attention_heads)

    @property
    def kv_width(self) -> int:
        return self.q_width // self.num_attention_heads * self.num_key_value_heads

    def linears(self) -> Dict[str, Tuple[int, int, bool]]:
        """(in_features, out_features, bias) of each Linear of one decoder layer."""
        h, i, q, kv, b = self.hidden_size, self.intermediate_size, self.q_width, self.kv_width, self.qkv_bias
        return {
            "q_proj": (h, q, b),
            "k_proj": (h, kv, b),
            "v_proj": (h, kv, b),
            "o_proj": (q, h, False),
            "gate_proj": (h, i, False),
            "up_proj": (h, i, False),
            "down_proj": (i, h, False),
        }

    def layer_params(self) -> int:
        """The Linears (weights + biases) and the two RMSNorm weights of one decoder layer."""
        return sum(i * o + (o if b else 0) for i, o, b in self.linears().values()) + 2 * self.hidden_size

    def non_embedding_params(self) -> int:
        """Decoder layers + final norm: what the Qwen2.5 reports call non-embedding parameters."""
        return self.num_hidden_layers * self.layer_params() + self.hidden_size

    def params(self) -> int:
        """All parameters: + the input embedding, + the output head unless tied to it."""
        embeddings = self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)
        return self.non_embedding_params() + embeddings


#: The published config.json of each model (https://huggingface.co/Qwen/<name>/blob/main/config.json). Their sizes
#: in the Qwen2.5-Coder technical report (Hui et al. 2024, arXiv:2409.12186, Table 1): 1.54B/3.09B/7.61B parameters,
#: 1.31B/2.77B/6.53B non-embedding; tests/test_plan.py checks that these fields give them.
PUBLISHED: Dict[str, Architecture] = {
    a.name: a
    for a in (
        Architecture("Qwen/Qwen2.5-Coder-1.5B-Instruct", 1536, 8960, 28, 12, 2, 151936, True),
        Architecture("Qwen/Qwen2.5-Coder-3B-Instruct", 2048, 11008, 36, 16, 2, 151936, True),
        Architecture("Qwen/Qwen2.5-Coder-7B-Instruct", 3584, 18944, 28, 28, 4, 152064, False),
    )
}


def from_config_dict(config: Mapping[str, Any], name: str) -> Architecture:
    """An :class:`Architecture` from a config.json (a transformers ``PretrainedConfig.to_dict()``)."""
    sizes = [int(config[k]) for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")]
    kv_heads = int(config.get("num_key_value_heads") or sizes[-1])
    tied, head_dim = bool(config.get("tie_word_embeddings", False)), int(config.get("head_dim") or 0)
    qkv_bias = config.get("model_type") == "qwen2" or bool(config.get("attention_bias", False))
    return Architecture(name, *sizes, kv_heads, int(config["vocab_size"]), tied, head_dim, qkv_bias)


def architecture(model_cfg: Any) -> Architecture:
    """The architecture of ``cfg.model``: the tiny spec; a local directory's config.json; the table of published
    configs; last, ``transformers.AutoConfig`` (the hub, or its local cache: needs network on first use)."""
    if model_cfg.source == "tiny":
        t = model_cfg.tiny
        dims = (t.hidden_size, t.intermediate_size, t.num_hidden_layers, t.num_attention_heads, t.num_key_value_heads)
        return Architecture(f"tiny ({model_cfg.name})", *dims, TINY_VOCAB, True)
    path = str(model_cfg.name_or_path)
    config_json = Path(path).expanduser() / "config.json"
    if config_json.is_file():
        return from_config_dict(json.loads(config_json.read_text()), path)
    for name, arch in PUBLISHED.items():
        if name.lower() == path.lower():
            return arch
    from transformers import AutoConfig

    hf = AutoConfig.from_pretrained(path, revision=model_cfg.revision, trust_remote_code=model_cfg.trust_remote_code)
    return from_config_dict(hf.get_text_config().to_dict(), path)


def lora_targets(arch: Architecture, target_modules: Any) -> Tuple[str, ...]:
    """The decoder-layer Linears that ``lora.target_modules`` names (PEFT matches a name by its last component;
    ``all-linear`` is every Linear but the output head)."""
    if isinstance(target_modules, str):
        target_modules = list(LINEARS) if target_modules == "all-linear" else [target_modules]
    names = [str(m).rsplit(".", 1)[-1] for m in target_modules]
    unknown = sorted(set(names) - set(arch.linears()))
    if unknown:
        raise ValueError(f"lora.target_modules {unknown}: the estimate knows the decoder Linears {list(LINEARS)}")
    return tuple(m for m in LINEARS if m in names)


def lora_params(arch: Architecture, r: int, targets: Sequence[str], bias: str = "none") -> int:
    """Trainable parameters of LoRA: r x (in + out) per targeted Linear and layer (A: r x in, B: out x r); with
    ``bias=all`` every bias trains too, with ``lora_only`` the biases of the targeted Linears."""
    shapes = arch.linears()
    per_layer = sum(r * (shapes[m][0] + shapes[m][1]) for m in targets)
    trained_biases = {"all": list(shapes), "lora_only": list(targets)}.get(bias, [])
    per_layer += sum(shapes[m][1] for m in trained_biases if shapes[m][2])
    return arch.num_hidden_layers * per_layer


@dataclass(frozen=True)
class Step:
    """One training micro-batch: its shape, and what decides the tensors autograd keeps for it."""

    batch: int
    seq: int
    scored: int  # tokens whose log-prob is taken (TRL's fused head projects only these)
    act_bytes: int = 2  # 2 under bf16 (autocast, bf16 weights); 4 in fp32
    attn: str = "sdpa"  # eager, sdpa, flash_attention_2
    lora_r: int = 0
    lora_targets: Tuple[str, ...] = ()  # empty: full fine-tuning
    checkpointing: bool = False


def layer_bytes_per_token(arch: Architecture, step: Step) -> float:
    """Bytes one decoder layer saves for backward, per token (t: activation bytes; h, i, q: hidden, MLP, query
    widths; a: heads; s: sequence length), term by term as transformers' Qwen2 layer runs:

    * RMSNorm (x2): its fp32 input 4h (``pow`` and ``mul`` save it), rsqrt 4, the normalised t*h when the norm
      weight trains (full fine-tuning);
    * Linear inputs: each input once, t*(h + h + i) for q/k/v, gate/up, down, when the base weights train. LoRA
      adds per targeted Linear its A output t*r and, under bf16 autocast, its own bf16 copy of the input (PEFT
      casts it to the fp32 adapter's dtype, autocast back);
    * attention: q after RoPE and k, v repeated to all heads (transformers' sdpa repeats GQA heads when a padding
      mask is passed) 3*t*q, and the output t*q. eager adds the fp32 softmax a*s*4 (+ its bf16 copy a*s*t) per
      token (Korthikanti: 5*a*s^2*b bytes with a 16-bit softmax and a dropout mask); sdpa the log-sum-exp 4a and
      the padding mask in the activation dtype, t*s per layer; flash_attention_2 neither, nor repeated k and v;
    * MLP: gate output, its SiLU, up output 3*t*i.

    Korthikanti's GPT layer (4h MLP, dropout) is 34*s*b*h + 5*a*s^2*b bytes; this layer differs by its SwiGLU MLP,
    fp32 norms, GQA and no dropout (``algo.disable_dropout``, TRL's default)."""
    h, i, q, kv, a = arch.hidden_size, arch.intermediate_size, arch.q_width, arch.kv_width, arch.num_attention_heads
    t, s, r = step.act_bytes, step.seq, step.lora_r
    full = not step.lora_targets
    cast = not full and t != 4

    def inputs(width: int, modules: Sequence[str], saved_anyway: bool = False) -> float:
        targeted = [m for m in modules if m in step.lora_targets]
        own = t * width if saved_anyway or full or (targeted and not cast) else 0
        return own + len(targeted) * ((t * width if cast else 0) + t * r)

    norms = 2 * (4 * h + 4 + (t * h if full else 0))
    if step.attn == "eager":
        attention = 3 * t * q + a * s * (4 + (t if t != 4 else 0)) + inputs(q, ["o_proj"])
    elif step.attn == "flash_attention_2":
        attention = t * (q + 2 * kv) + 4 * a + inputs(q, ["o_proj"], saved_anyway=True)
    else:  # sdpa, transformers' default
        attention = 3 * t * q + 4 * a + t * s + inputs(q, ["o_proj"], saved_anyway=True)
    qkv_gate_up = inputs(h, ["q_proj", "k_proj", "v_proj"]) + inputs(h, ["gate_proj", "up_proj"])
    return norms + attention + qkv_gate_up + 3 * t * i + inputs(i, ["down_proj"])


def saved_for_backward(arch: Architecture, step: Step) -> Dict[str, int]:
    """Bytes autograd keeps for one micro-batch's backward: ``layers`` (decoder layers), ``outside`` (embedding
    indices, final norm, RoPE tables, autocast copies of fp32 adapters) and ``head`` (TRL's fused log-prob head).

    Checkpointing (transformers' activation checkpointing of each decoder layer): every layer keeps only its
    input, t*h per token, and the backward recomputes one layer at a time: + one layer's full activations. In
    LoRA training without checkpointing nothing before the first adapter needs a gradient, so the first layer's
    input norm saves nothing. The head keeps its scored positions' hidden states t*h, the targets (int64) and the
    fp32 log-normaliser and entropy, + the label mask: t*h + 17 bytes per scored token."""
    h, t, n = arch.hidden_size, step.act_bytes, step.batch * step.seq
    full = not step.lora_targets
    per_layer = layer_bytes_per_token(arch, step)
    if step.checkpointing:
        layers = arch.num_hidden_layers * n * t * h + n * per_layer
    else:
        layers = arch.num_hidden_layers * n * per_layer - (0 if full else n * (4 * h + 4))
    norm = 4 * h + 4 + (t * h if full else 0)
    adapters = lora_params(arch, step.lora_r, step.lora_targets) if not full and t != 4 else 0
    rope = 2 * step.seq * arch.q_width // arch.num_attention_heads * t  # cos and sin, shared by the batch
    outside = n * norm + (8 * n if full else 0) + rope + t * adapters
    return {"layers": int(layers), "outside": int(outside), "head": step.scored * (t * h + 17)}


@dataclass(frozen=True)
class Workload:
    """What one trial does for each optimizer update, read from the config (see :func:`workload`)."""

    algo: str
    step: Step  # one training micro-batch
    prompt_len: int
    completion_len: int
    dtype_bytes: int  # of the weights (model.dtype)
    weight_bytes: int
    adapter_params: int
    max_steps: int
    notes: Tuple[str, ...]
    train_seqs: int = 0  # sequences through forward + backward per update
    gen_seqs: float = 0  # completions generated per update
    gen_batch: int = 1  # completions generated together (one KV cache)
    nograd_forwards: int = 0  # forwards per generated completion besides training (reference, old log-probs, values)
    reference: bool = False  # a second, frozen copy of the weights
    critic: bool = False  # PPO value_model=separate: a second trunk that trains
    fused_head: bool = True  # TRL's chunked log-prob head (else the logits are materialised)
    vllm: str = ""  # "", "colocate", "server"
    vllm_util: float = 0.0
    vllm_sleep: bool = False


def _trl_default(name: str) -> Any:
    """The default of a GRPOConfig field, read from TRL (imported only when vLLM is asked for)."""
    from trl.trainer.grpo_config import GRPOConfig

    return {f.name: f.default for f in dataclasses.fields(GRPOConfig)}[name]


def workload(cfg: Any, arch: Architecture) -> Workload:
    """Read the trial's shape from the composed config: sequence = ``data.max_prompt_length`` +
    ``generation.max_completion_length``; GRPO/RLOO micro-batch = ``algo.per_device_train_batch_size``
    completions, ``generation_batch_size`` (else micro-batch x ``steps_per_generation``, else x accumulation)
    generated together, every ``steps_per_generation x num_iterations`` micro-steps (TRL's schedule); PPO: the
    ``batch_size`` completions of an update, trained in ``mini_batch_size`` micro-batches ``ppo_epochs`` times."""
    algo, lora, notes = cfg.algo, cfg.lora, []
    prompt = cfg.data.get("max_prompt_length")
    if prompt is None:
        prompt = DEFAULT_PROMPT_TOKENS
        notes.append(f"data.max_prompt_length is null: assumed {prompt} prompt tokens")
    dtype, completion = str(cfg.model.dtype), int(cfg.generation.max_completion_length)
    if dtype == "float32":
        notes.append("model.dtype=float32 under bf16 autocast: activations counted at 2 bytes (approximate)")
    targets = lora_targets(arch, lora.target_modules) if lora.enabled else ()
    r = int(lora.r) if lora.enabled else 0
    micro = int(algo.mini_batch_size if algo.name == "ppo" else algo.per_device_train_batch_size)
    attn, checkpointing = str(cfg.model.get("attn_implementation") or "sdpa"), algo.get("activation_checkpointing")
    step = Step(micro, int(prompt) + completion, micro * completion, 2, attn, r, targets, bool(checkpointing))
    adapters = lora_params(arch, r, targets, str(lora.bias)) if lora.enabled else 0
    size = DTYPE_BYTES[dtype]
    w = Workload(
        algo.name, step, int(prompt), completion, size, arch.params() * size, adapters, algo.max_steps, tuple(notes)
    )
    if algo.name == "ppo":
        batch = int(algo.batch_size)
        return dataclasses.replace(
            w,
            train_seqs=batch * int(algo.ppo_epochs),
            gen_seqs=batch,
            gen_batch=batch,
            nograd_forwards=2,  # the rollout's log-probs + values, and the reference log-probs
            reference=not lora.enabled,
            critic=algo.value_model == "separate",
            fused_head=False,
        )
    return _trl_workload(w, algo, cfg.generation, lora_enabled=bool(lora.enabled))


def _trl_workload(w: Workload, algo: Any, gen: Any, lora_enabled: bool) -> Workload:
    """GRPO/RLOO: TRL's generation schedule, reference model and vLLM settings (``generation.use_vllm``,
    ``vllm_mode``, ``vllm_gpu_memory_utilization``, ``vllm_enable_sleep_mode``: GRPOConfig's fields; null ones
    take TRL's defaults)."""
    extra = dict(algo.get("extra") or {})
    micro, accum, iterations = w.step.batch, int(algo.gradient_accumulation_steps), int(algo.num_iterations)
    gen_batch = int(algo.generation_batch_size or micro * int(extra.get("steps_per_generation") or accum))
    vllm: Dict[str, Any] = {}
    if gen.get("use_vllm", False):
        vllm = {k: gen[k] if gen.get(k) is not None else _trl_default(k) for k in VLLM_KEYS}
    # TRL computes the old log-probs when generation is not aligned with the updates, and always with vLLM
    old_logps = accum % (gen_batch // micro * iterations) != 0 or bool(vllm.get("vllm_importance_sampling_correction"))
    beta = float(algo.beta) > 0
    return dataclasses.replace(
        w,
        train_seqs=micro * accum,
        gen_seqs=micro * accum / iterations,
        gen_batch=gen_batch,
        nograd_forwards=int(beta) + int(old_logps),
        reference=beta and not lora_enabled,  # with LoRA, TRL disables the adapters instead
        vllm=str(vllm.get("vllm_mode", "")),
        vllm_util=float(vllm.get("vllm_gpu_memory_utilization", 0.0)),
        vllm_sleep=bool(vllm.get("vllm_enable_sleep_mode", False)),
    )


@dataclass(frozen=True)
class Device:
    key: str
    label: str
    memory_gib: float
    bf16_tflops: float  # dense (no sparsity)
    bandwidth_gbs: float
    source: str


DEVICES: Dict[str, Device] = {
    d.key: d
    for d in (
        Device("24GB", "RTX 4090", 24, 165.2, 1008, "NVIDIA Ada Lovelace architecture whitepaper: RTX 4090"),
        Device("a10", "A10 24GB", 24, 125, 600, "NVIDIA A10 datasheet"),
        Device("80GB", "A100 80GB SXM", 80, 312, 2039, "NVIDIA A100 datasheet (SXM 80GB)"),
        Device("h100", "H100 80GB SXM", 80, 989, 3350, "NVIDIA H100 datasheet (SXM; 1,979 TFLOPS is with sparsity)"),
    )
}
ALIASES = {"4090": "24GB", "rtx4090": "24GB", "a100": "80GB", "a100-80gb": "80GB", "h100-80gb": "h100"}


def device(name: str) -> Device:
    """A preset by key or alias, case-insensitive (24GB, a10, 80GB, h100, 4090, a100, ...)."""
    key = ({k.lower(): k for k in DEVICES} | ALIASES).get(name.lower())
    if key is None:
        raise ValueError(f"unknown GPU {name!r}; known: {', '.join([*DEVICES, *ALIASES])}")
    return DEVICES[key]


@dataclass(frozen=True)
class Component:
    name: str
    phase: str  # always, train, generate
    bytes: int


def components(arch: Architecture, w: Workload, dev: Device) -> List[Component]:
    """The memory of one trial on ``dev``, by component and phase.

    Optimizer: AdamW as transformers builds it from torch, two moments ``zeros_like(param)``, so in each trainable
    parameter's dtype, and no fp32 master copy (the Trainer keeps parameters in their loaded dtype and runs
    autocast): full fine-tuning in bf16 holds 2 (weight) + 2 (grad) + 4 (moments) bytes per parameter; LoRA's fp32
    adapters (PEFT's ``autocast_adapter_dtype=True``, TRL's default) 4 + 4 + 8. A mixed-precision recipe with an
    fp32 master copy would be 16 bytes per parameter (Rajbhandari et al. 2020, ZeRO)."""
    step, full = w.step, not w.step.lora_targets
    trainable, tb = (arch.params(), w.dtype_bytes) if full else (w.adapter_params, 4)
    trunks = 2 if w.critic else 1
    saved = saved_for_backward(arch, step)
    out = [
        Component("CUDA context", "always", CUDA_CONTEXT),
        Component("weights", "always", w.weight_bytes * (2 if w.critic else 1)),
        Component("LoRA adapters (fp32)", "always", 4 * w.adapter_params * trunks),
        Component("gradients", "train", trainable * tb * trunks),
        Component("AdamW moments", "always", 2 * trainable * tb * trunks),
        Component("reference model", "always", w.weight_bytes if w.reference else 0),
        Component("activations", "train", (saved["layers"] + saved["outside"]) * trunks),
        Component("LM head / logits", "train", head_bytes(arch, w, saved["head"])),
    ]
    if w.vllm == "colocate":
        # vLLM colocated reserves vllm_gpu_memory_utilization x the device's memory (weights, KV cache, graphs)
        vllm = int(w.vllm_util * dev.memory_gib * GiB)
        out.append(Component("vLLM (colocate)", "generate" if w.vllm_sleep else "always", vllm))
    kv = 0 if w.vllm else w.gen_batch * (w.prompt_len + w.completion_len) * kv_bytes_per_token(arch, step)
    out.append(Component("KV cache (generate)", "generate", kv))
    return out


def kv_bytes_per_token(arch: Architecture, step: Step) -> int:
    """K and V of every layer, in the activation dtype: 2 x layers x kv_heads x head_dim x t."""
    return 2 * arch.num_hidden_layers * arch.kv_width * step.act_bytes


def head_bytes(arch: Architecture, w: Workload, saved: int) -> int:
    """The output head's memory during the training step.

    TRL (GRPO/RLOO) never materialises batch x seq x vocab logits: ``add_fused_lm_head`` projects the scored
    positions through ``ChunkedLogProbFunction`` in tiles of 4096 tokens x 32768 vocabulary entries (compute dtype),
    keeping online log-sum-exp statistics; its backward recomputes each tile and accumulates the hidden-state
    gradient in fp32 (scored x h x 4) and, when the head trains, the head's gradient in fp32 (vocab x h x 4).
    sweeprl's PPO materialises them: bf16 logits, their fp32 upcast, the temperature-scaled copy, the log-softmax
    and the entropy's softmax: (t + 16) bytes per scored token and vocabulary entry."""
    step, v, h = w.step, arch.vocab_size, arch.hidden_size
    if not w.fused_head:
        return step.scored * v * (step.act_bytes + 16)
    tile = min(step.scored, 4096) * min(v, 32768) * step.act_bytes
    head_grad = v * h * 4 if not step.lora_targets else 0
    return saved + tile + step.scored * h * 4 + head_grad


def peak_bytes(parts: Sequence[Component]) -> int:
    """What the trial always holds + the larger of its training step and its generation."""
    phase = {p: sum(c.bytes for c in parts if c.phase == p) for p in ("always", "train", "generate")}
    return phase["always"] + max(phase["train"], phase["generate"])


@dataclass(frozen=True)
class UpdateTime:
    """Seconds per optimizer update; ``busy`` is the part during which the GPU itself is the bottleneck."""

    generation: float
    training: float
    forwards: float
    busy: float

    @property
    def total(self) -> float:
        return self.generation + self.training + self.forwards


def forward_flops_per_token(arch: Architecture, seq: int) -> float:
    """2 FLOPs per non-embedding parameter + attention's 4 x layers x seq x q_width (QK^T and AV), per token
    (Kaplan et al. 2020; PaLM, Chowdhery et al. 2022, App. B). The head counts separately: 2 x vocab x h per
    scored token."""
    return 2 * arch.non_embedding_params() + 4 * arch.num_hidden_layers * seq * arch.q_width


def training_flops(arch: Architecture, w: Workload) -> float:
    """One update's forward + backward: backward = 2 x forward with full fine-tuning (6N per token in all); with
    LoRA the frozen weights need no weight gradient, so backward = 1 x the matmuls + 2 x attention (~4N per token);
    checkpointing adds one forward. The head: 2, + 2 (input gradient), + 2 when it trains, x vocab x h per scored
    token."""
    step, full = w.step, not w.step.lora_targets
    body = 2 * arch.non_embedding_params() * step.seq
    attention = 4 * arch.num_hidden_layers * step.seq**2 * arch.q_width
    backward = 2 * (body + attention) if full else body + 2 * attention
    forward = (body + attention) * (2 if step.checkpointing else 1)
    head = 2 * arch.vocab_size * arch.hidden_size * w.completion_len * (3 if full else 2)
    return w.train_seqs * (forward + backward + head) * (2 if w.critic else 1)


def update_time(arch: Architecture, w: Workload, dev: Device, mfu: float = MFU, mbu: float = MBU) -> UpdateTime:
    """Training and prefill are compute-bound (dense bf16 peak x ``mfu``). A decode step reads the weights and
    the KV cache once: bytes / (HBM bandwidth x ``mbu``); transformers' generate (eager) is further bounded below
    by kernel-launch overhead, :data:`EAGER_DECODE_S_PER_LAYER` per layer; vLLM (CUDA graphs) is not."""
    flops = dev.bf16_tflops * 1e12 * mfu
    seq = w.prompt_len + w.completion_len
    prefill = w.gen_seqs * w.prompt_len * forward_flops_per_token(arch, w.prompt_len) / flops
    context = w.prompt_len + w.completion_len / 2
    read = w.weight_bytes + w.gen_batch * context * kv_bytes_per_token(arch, w.step)
    step_flops = w.gen_batch * (forward_flops_per_token(arch, int(context)) + 2 * arch.vocab_size * arch.hidden_size)
    bound = max(read / (dev.bandwidth_gbs * 1e9 * mbu), step_flops / flops)
    floor = 0.0 if w.vllm else arch.num_hidden_layers * EAGER_DECODE_S_PER_LAYER
    decode = w.gen_seqs / w.gen_batch * w.completion_len  # decode steps per update
    forward = forward_flops_per_token(arch, seq) * seq + 2 * arch.vocab_size * arch.hidden_size * w.completion_len
    forwards = w.nograd_forwards * w.gen_seqs * forward / flops
    training = training_flops(arch, w) / flops
    busy = prefill + decode * bound + training + forwards
    return UpdateTime(prefill + decode * max(bound, floor), training, forwards, busy)


@dataclass(frozen=True)
class DevicePlan:
    """One trial's estimate on one device type, and what ``gpus`` of them hold and do."""

    device: Device
    gpus: int
    parts: List[Component]
    peak: int
    usable: int  # the device's memory less HEADROOM
    time: UpdateTime
    max_steps: int

    @property
    def fits(self) -> bool:
        return self.peak <= self.usable

    @property
    def per_gpu(self) -> int:
        """Trials side by side on one GPU."""
        return self.usable // self.peak if self.peak else 0

    @property
    def trials_per_hour(self) -> float:
        """k trials side by side on a GPU finish at most k updates per update time, and at most one update per
        ``busy`` seconds (they share its FLOPs and bandwidth; only launch-bound decoding overlaps)."""
        rate = min(self.per_gpu / self.time.total, 1 / self.time.busy) if self.per_gpu else 0.0
        return self.gpus * 3600 * rate / self.max_steps


def plan(cfg: Any, devices: Sequence[Device], gpus: int = 1, mfu: float = MFU, mbu: float = MBU) -> List[DevicePlan]:
    """The estimate of one trial of ``cfg`` on each device (``gpus`` of each, one trial per GPU or more)."""
    arch = architecture(cfg.model)
    w = workload(cfg, arch)
    plans = []
    for dev in devices:
        parts, time = components(arch, w, dev), update_time(arch, w, dev, mfu, mbu)
        usable = int(dev.memory_gib * GiB * (1 - HEADROOM))
        plans.append(DevicePlan(dev, gpus, parts, peak_bytes(parts), usable, time, w.max_steps))
    return plans
