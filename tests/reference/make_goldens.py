#!/usr/bin/env python3
"""Whole-model golden fixtures for DeepSeek-V4, computed by transformers' DeepseekV4ForCausalLM.

For every case this script builds a tiny random DeepSeek-V4 (real head_dim 512, rope 64, index_head_dim 128,
window 128, compress ratios 4/128; small widths), rounds every weight to what the official checkpoint format can
hold (FP8 e4m3 with 128x128 UE8M0 block scales, MXFP4 routed experts, BF16, F32), and writes

    <out>/<case>/official/        the model in DeepSeek's official layout (MODEL_SPEC §9), written by this script
    <out>/<case>/transformers/    the same model through save_pretrained(save_original_format=False)
    <out>/<case>/tokens.txt       the input ids, comma separated
    <out>/<case>/logits_f32.npy   float32 logits of every position, [T, vocab]
    <out>/<case>/meta.json        versions, seeds, config, top-k margins, clamp activity, bf16-vs-f32 rel_l2

Both layouts hold bit-identical weights; that is checked by reading the files back (safetensors), and by letting
transformers load the dequantised official names through its own checkpoint renaming.

    python3 tests/reference/make_goldens.py --out tests/data/goldens
"""
import argparse
import copy
import hashlib
import json
import math
import os
import platform
import re
import shutil
import struct
import sys
import tempfile

import numpy as np
import safetensors
import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM
from transformers.models.deepseek_v4 import modeling_deepseek_v4 as hf_v4

FP8_MAX = 448.0       # largest e4m3fn magnitude
FP4_MAX = 6.0         # largest e2m1 magnitude
FP8_BLOCK = 128       # 128x128 weight blocks share one UE8M0 scale
FP4_GROUP = 32        # 32 consecutive inputs of a row share one UE8M0 scale
E2M1_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # magnitudes of codes 0..7; bit 3 is the sign
MIN_REL_MARGIN = 1e-4  # every top-k boundary must be at least this far apart (relative to the row's max |score|)
MAX_TOKEN_DRAWS = 64

YARN = {"type": "yarn", "factor": 16.0, "original_max_position_embeddings": 65536, "beta_fast": 32, "beta_slow": 1}

# Official HF config.json style (MODEL_SPEC §2.1); compress_ratios has L+1 entries, the last is the MTP layer.
COMMON_CONFIG = {
    "architectures": ["DeepseekV4ForCausalLM"],
    "model_type": "deepseek_v4",
    "hidden_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 512,
    "qk_rope_head_dim": 64,
    "q_lora_rank": 128,
    "o_groups": 2,
    "o_lora_rank": 128,
    "sliding_window": 128,
    "compress_rope_theta": 160000.0,
    "rope_theta": 10000.0,
    "rope_scaling": YARN,
    "max_position_embeddings": 1048576,
    "index_n_heads": 4,
    "index_head_dim": 128,
    "hc_mult": 4,
    "hc_sinkhorn_iters": 20,
    "hc_eps": 1e-06,
    "rms_norm_eps": 1e-06,
    "n_routed_experts": 4,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 128,
    "num_hash_layers": 3,
    "scoring_func": "sqrtsoftplus",
    "topk_method": "noaux_tc",
    "norm_topk_prob": True,
    "swiglu_limit": 10.0,
    "hidden_act": "silu",
    "bos_token_id": 0,
    "eos_token_id": 1,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "initializer_range": 0.02,
    "use_cache": True,
    "torch_dtype": "bfloat16",
    "quantization_config": {
        "quant_method": "fp8",
        "fmt": "e4m3",
        "scale_fmt": "ue8m0",
        "activation_scheme": "dynamic",
        "weight_block_size": [128, 128],
    },
}

CASES = {
    # V4-Flash-like: SWA, SWA, CSA, HCA (+ SWA MTP slot). 320 tokens: 80 CSA entries (index_topk 16 selects),
    # 2 HCA entries. The official layout carries random MTP tensors and is split over two shards + index.
    "flash_like": {
        "seed": 1001,
        "tokens": 320,
        "shards": 2,
        "transformers_layout": True,
        "config": {"vocab_size": 512, "num_hidden_layers": 4, "compress_ratios": [0, 0, 4, 128, 0],
                   "index_topk": 16, "routed_scaling_factor": 1.5, "num_nextn_predict_layers": 1},
    },
    # V4-Pro-like: HCA, HCA, CSA, HCA (+ SWA MTP slot), no MTP tensors, hash routing in layers 0-1 only.
    # 384 tokens: 96 CSA entries (index_topk 8 selects from t = 35 on), 3 HCA entries (visible from t = 127, 255,
    # 383). Long enough that rel_l2 over all logits is a statistic over many positions, not one routing flip.
    # Its first 100 tokens are the prompt shorter than the window: causal, so the golden rows [0, 100) are that
    # prompt's logits (checked by a separate transformers run of the prefix, recorded as meta.json -> short_prompt).
    # Single-file layout, and no transformers layout: the fixtures must stay small (the GPU test machine gets a
    # size-capped copy of the tree), and flash_like already covers that layout.
    "pro_like": {
        "seed": 2002,
        "tokens": 384,
        "short_prompt": 100,
        "shards": 1,
        "transformers_layout": False,
        "config": {"vocab_size": 512, "num_hidden_layers": 4, "compress_ratios": [128, 128, 4, 128, 0],
                   "index_topk": 8, "routed_scaling_factor": 2.5, "num_nextn_predict_layers": 0,
                   "num_hash_layers": 2},
    },
}

