#!/usr/bin/env python3
"""Generate golden fixtures for ssmc from Hugging Face transformers.

Usage:
    PYTHONUNBUFFERED=1 python3 tools/gen_golden.py OUT_DIR [FIXTURE ...]
    python3 tools/gen_golden.py --list
Options: --jobs N (fixtures made at the same time; default: one per CPU, at most 16),
         --timeout SECONDS (per fixture; default 450).

Needs torch, transformers (5.x; the fixtures were made with 5.17.0), safetensors.
Runs entirely on CPU in float32, so the results are deterministic and always come
from transformers' pure-PyTorch ("slow") reference path, never from mamba_ssm /
causal_conv1d CUDA kernels.

Every fixture is made in its own worker process (this script, --worker), with one
torch thread, several at a time: a fixture that fails (an exception, a crash, a
timeout) is reported and the others go on; the exit status is non-zero if any
fixture failed or any check did not pass. Each fixture's log is printed when it
ends, then a summary table.

The fixtures of the original families are defined in FIXTURES below; those of
the hybrid-family zoo (Bamba, Nemotron-H, Falcon-H1, GraniteMoeHybrid, Zamba2,
LFM2, RecurrentGemma, Jamba with experts, Mamba-2 with time_step_limit) in
tools/gen_golden_zoo.py (ZOO_FIXTURES), and tools/zoo_make.py makes and checks
them.

For each fixture it writes OUT_DIR/<fixture>/:
    config.json, generation_config.json   as written by save_pretrained
    model.safetensors (or model.safetensors.index.json + shards)
    golden.json    prompt, greedy generated tokens, metadata
    logits.f32     raw little-endian float32 [rows, vocab], row-major:
                   logits of model(prompt + generated[:-1]) for every position
See tests/data/README.md.
"""

import copy
import json
import logging
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import traceback

import torch
import transformers
from transformers import (
    FalconMambaConfig,
    FalconMambaForCausalLM,
    JambaConfig,
    JambaForCausalLM,
    Mamba2Config,
    Mamba2ForCausalLM,
    MambaConfig,
    MambaForCausalLM,
)