# --------------------------------------------------------------------------------------------------------------
# Names: transformers parameter -> official tensor (MODEL_SPEC §9.8, read in reverse)

_LAYER_RENAMES = [
    (r"input_layernorm\.weight", "attn_norm.weight"),
    (r"post_attention_layernorm\.weight", "ffn_norm.weight"),
    (r"attn_hc\.(fn|base|scale)", r"hc_attn_\1"),
    (r"ffn_hc\.(fn|base|scale)", r"hc_ffn_\1"),
    (r"self_attn\.sinks", "attn.attn_sink"),
    (r"self_attn\.q_a_proj\.weight", "attn.wq_a.weight"),
    (r"self_attn\.q_a_norm\.weight", "attn.q_norm.weight"),
    (r"self_attn\.q_b_proj\.weight", "attn.wq_b.weight"),
    (r"self_attn\.kv_proj\.weight", "attn.wkv.weight"),
    (r"self_attn\.kv_norm\.weight", "attn.kv_norm.weight"),
    (r"self_attn\.o_a_proj\.weight", "attn.wo_a.weight"),
    (r"self_attn\.o_b_proj\.weight", "attn.wo_b.weight"),
    (r"self_attn\.compressor\.kv_proj\.weight", "attn.compressor.wkv.weight"),
    (r"self_attn\.compressor\.gate_proj\.weight", "attn.compressor.wgate.weight"),
    (r"self_attn\.compressor\.position_bias", "attn.compressor.ape"),
    (r"self_attn\.compressor\.kv_norm\.weight", "attn.compressor.norm.weight"),
    (r"self_attn\.compressor\.indexer\.kv_proj\.weight", "attn.indexer.compressor.wkv.weight"),
    (r"self_attn\.compressor\.indexer\.gate_proj\.weight", "attn.indexer.compressor.wgate.weight"),
    (r"self_attn\.compressor\.indexer\.position_bias", "attn.indexer.compressor.ape"),
    (r"self_attn\.compressor\.indexer\.kv_norm\.weight", "attn.indexer.compressor.norm.weight"),
    (r"self_attn\.compressor\.indexer\.q_b_proj\.weight", "attn.indexer.wq_b.weight"),
    (r"self_attn\.compressor\.indexer\.scorer\.weights_proj\.weight", "attn.indexer.weights_proj.weight"),
    (r"mlp\.gate\.weight", "ffn.gate.weight"),
    (r"mlp\.gate\.e_score_correction_bias", "ffn.gate.bias"),
    (r"mlp\.gate\.tid2eid", "ffn.gate.tid2eid"),
    (r"mlp\.shared_experts\.gate_proj\.weight", "ffn.shared_experts.w1.weight"),
    (r"mlp\.shared_experts\.up_proj\.weight", "ffn.shared_experts.w3.weight"),
    (r"mlp\.shared_experts\.down_proj\.weight", "ffn.shared_experts.w2.weight"),
]
_GLOBAL_RENAMES = {
    "model.embed_tokens.weight": "embed.weight",
    "lm_head.weight": "head.weight",
    "model.norm.weight": "norm.weight",
    "model.hc_head.hc_fn": "hc_head_fn",
    "model.hc_head.hc_base": "hc_head_base",
    "model.hc_head.hc_scale": "hc_head_scale",
}


def official_name(hf_name):
    """Official name of a transformers parameter/buffer; None for derived buffers (rotary tables) and for the
    merged expert tensors (split per expert by build_case_model)."""
    if hf_name in _GLOBAL_RENAMES:
        return _GLOBAL_RENAMES[hf_name]
    m = re.fullmatch(r"model\.layers\.(\d+)\.(.+)", hf_name)
    if not m or "rotary_emb" in hf_name or ".mlp.experts." in hf_name:
        return None
    for pattern, repl in _LAYER_RENAMES:
        if re.fullmatch(pattern, m.group(2)):
            return f"layers.{m.group(1)}." + re.sub(pattern, repl, m.group(2))
    raise KeyError(f"no official name for transformers tensor '{hf_name}'")


def storage_kind(name):
    """How the official checkpoint stores tensor `name` (MODEL_SPEC §9.1-9.6, §7.1)."""
    if re.search(r"\.ffn\.experts\.\d+\.w[123]\.weight$", name):
        return "fp4"
    if re.search(r"(attn\.(wq_a|wq_b|wkv|wo_a|wo_b)|indexer\.wq_b|shared_experts\.w[123]|e_proj|h_proj)\.weight$",
                 name):
        return "fp8"
    if re.search(r"(hc_(attn|ffn|head)_(fn|base|scale)|attn_sink|\.ape|gate\.bias)$", name):
        return "f32"
    if name.endswith("tid2eid"):
        return "i64"
    return "bf16"


# --------------------------------------------------------------------------------------------------------------
# Quantisation (encode = what the file holds, decode = the float32 values every reader must reconstruct)

def ue8m0_exponent(amax, qmax):
    """Smallest integer e with qmax * 2^e >= amax, i.e. ceil(log2(amax / qmax)) evaluated exactly."""
    amax = amax.double().clamp_min(2.0 ** -100)
    e = torch.ceil(torch.log2(amax / qmax))
    e = torch.where(torch.ldexp(torch.full_like(e, qmax), e - 1) >= amax, e - 1, e)  # log2 rounded up too far
    e = torch.where(torch.ldexp(torch.full_like(e, qmax), e) < amax, e + 1, e)       # log2 rounded down too far
    return e.to(torch.int32)