# name, class, config kwargs, seed, prompt length, new tokens, weight dtype, shard size
FIXTURES = [
    dict(
        name="mamba1_tiny",
        half=("bf16",),
        cls="mamba",
        seed=1001,
        prompt_len=8,
        new_tokens=8,
        dtype="f32",
        shard=None,
        config=dict(
            vocab_size=1000, hidden_size=64, state_size=16, time_step_rank="auto",
            conv_kernel=4, num_hidden_layers=2, expand=2, tie_word_embeddings=True,
            use_bias=False, use_conv_bias=True,
        ),
    ),
    dict(
        name="mamba1_untied",
        cls="mamba",
        seed=1002,
        prompt_len=9,
        new_tokens=10,
        dtype="f32",
        shard=None,
        config=dict(
            vocab_size=757, hidden_size=48, state_size=8, time_step_rank=7,
            conv_kernel=3, num_hidden_layers=3, expand=2, tie_word_embeddings=False,
            use_bias=True, use_conv_bias=True, layer_norm_epsilon=1e-6,
        ),
    ),
    dict(
        name="mamba1_f16_sharded",
        cls="mamba",
        seed=1003,
        prompt_len=11,
        new_tokens=9,
        dtype="f16",
        shard="40KB",
        config=dict(
            vocab_size=509, hidden_size=32, state_size=4, time_step_rank=3,
            conv_kernel=2, num_hidden_layers=2, expand=3, tie_word_embeddings=True,
            use_bias=False, use_conv_bias=True,
        ),
    ),
    dict(
        name="falcon_tiny",
        cls="falcon",
        seed=1004,
        prompt_len=7,
        new_tokens=9,
        dtype="f32",
        shard=None,
        config=dict(
            vocab_size=1000, hidden_size=64, state_size=16, time_step_rank="auto",
            conv_kernel=4, num_hidden_layers=2, expand=2, tie_word_embeddings=True,
            use_bias=False, use_conv_bias=True, mixer_rms_eps=1e-6,
        ),
    ),
    dict(
        name="falcon_bf16_untied",
        cls="falcon",
        seed=1005,
        prompt_len=10,
        new_tokens=8,
        dtype="bf16",
        shard=None,
        config=dict(
            vocab_size=611, hidden_size=40, state_size=12, time_step_rank=5,
            conv_kernel=3, num_hidden_layers=3, expand=2, tie_word_embeddings=False,
            use_bias=True, use_conv_bias=True, mixer_rms_eps=1e-5,
            layer_norm_epsilon=1e-5,
        ),
    ),
    # Falcon-Mamba with a dt rank above SSM_SMALL_ROW (64): its dt norm is a
    # large-row rmsnorm, which decode computes in the scan's prologue with
    # dt_proj (passes/fuse.c), as falcon-mamba-7b's rank of 256 does.
    dict(
        name="falcon_wide_dt",
        cls="falcon",
        seed=1006,
        prompt_len=9,
        new_tokens=8,
        dtype="f32",
        shard=None,
        config=dict(
            vocab_size=503, hidden_size=48, state_size=8, time_step_rank=80,
            conv_kernel=4, num_hidden_layers=2, expand=2, tie_word_embeddings=True,
            use_bias=False, use_conv_bias=True, mixer_rms_eps=1e-6,
        ),
    ),
    # Mamba-2: num_heads * head_dim must equal expand * hidden_size.
    dict(
        name="mamba2_tiny",
        cls="mamba2",
        seed=1006,
        prompt_len=8,
        new_tokens=8,
        dtype="f32",
        shard=None,
        config=dict(
            vocab_size=1000, hidden_size=64, expand=2, num_heads=8, head_dim=16,
            state_size=16, n_groups=1, conv_kernel=4, num_hidden_layers=2,
            tie_word_embeddings=True, use_bias=False, use_conv_bias=True,
        ),
    ),
    dict(
        name="mamba2_groups",
        cls="mamba2",
        seed=1007,
        prompt_len=9,
        new_tokens=10,
        dtype="f32",
        shard=None,
        # chunk_size 4: transformers' full forward runs its chunked (SSD) path
        # over several chunks, with the inter-chunk state recurrence
        config=dict(
            vocab_size=757, hidden_size=48, expand=2, num_heads=4, head_dim=24,
            state_size=8, n_groups=2, conv_kernel=4, num_hidden_layers=3,
            tie_word_embeddings=False, use_bias=True, use_conv_bias=True,
            layer_norm_epsilon=1e-6, chunk_size=4,
        ),
    ),
    dict(
        name="mamba2_bigstate",
        cls="mamba2",
        seed=1008,
        prompt_len=10,
        new_tokens=8,
        dtype="f32",
        shard=None,
        # one head per group
        config=dict(
            vocab_size=509, hidden_size=32, expand=2, num_heads=2, head_dim=32,
            state_size=64, n_groups=2, conv_kernel=3, num_hidden_layers=2,
            tie_word_embeddings=True, use_bias=False, use_conv_bias=True,
        ),
    ),
    # Jamba (JambaForCausalLM): Mamba layers with weighted dt/B/C RMSNorms,
    # grouped-query attention (no positional embedding) every attn_layer_period
    # layers, and a dense SwiGLU MLP in every layer (num_experts=1). Untied
    # embeddings; sizes kept small enough for an untied f32 vocab under 600 KB.
    dict(
        name="jamba_tiny",
        half=("bf16", "f16"),
        cls="jamba",
        seed=1006,
        prompt_len=8,
        new_tokens=8,
        dtype="f32",
        shard=None,
        config=dict(
            vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
            attn_layer_period=2, attn_layer_offset=1,  # attention at layers 1 and 3
            num_attention_heads=4, num_key_value_heads=2,
            num_experts=1, num_experts_per_tok=1,
            mamba_d_state=16, mamba_d_conv=4, mamba_expand=2, mamba_dt_rank="auto",
            mamba_conv_bias=True, mamba_proj_bias=False, rms_norm_eps=1e-6,
            tie_word_embeddings=False, use_mamba_kernels=False,
        ),
    ),
    dict(
        name="jamba_gqa",
        cls="jamba",
        seed=1007,
        prompt_len=9,
        new_tokens=10,
        dtype="bf16",
        shard=None,
        config=dict(
            vocab_size=757, hidden_size=48, intermediate_size=80, num_hidden_layers=4,
            attn_layer_period=2, attn_layer_offset=0,  # attention at layers 0 and 2
            num_attention_heads=6, num_key_value_heads=2,
            num_experts=1, num_experts_per_tok=1,
            mamba_d_state=8, mamba_d_conv=3, mamba_expand=2, mamba_dt_rank=5,
            mamba_conv_bias=True, mamba_proj_bias=True, rms_norm_eps=1e-5,
            tie_word_embeddings=False, use_mamba_kernels=False,
        ),
    ),
]

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_golden_zoo as zoo  # noqa: E402  (the hybrid-family zoo's definitions)
import zoo_make  # noqa: E402  (how a zoo fixture is made and checked)

ALL_FIXTURES = FIXTURES + zoo.ZOO_FIXTURES
FIXTURE_BY_NAME = {fx["name"]: fx for fx in ALL_FIXTURES}
assert len(FIXTURE_BY_NAME) == len(ALL_FIXTURES), "duplicate fixture names"

TORCH_DTYPE = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
SAFETENSORS_DTYPE = {"f32": "F32", "f16": "F16", "bf16": "BF16"}
KEEP_FILES = {"config.json", "generation_config.json", "model.safetensors.index.json"}


def log(*a):
    print(*a, flush=True)


def kernel_report():
    """Which optional fast-path packages import (they must not, or we are on CPU anyway)."""
    rep = {}
    for mod in ("mamba_ssm", "causal_conv1d"):
        try:
            __import__(mod)
            rep[mod] = "importable"
        except Exception as e:  # noqa: BLE001
            rep[mod] = "import fails: %s: %s" % (type(e).__name__, e)
    return rep


def reinit_(model, cfg):
    """Re-initialise every parameter so that every part of the model matters."""
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied params appear once
            if name.endswith("A_log"):
                p.copy_(torch.log(torch.empty_like(p).uniform_(1.0, 16.0)))
            elif name.endswith(".D"):
                p.copy_(torch.randn_like(p))
            elif name.endswith("dt_proj.bias") or name.endswith("dt_bias"):
                dt = torch.empty_like(p).uniform_(0.001, 0.1)
                p.copy_(torch.log(torch.expm1(dt)))  # softplus^-1
            elif name.endswith(("dt_layernorm.weight", "b_layernorm.weight", "c_layernorm.weight")):
                # Jamba's mixer norms carry weights: make them matter
                p.copy_(torch.empty_like(p).uniform_(0.5, 1.5))
            elif name.endswith(("q_proj.weight", "k_proj.weight")):
                # attention scores O(4): softmax far from uniform
                p.copy_(2.0 * torch.randn_like(p) / math.sqrt(p.shape[1]))
            elif name.endswith("embed_tokens.weight"):
                p.copy_(0.2 * torch.randn_like(p))
            elif name.endswith("norm.weight") or name.endswith("norm_f.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif name.endswith("embeddings.weight") or name.endswith("lm_head.weight"):
                p.copy_(0.2 * torch.randn_like(p))
            elif name.endswith("conv1d.weight"):
                # [intermediate, 1, kernel]: depthwise, fan_in = kernel
                p.copy_(torch.randn_like(p) / math.sqrt(p.shape[-1]))
            elif name.endswith(".weight") and p.dim() == 2:
                # Linear [out, in]: keep activations O(1)
                p.copy_(torch.randn_like(p) / math.sqrt(p.shape[1]))
            elif name.endswith(".bias"):
                p.copy_(0.2 * torch.randn_like(p))
            else:
                log("  NOTE: unexpected parameter %s %s -> normal*0.2" % (name, tuple(p.shape)))
                p.copy_(0.2 * torch.randn_like(p))


PROBLEMS = []


def check(cond, msg):
    """Non-fatal check: log and remember, exit non-zero at the end."""
    if not cond:
        log("  PROBLEM:", msg)
        PROBLEMS.append(msg)
    return cond


class FallbackCapture(logging.Handler):
    """Collects transformers' 'falling back to its reference PyTorch implementation'
    messages: proof that no mamba_ssm / causal_conv1d kernel was used."""

    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        msg = record.getMessage()
        if "fall" in msg and "back" in msg and msg not in self.messages:
            self.messages.append(msg)


FALLBACKS = FallbackCapture()


def full_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids], dtype=torch.long)).logits[0].float()


def sensitivity(model, ids, ref):
    """max |delta logits| when one component is disturbed: proves each matters."""
    out = {}

    def probe(label, fn):
        m = copy.deepcopy(model)
        with torch.no_grad():
            for layer in m.backbone.layers:
                fn(layer.mixer)
        out[label] = float((full_logits(m, ids) - ref).abs().max())

    if isinstance(model, Mamba2ForCausalLM):
        sensitivity_mamba2(model, probe)
        return out
    inter = model.config.intermediate_size
    probe("D=0", lambda mx: mx.D.zero_())
    probe("conv_taps_except_last=0", lambda mx: mx.conv1d.weight[..., :-1].zero_())
    probe("A_log+3 (faster decay)", lambda mx: mx.A_log.add_(3.0))
    probe("dt_bias-1", lambda mx: mx.dt_proj.bias.sub_(1.0))
    probe("gate_rows*0.5", lambda mx: mx.in_proj.weight[inter:].mul_(0.5))
    gen = torch.Generator().manual_seed(99)

    def xnoise(mx):
        w = mx.x_proj.weight
        w.add_(0.3 * w.std() * torch.randn(w.shape, generator=gen))

    # (scaling x_proj would be a no-op for Falcon, which RMS-normalises dt, B, C)
    probe("x_proj+noise", xnoise)
    return out