def e8m0_tensor(exponent):
    return (exponent + 127).to(torch.uint8).view(torch.float8_e8m0fnu)


def e8m0_exponent_of(scale):
    return scale.view(torch.uint8).to(torch.int32) - 127


def encode_fp8(w):
    """[out, in] f32 -> (e4m3fn weight [out, in], e8m0 scale [ceil(out/128), ceil(in/128)])."""
    out_dim, in_dim = w.shape
    ob, ib = -(-out_dim // FP8_BLOCK), -(-in_dim // FP8_BLOCK)
    padded = torch.zeros(ob * FP8_BLOCK, ib * FP8_BLOCK, dtype=torch.float32)
    padded[:out_dim, :in_dim] = w
    blocks = padded.view(ob, FP8_BLOCK, ib, FP8_BLOCK)
    exponent = ue8m0_exponent(blocks.abs().amax(dim=(1, 3)), FP8_MAX)  # [ob, ib]
    step = torch.ldexp(torch.ones(ob, 1, ib, 1, dtype=torch.float64), exponent.view(ob, 1, ib, 1).double())
    q = (blocks.double() / step).clamp(-FP8_MAX, FP8_MAX).float()  # exact: division by a power of two
    q = q.view_as(padded)[:out_dim, :in_dim].to(torch.float8_e4m3fn)  # round to nearest even
    return q.contiguous(), e8m0_tensor(exponent)


def decode_fp8(q, scale):
    exponent = e8m0_exponent_of(scale)
    full = exponent.repeat_interleave(FP8_BLOCK, 0).repeat_interleave(FP8_BLOCK, 1)[: q.shape[0], : q.shape[1]]
    return torch.ldexp(q.float(), full.float())


def encode_fp4(w):
    """[out, in] f32 -> (int8 [out, in/2], two e2m1 codes per byte, low nibble = even input; e8m0 [out, in/32])."""
    out_dim, in_dim = w.shape
    assert in_dim % FP4_GROUP == 0, f"MXFP4 needs in % 32 == 0, got {in_dim}"
    groups = w.double().view(out_dim, in_dim // FP4_GROUP, FP4_GROUP)
    exponent = ue8m0_exponent(groups.abs().amax(dim=2), FP4_MAX)  # [out, in/32]
    v = groups / torch.ldexp(torch.ones_like(groups), exponent.unsqueeze(-1).double())
    mag = v.abs().clamp(max=FP4_MAX)
    grid = torch.tensor(E2M1_GRID, dtype=torch.float64)
    lo = (torch.searchsorted(grid, mag, right=True) - 1).clamp(0, 7)
    hi = (lo + 1).clamp(max=7)
    d_lo, d_hi = mag - grid[lo], grid[hi] - mag
    # Round to nearest, ties to the even code (codes are ordered like the magnitudes).
    take_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0) & (hi != lo))
    code = torch.where(take_hi, hi, lo) | torch.where(v < 0, 8, 0)
    code = code.view(out_dim, in_dim).to(torch.uint8)
    packed = (code[:, 0::2] | (code[:, 1::2] << 4)).view(torch.int8)
    return packed.contiguous(), e8m0_tensor(exponent)


def decode_fp4(packed, scale):
    table = torch.tensor(list(E2M1_GRID) + [-x for x in E2M1_GRID], dtype=torch.float32)
    b = packed.view(torch.uint8).to(torch.int64)
    codes = torch.stack([b & 0xF, b >> 4], dim=-1).view(b.shape[0], -1)
    exponent = e8m0_exponent_of(scale).repeat_interleave(FP4_GROUP, 1)
    return torch.ldexp(table[codes], exponent.float())


def encode(name, value):
    """Official tensors {name: tensor} holding `value` (float32, int64 for tid2eid)."""
    kind = storage_kind(name)
    if kind in ("fp8", "fp4"):
        q, s = (encode_fp8 if kind == "fp8" else encode_fp4)(value.float())
        return {name: q, name[: -len(".weight")] + ".scale": s}
    if kind == "bf16":
        return {name: value.to(torch.bfloat16).contiguous()}
    if kind == "f32":
        return {name: value.float().contiguous()}
    return {name: value.to(torch.int64).contiguous()}


def decode(name, tensors):
    """float32 (int64 for tid2eid) value of official tensor `name`, given every tensor of the checkpoint."""
    kind = storage_kind(name)
    if kind == "fp8":
        return decode_fp8(tensors[name], tensors[name[: -len(".weight")] + ".scale"])
    if kind == "fp4":
        return decode_fp4(tensors[name], tensors[name[: -len(".weight")] + ".scale"])
    if kind == "i64":
        return tensors[name]
    return tensors[name].float()


# --------------------------------------------------------------------------------------------------------------
# The model

def hf_config(official_config):
    kwargs = copy.deepcopy(official_config)  # DeepseekV4Config mutates rope_scaling it is given
    for key in ("quantization_config", "architectures", "torch_dtype", "topk_method"):
        kwargs.pop(key, None)
    return DeepseekV4Config(**kwargs)