def sensitivity_mamba2(model, probe):
    """Mamba-2 in_proj rows are [gate z (I) | x (I) | B (G*N) | C (G*N) | dt (H)];
    the conv runs over x|B|C."""
    cfg = model.config
    inter = cfg.expand * cfg.hidden_size
    G, N, H = cfg.n_groups, cfg.state_size, cfg.num_heads
    b0, c0, d0 = 2 * inter, 2 * inter + G * N, 2 * inter + 2 * G * N
    gen = torch.Generator().manual_seed(99)

    def noise(w):
        w.add_(0.3 * w.std() * torch.randn(w.shape, generator=gen))

    probe("D=0", lambda mx: mx.D.zero_())
    probe("conv_taps_except_last=0", lambda mx: mx.conv1d.weight[..., :-1].zero_())
    probe("A_log+3 (faster decay)", lambda mx: mx.A_log.add_(3.0))
    probe("dt_bias-1", lambda mx: mx.dt_bias.sub_(1.0))
    probe("gate_rows*0.5", lambda mx: mx.in_proj.weight[:inter].mul_(0.5))
    probe("B_rows+noise", lambda mx: noise(mx.in_proj.weight[b0:c0]))
    probe("C_rows+noise", lambda mx: noise(mx.in_proj.weight[c0:d0]))
    probe("dt_rows+noise", lambda mx: noise(mx.in_proj.weight[d0:]))
    probe("gated_norm_weight+noise", lambda mx: noise(mx.norm.weight))
    if G > 1:
        def share(mx):  # every group's B and C = group 0's: n_groups collapses to 1
            for start in (b0, c0):
                for g in range(1, G):
                    dst = slice(start + g * N, start + (g + 1) * N)
                    src = slice(start, start + N)
                    mx.in_proj.weight[dst] = mx.in_proj.weight[src]
                    if mx.in_proj.bias is not None:
                        mx.in_proj.bias[dst] = mx.in_proj.bias[src]
                    cs = slice(dst.start - inter, dst.stop - inter)
                    cd = slice(src.start - inter, src.stop - inter)
                    mx.conv1d.weight[cs] = mx.conv1d.weight[cd]
                    if mx.conv1d.bias is not None:
                        mx.conv1d.bias[cs] = mx.conv1d.bias[cd]

        probe("B_C_groups_shared", share)


def gated_norm_kind(model):
    """How transformers' gated RMSNorm normalises y*silu(z): over the whole
    intermediate ('full') or per group of intermediate/n_groups ('per_group')."""
    mx = model.backbone.layers[0].mixer
    cfg = model.config
    inter = cfg.expand * cfg.hidden_size
    g = torch.Generator().manual_seed(5)
    y = torch.randn(1, 3, inter, generator=g)
    z = torch.randn(1, 3, inter, generator=g)
    y[..., : inter // 2] *= 10.0  # groups of very different scale
    with torch.no_grad():
        got = mx.norm(y, z)
    eps = mx.norm.variance_epsilon
    h = y * torch.nn.functional.silu(z)
    full = mx.norm.weight * h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    G = cfg.n_groups
    hg = h.view(1, 3, G, inter // G)
    grp = hg * torch.rsqrt(hg.pow(2).mean(-1, keepdim=True) + eps)
    grp = mx.norm.weight * grp.view(1, 3, inter)
    kinds = []
    if (got - full).abs().max() < 1e-5:
        kinds.append("full")
    if (got - grp).abs().max() < 1e-5:
        kinds.append("per_group")
    return "+".join(kinds) or "neither"


def sensitivity_jamba(model, ids, ref):
    """max |delta logits| per disturbed component of a Jamba model."""
    out = {}
    layers = model.model.layers

    def probe(label, fn):
        m = copy.deepcopy(model)
        with torch.no_grad():
            for i, layer in enumerate(m.model.layers):
                fn(i, layer)
        out[label] = float((full_logits(m, ids) - ref).abs().max())

    def mixer(fn):
        return lambda i, l: fn(l.mamba) if hasattr(l, "mamba") else None

    probe("D=0", mixer(lambda mx: mx.D.zero_()))
    probe("conv_taps_except_last=0", mixer(lambda mx: mx.conv1d.weight[..., :-1].zero_()))
    probe("A_log+3 (faster decay)", mixer(lambda mx: mx.A_log.add_(3.0)))
    probe("dt_bias-1", mixer(lambda mx: mx.dt_proj.bias.sub_(1.0)))
    probe("dt_layernorm.weight=1", mixer(lambda mx: mx.dt_layernorm.weight.fill_(1.0)))
    probe("b_layernorm.weight=1", mixer(lambda mx: mx.b_layernorm.weight.fill_(1.0)))
    probe("c_layernorm.weight=1", mixer(lambda mx: mx.c_layernorm.weight.fill_(1.0)))
    for k, layer in enumerate(layers):
        if hasattr(layer, "self_attn"):
            # q*0.5 flattens the softmax: only matters if attention is not uniform
            probe("layer%d q_proj*0.5" % k,
                  lambda i, l, k=k: l.self_attn.q_proj.weight.mul_(0.5) if i == k else None)
            probe("layer%d v_proj*0.5" % k,
                  lambda i, l, k=k: l.self_attn.v_proj.weight.mul_(0.5) if i == k else None)
    probe("mlp up_proj*0.5", lambda i, l: l.feed_forward.up_proj.weight.mul_(0.5))
    probe("pre_ff_layernorm.weight=1", lambda i, l: l.pre_ff_layernorm.weight.fill_(1.0))
    return out


def read_safetensors_dtypes(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        hdr = json.loads(f.read(n))
    return {k: v["dtype"] for k, v in hdr.items() if k != "__metadata__"}


def build(fx):
    c = dict(fx["config"])
    c.update(bos_token_id=0, eos_token_id=0, pad_token_id=0)
    if fx["cls"] == "mamba":
        config = MambaConfig(**c)
        model = MambaForCausalLM(config)
    elif fx["cls"] == "mamba2":
        config = Mamba2Config(**c)
        model = Mamba2ForCausalLM(config)
    elif fx["cls"] == "jamba":
        config = JambaConfig(**c)
        config._attn_implementation = "eager"
        model = JambaForCausalLM(config)
        log("  layers_block_type", config.layers_block_type,
            "layers_num_experts", getattr(config, "layers_num_experts", None))
        log("  modules", [type(l).__name__ + ":" + type(l.feed_forward).__name__
                          for l in model.model.layers])
    else:
        config = FalconMambaConfig(**c)
        model = FalconMambaForCausalLM(config)
    return model


MIN_MARGIN = 0.05    # wanted gap between best and second-best logit at each step
MIN_DISTINCT = 3     # wanted number of distinct generated tokens
SEED_TRIES = 40


def attempt(fx, seed):
    """Build, initialise, generate and check one candidate model for a fixture."""
    torch.manual_seed(seed)
    model = build(fx).to(torch.float32).eval()
    cfg = model.config
    reinit_(model, cfg)
    emb = model.get_input_embeddings().weight
    if cfg.tie_word_embeddings:
        assert model.lm_head.weight.data_ptr() == emb.data_ptr(), "tie broken"
    else:
        assert model.lm_head.weight.data_ptr() != emb.data_ptr()

    wdt = fx["dtype"]
    if wdt != "f32":
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(TORCH_DTYPE[wdt]).float())

    V = cfg.vocab_size
    g = torch.Generator().manual_seed(seed + 7)
    prompt = torch.randint(1, V, (fx["prompt_len"],), generator=g).tolist()
    N = fx["new_tokens"]

    gc = model.generation_config
    gc.eos_token_id = None
    gc.bos_token_id = None
    gc.pad_token_id = 0
    gc.do_sample = False
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt], dtype=torch.long),
            max_new_tokens=N,
            min_new_tokens=N,
            do_sample=False,
            output_scores=True,
            output_logits=True,
            return_dict_in_generate=True,
            eos_token_id=None,
            pad_token_id=0,
        )
    seq = out.sequences[0].tolist()
    assert seq[: len(prompt)] == prompt, "generate did not echo prompt"
    generated = seq[len(prompt):]
    assert len(generated) == N, "generated %d tokens, wanted %d" % (len(generated), N)
    scores = torch.stack([s[0].float() for s in out.scores])  # [N, V]
    glogits = torch.stack([s[0].float() for s in out.logits])  # [N, V]

    full = prompt + generated[:-1]
    logits = full_logits(model, full)  # [R, V]
    R = len(full)
    assert logits.shape == (R, V), logits.shape
    tail = logits[len(prompt) - 1:]
    assert tail.shape[0] == N
    score_diff = float((scores - tail).abs().max())
    glogit_diff = float((glogits - tail).abs().max())
    argmax = tail.argmax(-1).tolist()
    argmax_ok = argmax == generated
    # margin between best and second-best at each generated step (robustness)
    top2 = tail.topk(2, dim=-1).values
    min_margin = float((top2[:, 0] - top2[:, 1]).min())
    max_abs = float(logits.abs().max())
    distinct = len(set(generated))
    return dict(model=model, prompt=prompt, generated=generated, full=full, logits=logits,
                R=R, V=V, score_diff=score_diff, glogit_diff=glogit_diff,
                min_margin=min_margin, max_abs=max_abs, distinct=distinct, seed=seed,
                argmax_ok=argmax_ok, argmax=argmax)


def gen_fixture(fx, outroot, kernels):
    name = fx["name"]
    log("=" * 70)
    log("fixture", name)
    # Deterministic seed search: first seed whose greedy path is robust
    # (top-2 margin >= MIN_MARGIN) and not degenerate (>= MIN_DISTINCT tokens).
    best = None
    for i in range(SEED_TRIES):
        a = attempt(fx, fx["seed"] + 1000 * i)
        ok = a["argmax_ok"] and a["min_margin"] >= MIN_MARGIN and a["distinct"] >= MIN_DISTINCT
        key = (a["argmax_ok"], min(a["min_margin"], MIN_MARGIN), a["distinct"])
        if best is None or key > best[0]:
            best = (key, a)
        if ok:
            break
    a = best[1]
    assert a["argmax_ok"], ("argmax of logits != generated", a["argmax"], a["generated"])
    log("  seed %d chosen after %d tries (margin %.4g, %d distinct tokens)"
        % (a["seed"], i + 1, a["min_margin"], a["distinct"]))
    check(a["min_margin"] >= MIN_MARGIN, "%s: small top-2 margin %.4g" % (name, a["min_margin"]))
    model, prompt, generated, full, logits = a["model"], a["prompt"], a["generated"], a["full"], a["logits"]
    R, V, score_diff, glogit_diff = a["R"], a["V"], a["score_diff"], a["glogit_diff"]
    min_margin, max_abs = a["min_margin"], a["max_abs"]
    wdt = fx["dtype"]
    log("  prompt    ", prompt)
    log("  generated ", generated)
    log("  rows %d vocab %d max|logit| %.4f  gen-scores diff %.3g  gen-logits diff %.3g  min top2 margin %.4g"
        % (R, V, max_abs, score_diff, glogit_diff, min_margin))
    assert score_diff < 1e-3, "generate scores disagree with full forward"
    check(0.5 < max_abs < 50, "%s: max|logit| %.4f is outside O(1-10)" % (name, max_abs))
    log("  kernel fallbacks seen so far:", len(FALLBACKS.messages))

    sens = (sensitivity_jamba if fx["cls"] == "jamba" else sensitivity)(model, full, logits)
    log("  sensitivity (max|dlogit|):", {k: round(v, 4) for k, v in sens.items()})
    weak = [k for k, v in sens.items() if v < 1e-2]
    check(not weak, "%s: weak dependence on %s" % (name, weak))

    extra = {}
    if fx["cls"] == "mamba2":
        # transformers' Mamba2 forward runs the chunked SSD algorithm; generate's
        # single steps run the recurrence (scores compared above)
        extra["gated_norm"] = gated_norm_kind(model)
        extra["ssd_chunk_size"] = model.config.chunk_size
        log("  gated RMSNorm normalises over:", extra["gated_norm"])
        check(extra["gated_norm"] != "neither", "%s: gated norm is neither full nor per group" % name)

    # ---- save ----
    d = os.path.join(outroot, name)
    if os.path.exists(d):
        shutil.rmtree(d)
    os.makedirs(d)
    save_model = model if wdt == "f32" else model.to(TORCH_DTYPE[wdt])
    kw = {}
    if fx["shard"]:
        kw["max_shard_size"] = fx["shard"]
    save_model.save_pretrained(d, **kw)
    for f in sorted(os.listdir(d)):
        if not (f in KEEP_FILES or f.endswith(".safetensors")):
            log("  removing", f)
            p = os.path.join(d, f)
            shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)

    st_files = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
    dtypes = {}
    for f in st_files:
        dtypes.update(read_safetensors_dtypes(os.path.join(d, f)))
    want = SAFETENSORS_DTYPE[wdt]
    bad = {k: v for k, v in dtypes.items() if v != want}
    check(not bad, "%s: unexpected tensor dtypes %r" % (name, bad))
    if fx["shard"]:
        check(os.path.exists(os.path.join(d, "model.safetensors.index.json")) and len(st_files) >= 2,
              "%s: not sharded: %r" % (name, st_files))
    else:
        check(st_files == ["model.safetensors"], "%s: files %r" % (name, st_files))
    log("  safetensors files:", st_files, "dtype", want, "tensors:", len(dtypes))
    log("  tensor names:", sorted(dtypes))

    with open(os.path.join(d, "config.json")) as f:
        cj = json.load(f)
    log("  config.json:", json.dumps(cj, sort_keys=True))
    int_keys = ("intermediate_size", "time_step_rank", "state_size", "conv_kernel",
                "hidden_size", "num_hidden_layers", "vocab_size")
    if fx["cls"] == "mamba2":
        int_keys = ("num_heads", "head_dim", "n_groups", "expand", "state_size", "conv_kernel",
                    "hidden_size", "num_hidden_layers", "vocab_size", "chunk_size")
        check(cj["num_heads"] * cj["head_dim"] == cj["expand"] * cj["hidden_size"],
              "%s: num_heads*head_dim != expand*hidden_size" % name)
    if fx["cls"] == "jamba":
        int_keys = ("intermediate_size", "mamba_dt_rank", "mamba_d_state", "mamba_d_conv",
                    "mamba_expand", "hidden_size", "num_hidden_layers", "vocab_size",
                    "num_attention_heads", "num_key_value_heads", "attn_layer_period",
                    "attn_layer_offset", "num_experts")
    for key in int_keys:
        v = cj.get(key)
        check(isinstance(v, int) and not isinstance(v, bool),
              "%s: config.json %s = %r is not an int" % (name, key, v))
    log("  config.json intermediate_size=%r time_step_rank=%r"
        % (cj.get("intermediate_size"), cj.get("time_step_rank")))

    # reload from disk in float32 and re-check (exact for f16/bf16 -> f32)
    cls = type(model)
    try:
        re = cls.from_pretrained(d, dtype=torch.float32)
    except TypeError:
        re = cls.from_pretrained(d, torch_dtype=torch.float32)
    re.eval()
    reload_diff = float((full_logits(re, full) - logits).abs().max())
    log("  reload max diff %.3g" % reload_diff)
    check(reload_diff < 1e-4, "%s: reloaded model disagrees by %g" % (name, reload_diff))

    with open(os.path.join(d, "logits.f32"), "wb") as f:
        f.write(logits.contiguous().numpy().astype("<f4").tobytes())
    extra.update(half_references(fx, model, full, logits, d))
    golden = {
        "model_class": type(model).__name__,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "seed": a["seed"],
        "prompt": prompt,
        "generated": generated,
        "rows": R,
        "vocab": V,
        "first_generated_row": len(prompt) - 1,
        "max_abs_logit": max_abs,
        "generate_scores_max_diff": score_diff,
        "generate_logits_max_diff": glogit_diff,
        "reload_max_diff": reload_diff,
        "min_top2_margin": min_margin,
        "weights_dtype": wdt,
        "sharded": bool(fx["shard"]),
        "safetensors_files": st_files,
        "sensitivity": sens,
        **extra,
        "reference_path": {
            "device": "cpu",
            "kernels": kernels,
            "transformers_fallback_messages": list(FALLBACKS.messages),
        },
        "logits_file": "logits.f32: little-endian float32 [rows, vocab] row-major; "
                       "row i = logits after token i of prompt+generated[:-1]",
    }
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    sizes = {f: os.path.getsize(os.path.join(d, f)) for f in sorted(os.listdir(d))}
    total = sum(sizes.values())
    log("  files:", sizes, "total", total)
    # 600 KB, and 16-bit references (logits_<h>w.f32, logits_<h>.f32) beside
    check(total < (600 + 2 * 64 * len(fx.get("half", ()))) * 1024,
          "%s: fixture too big (%d bytes)" % (name, total))
    return total