def random_value(name, shape, gen, cfg):
    """A random initial value for official tensor `name`, chosen so that every part of the model matters:
    unit-scale activations, varied mHC mixes, non-trivial sinks / position biases / router biases, and routed and
    shared SwiGLU pre-activations that exceed the clamp (swiglu_limit 10) for a few percent of the channels."""
    def normal(std, mean=0.0):
        return torch.randn(shape, generator=gen, dtype=torch.float32) * std + mean

    fan_in = shape[-1] if len(shape) > 1 else 1
    if name.endswith("tid2eid"):
        n_exp, k = cfg["n_routed_experts"], cfg["num_experts_per_tok"]
        return torch.stack([torch.randperm(n_exp, generator=gen)[:k] for _ in range(shape[0])]).to(torch.int64)
    if re.search(r"hc_(attn|ffn|head)_fn$", name):
        return normal(0.5 / math.sqrt(fan_in))
    if re.search(r"hc_(attn|ffn|head)_base$", name):
        return normal(0.5)
    if re.search(r"hc_(attn|ffn|head)_scale$", name):
        return normal(0.25, 1.0)
    if name.endswith("attn_sink"):
        return normal(1.0)
    if name.endswith(".ape"):
        return normal(0.5)
    if name.endswith("gate.bias"):
        return normal(0.1)
    if name.endswith("norm.weight"):
        return normal(0.1, 1.0)
    if name == "embed.weight":
        return normal(1.0)
    if re.search(r"experts\.(\d+\.)?w[13]\.weight$", name):
        return normal(3.5 / math.sqrt(fan_in))  # pre-activation std ~3.5: the clamp at 10 is hit
    if re.search(r"experts\.(\d+\.)?w2\.weight$", name):
        return normal(0.1 / math.sqrt(fan_in))
    if name.endswith("gate.weight"):
        return normal(2.0 / math.sqrt(fan_in))
    return normal(1.0 / math.sqrt(fan_in))


def hf_targets(model):
    """(hf_name, tensor) for every parameter and persistent buffer transformers saves."""
    for name, p in model.named_parameters():
        yield name, p
    for name, b in model.named_buffers():
        if "rotary_emb" not in name:
            yield name, b


def build_case_model(case):
    """-> (official config dict, f32 transformers model, official tensors {name: tensor})."""
    ocfg = copy.deepcopy(COMMON_CONFIG)
    ocfg.update(case["config"])
    gen = torch.Generator().manual_seed(case["seed"])
    torch.manual_seed(case["seed"])
    model = DeepseekV4ForCausalLM(hf_config(ocfg)).float().eval()
    inter = ocfg["moe_intermediate_size"]
    official = {}
    with torch.no_grad():
        for hf_name, target in hf_targets(model):
            merged = re.fullmatch(r"model\.layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)", hf_name)
            if merged:  # [E, 2I, D] = w1 rows then w3 rows per expert; [E, D, I] = w2 per expert
                prefix = f"layers.{merged.group(1)}"
                for e in range(target.shape[0]):
                    parts = ([("w1", slice(0, inter)), ("w3", slice(inter, 2 * inter))]
                             if merged.group(2) == "gate_up_proj" else [("w2", slice(None))])
                    for wname, rows in parts:
                        oname = f"{prefix}.ffn.experts.{e}.{wname}.weight"
                        value = random_value(oname, target[e, rows].shape, gen, ocfg)
                        official.update(encode(oname, value))
                        target[e, rows] = decode(oname, official)
                continue
            oname = official_name(hf_name)
            value = random_value(oname, tuple(target.shape), gen, ocfg)
            official.update(encode(oname, value))
            target.copy_(decode(oname, official).to(target.dtype))
        if ocfg["num_nextn_predict_layers"] > 0:
            official.update(random_mtp_tensors(ocfg, gen))
    return ocfg, model, official


def random_mtp_tensors(ocfg, gen):
    """mtp.0.*: a score-routed SWA block plus e_proj/h_proj/enorm/hnorm/norm/hc_head (MODEL_SPEC §5.7, §9.5),
    named and shaped by the same §9 restatement that check_official holds the files to."""
    out = {}
    for name, (dtype, shape) in expected_official_tensors(ocfg).items():
        if name.startswith("mtp.0.") and not name.endswith(".scale"):
            logical = (shape[0], 2 * shape[1]) if dtype == "I8" else tuple(shape)  # packed FP4: two per byte
            out.update(encode(name, random_value(name, logical, gen, ocfg)))
    return out


# --------------------------------------------------------------------------------------------------------------
# Forward with probes: top-k margins (indexer, score router) and SwiGLU clamp activity

class Probes:
    def __init__(self, model):
        self.indexer_scores, self.router_scores = {}, {}
        self.clamp = {"routed_gate_over": 0, "routed_up_over": 0, "routed_total": 0,
                      "shared_gate_over": 0, "shared_up_over": 0, "shared_total": 0}
        self.limit = model.config.swiglu_limit
        for i, layer in enumerate(model.model.layers):
            comp = layer.self_attn.compressor
            if isinstance(comp, hf_v4.DeepseekV4CSACompressor):
                comp.indexer.scorer.register_forward_hook(self._indexer(i))
            gate = layer.mlp.gate
            if isinstance(gate, hf_v4.DeepseekV4TopKRouter):
                gate.register_forward_hook(self._router(i, gate))
            self._wrap_experts(layer.mlp.experts)
            shared = layer.mlp.shared_experts
            shared.gate_proj.register_forward_hook(self._count("shared_gate_over", "shared_total", up=False))
            shared.up_proj.register_forward_hook(self._count("shared_up_over", None, up=True))

    def _indexer(self, i):
        def hook(_module, inputs, output):
            q, keys = inputs[0].detach()[0].double(), inputs[1].detach()[0].double()  # [S, H, D], [entries, D]
            # scores [S, entries] before the causal mask; per-head dots [S, H, entries] (their ReLU makes zeros)
            self.indexer_scores[i] = (output.detach()[0].double(), q @ keys.T)
        return hook

    def _router(self, i, gate):
        def hook(_module, _inputs, output):
            logits = output[0].detach()
            self.router_scores[i] = (gate.score_fn(logits) + gate.e_score_correction_bias).double()  # [S, E]
        return hook

    def _count(self, key, total_key, up):
        def hook(_module, _inputs, output):
            y = output.detach()
            self.clamp[key] += int(((y.abs() if up else y) > self.limit).sum())
            if total_key:
                self.clamp[total_key] += y.numel()
        return hook

    def _wrap_experts(self, experts):
        original = experts._apply_gate

        def apply_gate(gate_up):
            gate, up = gate_up.detach().chunk(2, dim=-1)
            self.clamp["routed_gate_over"] += int((gate > self.limit).sum())
            self.clamp["routed_up_over"] += int((up.abs() > self.limit).sum())
            self.clamp["routed_total"] += gate.numel()
            return original(gate_up)
        experts._apply_gate = apply_gate