def half_references(fx, model, full, logits, d):
    """For a model compiled with 16-bit weights (ssmc compile --dtype bf16|f16):
    logits_<h>w.f32, transformers in float32 with the Linear and Embedding
    weights rounded to h (the same numbers a 16-bit bundle keeps, so it must match as closely as an f32
    one), and logits_<h>.f32, transformers run entirely in h (activations too),
    with its distance from the float32 logits as the scale of a fair bound."""
    out = {}
    for h in fx.get("half", ()):
        # only what ssmc's weights pass keeps in 16 bits: the weights of matmuls
        # (nn.Linear) and embeddings; norms, conv, A, D and biases stay f32
        rounded = copy.deepcopy(model).eval()
        with torch.no_grad():
            for mod in rounded.modules():
                if isinstance(mod, (torch.nn.Linear, torch.nn.Embedding)):
                    mod.weight.copy_(mod.weight.to(TORCH_DTYPE[h]).to(torch.float32))
        lw = full_logits(rounded, full)
        ln = full_logits(copy.deepcopy(model).to(TORCH_DTYPE[h]).eval(), full)
        for suffix, t in (("w", lw), ("", ln)):
            with open(os.path.join(d, "logits_%s%s.f32" % (h, suffix)), "wb") as f:
                f.write(t.contiguous().numpy().astype("<f4").tobytes())
        out[h] = {
            "weights_rounded_file": "logits_%sw.f32" % h,
            "weights_rounded_max_abs_diff_vs_f32": float((lw - logits).abs().max()),
            "native_file": "logits_%s.f32" % h,
            "native_max_abs_diff_vs_f32": float((ln - logits).abs().max()),
        }
        log("  %s: rounded weights differ from f32 by %.3g, native %s by %.3g"
            % (h, out[h]["weights_rounded_max_abs_diff_vs_f32"], h,
               out[h]["native_max_abs_diff_vs_f32"]))
    return {"half": out} if out else {}


def _setup_process():
    """What every fixture runs under (as the original single-process run did)."""
    torch.set_default_dtype(torch.float32)
    torch.set_num_threads(1)
    logging.getLogger("transformers").addHandler(FALLBACKS)
    logging.captureWarnings(True)
    logging.getLogger("py.warnings").addHandler(FALLBACKS)


def run_worker(outroot, name, result_path):
    """Make one fixture in this process (started by main() as a subprocess) and write
    its result as JSON: a failure of one fixture, even a crash, cannot stop the others,
    and the fallback messages and warn-once state recorded in golden.json are the
    fixture's own, whatever else the run makes."""
    fx = FIXTURE_BY_NAME[name]
    _setup_process()
    kernels = kernel_report()
    zoo_make.bind(log, check, FALLBACKS)
    t0 = time.time()
    status, error, total = "ok", None, 0
    try:
        if fx.get("kind") == "zoo":
            total = zoo_make.gen_fixture(fx, outroot, kernels)
        else:
            total = gen_fixture(fx, outroot, kernels)
    except Exception as e:  # noqa: BLE001 -- reported, and the run goes on with the others
        status, error = "error", "%s: %s" % (type(e).__name__, e)
        log("  ERROR:", error)
        log(traceback.format_exc())
    if status == "ok" and PROBLEMS:
        status = "problems"
    res = dict(name=name, status=status, error=error, problems=list(PROBLEMS), total=total,
               seconds=round(time.time() - t0, 1), fallbacks=list(FALLBACKS.messages), kernels=kernels)
    with open(result_path, "w") as f:
        json.dump(res, f, indent=1)
    sys.exit(0 if status == "ok" else 1)


def _summary_row(outroot, name, r):
    g = {}
    path = os.path.join(outroot, name, "golden.json")
    if r.get("status") != "error" and os.path.exists(path):
        with open(path) as f:
            g = json.load(f)

    def num(k, fmt):
        return fmt % g[k] if k in g else "-"

    return "%-24s %-8s %6s %5s %6s %7s %8s %9s %9s %8s %6.1fs" % (
        name, r.get("status", "?"), num("seed", "%d"), num("seed_tries", "%d"), num("rows", "%d"),
        num("min_top2_margin", "%.3f"), num("max_abs_logit", "%.2f"),
        num("generate_scores_max_diff", "%.2g"), num("reload_max_diff", "%.2g"),
        "%d" % r.get("total", 0) if r.get("total") else "-", r.get("seconds", 0.0))