def topk_margin(values, k):
    """Relative gap between the k-th and (k+1)-th largest value: (v_k - v_{k+1}) / max|v|."""
    top = torch.sort(values, descending=True).values
    scale = values.abs().max()
    return float((top[k - 1] - top[k]) / scale) if scale > 0 else 0.0


def indexer_margin(scores, dots, k):
    """topk_margin of one query's visible indexer scores, except when the boundary falls inside the block of
    exact zeros that the ReLU makes (every head's dot <= 0). Those ties are broken by the lower entry index;
    the choice is implementation independent only if the zeros are robust: every head's dot clearly negative,
    and the nearest non-zero scores clearly away from zero. -> (margin, decided_by_zero_tie)."""
    top = torch.sort(scores, descending=True).values
    if top[k - 1] != 0 or top[k] != 0:
        return topk_margin(scores, k), False
    scale, zero = scores.abs().max(), scores == 0
    gaps = [float(scores[scores > 0].min() / scale)] if (scores > 0).any() else []
    gaps += [float(-scores[scores < 0].max() / scale)] if (scores < 0).any() else []
    gaps.append(float(-dots[:, zero].max() / dots.abs().max()))
    return min(gaps), True


def margins(probes, cfg):
    """Smallest relative margin at every top-k boundary that decides something: the indexer's top-index_topk
    over the visible entries (only where more than index_topk are visible) and the score router's top-k."""
    ratio = cfg.compress_rates["compressed_sparse_attention"]
    out = {"indexer": {}, "router": {}}
    for layer, (scores, dots) in probes.indexer_scores.items():
        found = [indexer_margin(scores[t, : (t + 1) // ratio], dots[t, :, : (t + 1) // ratio], cfg.index_topk)
                 for t in range(scores.shape[0]) if min((t + 1) // ratio, scores.shape[1]) > cfg.index_topk]
        out["indexer"][layer] = {"boundaries": len(found),
                                 "min_rel_margin": min(m for m, _ in found) if found else None,
                                 "decided_by_zero_tie": sum(1 for _, z in found if z)}
    for layer, scores in probes.router_scores.items():
        found = [topk_margin(scores[t], cfg.num_experts_per_tok) for t in range(scores.shape[0])]
        out["router"][layer] = {"boundaries": len(found), "min_rel_margin": min(found)}
    every = [v["min_rel_margin"] for group in out.values() for v in group.values() if v["min_rel_margin"] is not None]
    return out, (min(every) if every else None)


def stable_topk(input, k, dim=-1, largest=True, sorted=True):
    """torch.topk whose equal values are taken lower index first (a stable sort), so ties are reproducible."""
    values, indices = torch.sort(input, dim=dim, descending=largest, stable=True)
    return torch.return_types.topk((values.narrow(dim, 0, k), indices.narrow(dim, 0, k)))


def logits_of(model, tokens):
    """float32 logits [T, vocab] of one prefill; top-k ties (indexer, router) go to the lower index."""
    saved = torch.topk, torch.Tensor.topk
    torch.topk, torch.Tensor.topk = stable_topk, stable_topk
    try:
        with torch.no_grad():
            return model(input_ids=torch.tensor([tokens]), use_cache=False).logits[0].float()
    finally:
        torch.topk, torch.Tensor.topk = saved


def rel_l2(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


def draw_tokens(model, case, vocab):
    """First draw (seeded) whose every top-k boundary clears MIN_REL_MARGIN, so no tie decides the goldens."""
    probes = Probes(model)
    for attempt in range(MAX_TOKEN_DRAWS):
        gen = torch.Generator().manual_seed(case["seed"] * 1000 + attempt)
        tokens = [0] + torch.randint(0, vocab, (case["tokens"] - 1,), generator=gen).tolist()  # BOS first
        probes.indexer_scores.clear()
        probes.router_scores.clear()
        for key in probes.clamp:
            probes.clamp[key] = 0
        logits = logits_of(model, tokens)
        detail, worst = margins(probes, model.config)
        print(f"  draw {attempt}: min relative top-k margin {worst}")
        if worst is None or worst >= MIN_REL_MARGIN:
            return tokens, attempt, logits, detail, worst, dict(probes.clamp)
    sys.exit(f"no token draw reached a top-k margin of {MIN_REL_MARGIN} in {MAX_TOKEN_DRAWS} tries; "
             f"change the case seed or its index_topk")


def set_swiglu_limit(model, limit):
    for layer in model.model.layers:
        layer.mlp.experts.limit = limit
        layer.mlp.shared_experts.limit = limit


FP32_KEPT_MODULES = set(hf_v4.DeepseekV4PreTrainedModel._keep_in_fp32_modules_strict)


def bf16_copy(model):
    """The bf16 model transformers would run: every parameter bf16 except the modules it keeps in float32.
    All weights here are bf16-exact, so the cast loses nothing (asserted)."""
    m = copy.deepcopy(model)
    for name, p in m.named_parameters():
        if not set(name.split(".")) & FP32_KEPT_MODULES:
            cast = p.data.to(torch.bfloat16)
            assert torch.equal(cast.float(), p.data), f"{name} is not bf16-exact"
            p.data = cast
    return m


# --------------------------------------------------------------------------------------------------------------
# Writing and checking the official layout

def write_official(folder, ocfg, tensors, shards):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(ocfg, f, indent=2)
        f.write("\n")
    if shards == 1:
        save_file(tensors, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
        return
    # Shard 1: embedding and the first half of the layers; shard 2: the rest (later layers, MTP, head, norms).
    half = ocfg["num_hidden_layers"] // 2
    def shard_of(name):
        m = re.match(r"layers\.(\d+)\.", name)
        return 0 if name == "embed.weight" or (m and int(m.group(1)) < half) else 1
    files = [f"model-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)]
    parts = [{}, {}]
    for name, t in tensors.items():
        parts[shard_of(name)][name] = t
    weight_map = {}
    for file, part in zip(files, parts):
        save_file(part, os.path.join(folder, file), metadata={"format": "pt"})
        weight_map.update({name: file for name in part})
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
        f.write("\n")


def expected_official_tensors(c):
    """{name: (dtype, shape)} of an official checkpoint with config c, restated from MODEL_SPEC §9.1-9.5."""
    d, vocab, hc = c["hidden_size"], c["vocab_size"], c["hc_mult"]
    h, hd, q_lora = c["num_attention_heads"], c["head_dim"], c["q_lora_rank"]
    g, r, inter, n_exp = c["o_groups"], c["o_lora_rank"], c["moe_intermediate_size"], c["n_routed_experts"]
    ih, ihd, mix = c["index_n_heads"], c["index_head_dim"], (2 + hc) * hc
    out = {}

    def put(name, dtype, shape):
        out[name] = (dtype, list(shape))

    def fp8(name, o, i):
        put(name + ".weight", "F8_E4M3", [o, i])
        put(name + ".scale", "F8_E8M0", [-(-o // 128), -(-i // 128)])

    def fp4(name, o, i):
        put(name + ".weight", "I8", [o, i // 2])
        put(name + ".scale", "F8_E8M0", [o, i // 32])

    def head(p):
        put(p + "hc_head_fn", "F32", [hc, hc * d])
        put(p + "hc_head_base", "F32", [hc])
        put(p + "hc_head_scale", "F32", [1])
        put(p + "norm.weight", "BF16", [d])

    def block(p, ratio, hashed):
        for n in ("attn_norm", "ffn_norm"):
            put(p + n + ".weight", "BF16", [d])
        for n in ("hc_attn", "hc_ffn"):
            put(p + n + "_fn", "F32", [mix, hc * d])
            put(p + n + "_base", "F32", [mix])
            put(p + n + "_scale", "F32", [3])
        put(p + "attn.attn_sink", "F32", [h])
        fp8(p + "attn.wq_a", q_lora, d)
        put(p + "attn.q_norm.weight", "BF16", [q_lora])
        fp8(p + "attn.wq_b", h * hd, q_lora)
        fp8(p + "attn.wkv", hd, d)
        put(p + "attn.kv_norm.weight", "BF16", [hd])
        fp8(p + "attn.wo_a", g * r, h * hd // g)
        fp8(p + "attn.wo_b", d, g * r)
        if ratio:
            width = (2 if ratio == 4 else 1) * hd
            put(p + "attn.compressor.wkv.weight", "BF16", [width, d])
            put(p + "attn.compressor.wgate.weight", "BF16", [width, d])
            put(p + "attn.compressor.ape", "F32", [ratio, width])
            put(p + "attn.compressor.norm.weight", "BF16", [hd])
        if ratio == 4:
            fp8(p + "attn.indexer.wq_b", ih * ihd, q_lora)
            put(p + "attn.indexer.weights_proj.weight", "BF16", [ih, d])
            put(p + "attn.indexer.compressor.wkv.weight", "BF16", [2 * ihd, d])
            put(p + "attn.indexer.compressor.wgate.weight", "BF16", [2 * ihd, d])
            put(p + "attn.indexer.compressor.ape", "F32", [4, 2 * ihd])
            put(p + "attn.indexer.compressor.norm.weight", "BF16", [ihd])
        put(p + "ffn.gate.weight", "BF16", [n_exp, d])
        if hashed:
            put(p + "ffn.gate.tid2eid", "I64", [vocab, c["num_experts_per_tok"]])
        else:
            put(p + "ffn.gate.bias", "F32", [n_exp])
        fp8(p + "ffn.shared_experts.w1", inter, d)
        fp8(p + "ffn.shared_experts.w3", inter, d)
        fp8(p + "ffn.shared_experts.w2", d, inter)
        for e in range(n_exp):
            fp4(p + f"ffn.experts.{e}.w1", inter, d)
            fp4(p + f"ffn.experts.{e}.w3", inter, d)
            fp4(p + f"ffn.experts.{e}.w2", d, inter)

    put("embed.weight", "BF16", [vocab, d])
    put("head.weight", "BF16", [vocab, d])
    head("")
    n_layers = c["num_hidden_layers"]
    for i in range(n_layers):
        block(f"layers.{i}.", c["compress_ratios"][i], i < c["num_hash_layers"])
    if c["num_nextn_predict_layers"] > 0:
        block("mtp.0.", c["compress_ratios"][n_layers], False)
        fp8("mtp.0.e_proj", d, d)
        fp8("mtp.0.h_proj", d, d)
        put("mtp.0.enorm.weight", "BF16", [d])
        put("mtp.0.hnorm.weight", "BF16", [d])
        head("mtp.0.")
    return out


def read_headers(folder):
    """{name: (dtype, shape, file)} from the raw safetensors headers of every file of the folder."""
    index = os.path.join(folder, "model.safetensors.index.json")
    files = (sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index)
             else ["model.safetensors"])
    found = {}
    for file in files:
        with open(os.path.join(folder, file), "rb") as f:
            header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
        for name, info in header.items():
            if name != "__metadata__":
                assert name not in found, f"{name} appears in two shards"
                found[name] = (info["dtype"], info["shape"], file)
    if os.path.exists(index):
        weight_map = json.load(open(index))["weight_map"]
        assert weight_map == {n: v[2] for n, v in found.items()}, "index weight_map disagrees with the shards"
    return found


def check_official(folder, ocfg, model, tokens, logits):
    """Reads the official layout back and proves it holds the transformers model bit for bit."""
    found = read_headers(folder)
    expected = expected_official_tensors(ocfg)
    missing, extra = sorted(set(expected) - set(found)), sorted(set(found) - set(expected))
    assert not missing and not extra, f"official tensor names differ from MODEL_SPEC §9: missing {missing[:8]}, " \
                                      f"unexpected {extra[:8]}"
    for name, (dtype, shape) in expected.items():
        assert found[name][:2] == (dtype, shape), f"{name}: file has {found[name][:2]}, §9 says {(dtype, shape)}"
    tensors = {}
    for file in sorted({v[2] for v in found.values()}):
        with safe_open(os.path.join(folder, file), framework="pt") as f:
            for name in f.keys():
                tensors[name] = f.get_tensor(name)
    # Dequantise under the official names and let transformers' own key renaming load them.
    dequant = {name: decode(name, tensors).contiguous() for name in tensors if not name.endswith(".scale")}
    with tempfile.TemporaryDirectory() as tmp:
        cfg = {k: v for k, v in ocfg.items() if k != "quantization_config"}
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(cfg, f)
        save_file(dequant, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
        loaded, info = DeepseekV4ForCausalLM.from_pretrained(tmp, dtype=torch.float32, output_loading_info=True)
    unexpected = [k for k in info["unexpected_keys"] if not k.startswith("mtp.")]
    assert not info["missing_keys"] and not unexpected and not info["mismatched_keys"], \
        f"transformers could not map the official names: {info}"
    compare_models(loaded, model, "official layout")
    again = logits_of(loaded.eval(), tokens)
    assert torch.equal(again, logits), f"official layout: logits differ, rel_l2 {rel_l2(again, logits)}"
    counts = {}
    for dtype, _shape, _file in found.values():
        counts[dtype] = counts.get(dtype, 0) + 1
    return {"tensors": len(found), "by_dtype": dict(sorted(counts.items())),
            "mtp_tensors": sum(1 for n in found if n.startswith("mtp."))}


def compare_models(loaded, model, what):
    got = dict(hf_targets(loaded))
    for name, want in hf_targets(model):
        assert name in got, f"{what}: {name} missing"
        assert got[name].dtype == want.dtype, f"{what}: {name} is {got[name].dtype}, want {want.dtype}"
        assert torch.equal(got[name], want), f"{what}: {name} differs"


def check_transformers(folder, model, tokens, logits):
    loaded = DeepseekV4ForCausalLM.from_pretrained(folder).eval()  # the dtype recorded in config.json: float32
    compare_models(loaded, model, "transformers layout")
    again = logits_of(loaded, tokens)
    assert torch.equal(again, logits), f"transformers layout: logits differ, rel_l2 {rel_l2(again, logits)}"


# --------------------------------------------------------------------------------------------------------------

def folder_bytes(folder):
    return sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(folder) for f in files)


def short_prompt_check(model, case, ocfg, tokens, logits, logits16):
    """A case may name a prefix shorter than the sliding window as its short prompt: the forward is causal, so the
    golden rows [0, P) are that prompt's logits. Proven by a separate prefill of the prefix alone (equal up to
    float32 summation order, same top-1 everywhere). -> meta.json `short_prompt`, or None."""
    p = case.get("short_prompt")
    if not p:
        return None
    assert p < ocfg["sliding_window"] and p < len(tokens), f"short_prompt {p} must be shorter than the window"
    alone = logits_of(model, tokens[:p])
    rel, max_abs = rel_l2(alone, logits[:p]), float((alone - logits[:p]).abs().max())
    assert rel <= 1e-5 and torch.equal(alone.argmax(-1), logits[:p].argmax(-1)), \
        f"prefix of {p} tokens run alone differs from the golden rows: rel_l2 {rel}, max |d| {max_abs}"
    print(f"  short prompt: {p} tokens run alone vs golden rows rel_l2 {rel:.2e}")
    return {"tokens": p, "rows": [0, p],
            "alone_vs_golden_rows": {"rel_l2": rel, "max_abs": max_abs},
            "transformers_bf16_vs_f32": rel_l2(logits16[:p], logits[:p])}


def make_case(name, case, out_root):
    print(f"[{name}] building")
    out = os.path.join(out_root, name)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    ocfg, model, official = build_case_model(case)
    tokens, attempt, logits, margin_detail, worst, clamp = draw_tokens(model, case, ocfg["vocab_size"])
    assert clamp["routed_gate_over"] > 0 and clamp["shared_gate_over"] > 0, f"SwiGLU clamp never active: {clamp}"

    set_swiglu_limit(model, float("inf"))
    rel_no_clamp = rel_l2(logits_of(model, tokens), logits)
    set_swiglu_limit(model, ocfg["swiglu_limit"])
    model16 = bf16_copy(model)
    logits16 = logits_of(model16, tokens)
    rel_bf16 = rel_l2(logits16, logits)
    rel_bf16_rows = [rel_l2(logits16[t], logits[t]) for t in range(len(tokens))]
    print(f"  rel_l2 bf16 vs f32 {rel_bf16:.3e}; without the SwiGLU clamp {rel_no_clamp:.3e}")
    short = short_prompt_check(model, case, ocfg, tokens, logits, logits16)

    # transformers layout: written from the bf16 model (every bf16 parameter is bf16-exact, float32-kept modules
    # stay float32); config dtype float32 so a plain from_pretrained builds the float32 model.
    tdir = os.path.join(out, "transformers")
    if case["transformers_layout"]:
        model16.save_pretrained(tdir, save_original_format=False)
        with open(os.path.join(tdir, "config.json")) as f:
            tcfg = json.load(f)
        tcfg["dtype"] = "float32"  # save_pretrained records bfloat16; a bf16-loaded V4 fails at its first forward
        with open(os.path.join(tdir, "config.json"), "w") as f:
            json.dump(tcfg, f, indent=2, sort_keys=True)
            f.write("\n")
        check_transformers(tdir, model, tokens, logits)
    odir = os.path.join(out, "official")
    write_official(odir, ocfg, official, case["shards"])
    official_summary = check_official(odir, ocfg, model, tokens, logits)
    print(f"  verified {'both layouts' if case['transformers_layout'] else 'official layout'}: {official_summary}")

    with open(os.path.join(out, "tokens.txt"), "w") as f:
        f.write(",".join(str(t) for t in tokens) + "\n")
    arr = logits.numpy().astype("<f4")
    np.save(os.path.join(out, "logits_f32.npy"), arr)
    meta = {
        "case": name,
        "made_by": "tests/reference/make_goldens.py",
        "reference": "transformers DeepseekV4ForCausalLM, float32, eager attention, one prefill from position 0 "
                     "(use_cache=False)",
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "safetensors": safetensors.__version__,
                     "numpy": np.__version__},
        "seeds": {"weights": case["seed"], "tokens": case["seed"] * 1000 + attempt, "token_draw": attempt},
        "tokens": len(tokens),
        "layer_types": model.config.layer_types,
        "mlp_layer_types": model.config.mlp_layer_types,
        "compress_ratios": ocfg["compress_ratios"],
        "index_topk": ocfg["index_topk"],
        "compressed_entries": {str(i): len(tokens) // r for i, r in enumerate(ocfg["compress_ratios"][:-1]) if r},
        "logits": {"file": "logits_f32.npy", "dtype": "<f4", "shape": list(arr.shape),
                   "sha256": hashlib.sha256(arr.tobytes()).hexdigest(), "rms": float(np.sqrt((arr ** 2).mean()))},
        "rel_l2": {"transformers_bf16_vs_f32": rel_bf16,
                   "transformers_bf16_vs_f32_per_position": {"median": float(np.median(rel_bf16_rows)),
                                                             "max": max(rel_bf16_rows)},
                   "f32_without_swiglu_clamp_vs_f32": rel_no_clamp},
        "topk_margins": {"definition": "(v_k - v_{k+1}) / max|v| over the row's candidates; indexer rows are the "
                                       "entries visible to the query, only where more than index_topk are visible. "
                                       "A boundary inside the block of exact ReLU zeros is decided by the lower entry "
                                       "index; its margin is the smallest of: nearest non-zero score / max|v|, and "
                                       "-max head dot of the zero entries / max|dot|",
                         "tie_break": "equal scores: the lower index is selected (indexer and router)",
                         "required_min": MIN_REL_MARGIN, "min": worst,
                         "indexer": {str(k): v for k, v in margin_detail["indexer"].items()},
                         "router": {str(k): v for k, v in margin_detail["router"].items()}},
        "swiglu_clamp_activity": clamp,
        "short_prompt": short,
        "official_layout": official_summary,
        "layouts": ["official"] + (["transformers"] if case["transformers_layout"] else []),
        "bytes": {"official": folder_bytes(odir), "transformers": folder_bytes(tdir) if case["transformers_layout"]
                  else 0},
    }
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    print(f"  wrote {out} ({folder_bytes(out) / 1e6:.2f} MB)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="tests/data/goldens", help="output folder (one subfolder per case)")
    parser.add_argument("--case", action="append", choices=sorted(CASES), help="only these cases (repeatable)")
    args = parser.parse_args()
    assert hasattr(transformers.models, "deepseek_v4"), "this transformers has no models/deepseek_v4"
    torch.use_deterministic_algorithms(True)
    for name in args.case or list(CASES):
        make_case(name, CASES[name], args.out)


if __name__ == "__main__":
    main()