def main():
    args = sys.argv[1:]
    if args[:1] == ["--worker"]:
        run_worker(*args[1:4])
        return
    jobs, timeout = None, 450.0
    rest = []
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-h", "--help"):
            print(__doc__)
            return
        if a == "--list":
            for fx in ALL_FIXTURES:
                print("%-24s %s" % (fx["name"], fx.get("model_cls") or fx["cls"]))
            return
        if a.startswith("--jobs") or a.startswith("--timeout"):
            key, _, val = a.partition("=")
            if not val:
                i += 1
                val = args[i] if i < len(args) else ""
            if key == "--jobs":
                jobs = int(val)
            else:
                timeout = float(val)
        elif a.startswith("-"):
            print("unknown option %s\n%s" % (a, __doc__))
            sys.exit(2)
        else:
            rest.append(a)
        i += 1
    if not rest:
        print(__doc__)
        sys.exit(2)
    outroot = os.path.abspath(rest[0])
    names = rest[1:]
    unknown = [n for n in names if n not in FIXTURE_BY_NAME]
    if unknown:
        print("unknown fixture(s): %s (--list lists them)" % ", ".join(unknown))
        sys.exit(2)
    selected = [fx for fx in ALL_FIXTURES if not names or fx["name"] in names]
    if jobs is None:
        jobs = min(len(selected), os.cpu_count() or 1, 16)
    jobs = max(1, jobs)

    kernels = kernel_report()
    log("transformers", transformers.__version__, "torch", torch.__version__)
    for k, v in kernels.items():
        log("  %s: %s" % (k, v))
    log("  running on CPU in float32 -> transformers uses the slow (pure PyTorch) path")
    log("  %d fixture(s), each in its own process (1 torch thread), %d at a time" % (len(selected), jobs))
    os.makedirs(outroot, exist_ok=True)
    logdir = tempfile.mkdtemp(prefix="gen_golden_")
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    me = os.path.abspath(__file__)
    pending, running, results = list(selected), {}, {}
    t_start = time.time()
    while pending or running:
        while pending and len(running) < jobs:
            fx = pending.pop(0)
            name = fx["name"]
            logf = open(os.path.join(logdir, name + ".log"), "w")
            res = os.path.join(logdir, name + ".json")
            p = subprocess.Popen([sys.executable, "-u", me, "--worker", outroot, name, res],
                                 stdout=logf, stderr=subprocess.STDOUT, env=env)
            running[name] = (p, logf, res, time.time())
        time.sleep(0.2)
        for name, (p, logf, res, t0) in list(running.items()):
            rc = p.poll()
            if rc is None:
                if time.time() - t0 < timeout:
                    continue
                p.kill()
                p.wait()
                rc = "killed after %.0f s" % timeout
            logf.close()
            del running[name]
            r = None
            if os.path.exists(res):
                with open(res) as f:
                    r = json.load(f)
            if r is None:
                r = dict(name=name, status="error", error="worker ended (%s) without a result" % rc,
                         problems=[], total=0, seconds=round(time.time() - t0, 1), fallbacks=[])
            results[name] = r
            with open(os.path.join(logdir, name + ".log")) as f:
                sys.stdout.write(f.read())
            log("-> %s: %s in %.1f s%s" % (name, r["status"], r.get("seconds", 0.0),
                                          " (%s)" % r["error"] if r.get("error") else ""))
            sys.stdout.flush()

    log("=" * 70)
    log("summary (%.0f s wall, logs in %s)" % (time.time() - t_start, logdir))
    log("%-24s %-8s %6s %5s %6s %7s %8s %9s %9s %8s %7s" % (
        "fixture", "status", "seed", "tries", "rows", "margin", "max|lg|", "gen-diff", "reload", "bytes",
        "time"))
    total = 0
    for fx in selected:
        r = results[fx["name"]]
        total += r.get("total") or 0
        log(_summary_row(outroot, fx["name"], r))
    log("all fixtures total bytes", total)
    fallbacks = []
    for fx in selected:
        for m in results[fx["name"]].get("fallbacks", []):
            if m not in fallbacks:
                fallbacks.append(m)
    log("transformers kernel fallback messages:")
    for m in fallbacks:
        log("  *", m)
    check(all("import fails" in v for v in kernels.values()),
          "mamba_ssm/causal_conv1d importable: %r" % kernels)
    check(total < 12 * 1024 * 1024, "all fixtures too big (%d bytes)" % total)
    for fx in selected:
        r = results[fx["name"]]
        if r["status"] == "error":
            PROBLEMS.append("%s: ERROR %s" % (fx["name"], r.get("error")))
        PROBLEMS.extend(r.get("problems", []))
    if PROBLEMS:
        log("PROBLEMS:")
        for p in PROBLEMS:
            log("  -", p)
        sys.exit(1)
    log("OK")


if __name__ == "__main__":
    main()
