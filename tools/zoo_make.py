"""How a fixture of the hybrid-family zoo (tools/gen_golden_zoo.py) is made and checked.

Imported by gen_golden.py, which runs every fixture in its own worker process;
this module holds everything that differs from the original Mamba / Falcon-Mamba /
Mamba-2 / Jamba fixtures:

* every config key is looked up in the config class of the installed
  transformers before the model is built: a key the class does not declare
  (a dataclass field or an attribute_map alias) fails the fixture, unless the
  fixture lists it in extra_keys (keys the modeling code reads with getattr,
  such as Falcon-H1's head_dim); after the config is built, every key must
  read back with the value given (or the value in expect), so a transformers
  that silently renames or overrides a key fails loudly instead of producing
  another model;
* the decoder layers are checked against the expected layer schedule
  (the class of every block of every layer);
* attention runs through the eager path and MoE experts through the eager
  (per-expert loop) path, in the reference run and on reload;
* reinit_zoo_ re-initialises every parameter by name / owning module, logs
  (and reports as a problem) any parameter no rule covers, and re-initialises
  the persistent buffers that matter (Nemotron-H's e_score_correction_bias, LFM2-MoE's expert_bias);
  buffers that the model computes from its config (MiniMax's lightning-attention
  slopes and decays) are kept as they are;
* sensitivity: one noise probe per parameter group (per layer template; per
  layer and expert for expert weights), plus config probes that rebuild the
  model with one config value changed and the same weights (a multiplier set
  to 1, the soft cap or the sliding window made ineffective, a dt clamp
  removed, ...); expert groups that the fixture's tokens never route to are
  reported as unreached (their probe must then be exactly 0);
* MoE routing statistics (how often each expert is picked, per layer) and the
  fraction of dt values the chunked scan clamps are recorded in golden.json.

Nothing here changes how the original fixtures are made.
"""

import copy
import dataclasses
import json
import math
import os
import re
import shutil
import struct

import torch
import transformers

# ---------------------------------------------------------------------------
# config probes of the fixtures that ask for a family's set ("falcon", "granite")
# ---------------------------------------------------------------------------

_FALCON_MULTS = dict(embedding_multiplier=1.0, lm_head_multiplier=1.0, key_multiplier=1.0,
                     attention_in_multiplier=1.0, attention_out_multiplier=1.0,
                     ssm_in_multiplier=1.0, ssm_out_multiplier=1.0)


def _probes(fx):
    p = fx.get("probes") or []
    if p == "falcon":
        c = fx["config"]
        p = [("%s %g -> 1" % (k, c[k]), {k: v}) for k, v in _FALCON_MULTS.items()]
        for j in range(5):
            m = list(c["ssm_multipliers"])
            m[j] = 1.0
            p.append(("ssm_multipliers[%d] %g -> 1" % (j, c["ssm_multipliers"][j]), {"ssm_multipliers": m}))
        for j in range(2):
            m = list(c["mlp_multipliers"])
            m[j] = 1.0
            p.append(("mlp_multipliers[%d] %g -> 1" % (j, c["mlp_multipliers"][j]), {"mlp_multipliers": m}))
        p.append(("rope_theta 1000 -> 100000", {"rope_parameters": {"rope_type": "default", "rope_theta": 100000.0}}))
    elif p == "granite":
        c = fx["config"]
        hd = c["hidden_size"] // c["num_attention_heads"]
        p = [("embedding_multiplier %g -> 1" % c["embedding_multiplier"], {"embedding_multiplier": 1.0}),
             ("logits_scaling %g -> 1" % c["logits_scaling"], {"logits_scaling": 1.0}),
             ("residual_multiplier %g -> 1" % c["residual_multiplier"], {"residual_multiplier": 1.0}),
             ("attention_multiplier %g -> 1/sqrt(head_dim)" % c["attention_multiplier"],
              {"attention_multiplier": 1.0 / math.sqrt(hd)})]
        if c.get("position_embedding_type") == "rope":
            p.append(("rope_theta 1000 -> 100000",
                      {"rope_parameters": {"rope_type": "default", "rope_theta": 100000.0}}))
    return p


# ---------------------------------------------------------------------------
# plumbing shared with gen_golden.py (bound by bind())
# ---------------------------------------------------------------------------

_log = print
_check = None
_fallbacks = None

MIN_MARGIN = 0.05
MIN_DISTINCT = 4  # the original fixtures ask for 3
SEED_TRIES = 40
WEAK = 1e-2


def bind(log, check, fallbacks):
    global _log, _check, _fallbacks
    _log, _check, _fallbacks = log, check, fallbacks


def log(*a):
    _log(*a)


def check(cond, msg):
    return _check(cond, msg)


# ---------------------------------------------------------------------------
# config and model
# ---------------------------------------------------------------------------


def _norm(v):
    """Tuples as lists, recursively (what a JSON round trip does)."""
    if isinstance(v, (list, tuple)):
        return [_norm(x) for x in v]
    if isinstance(v, dict):
        return {k: _norm(x) for k, x in v.items()}
    return v


def _same(got, want):
    got, want = _norm(got), _norm(want)
    if isinstance(want, dict):
        # a dict given (rope_parameters) must be contained in what is read back
        return isinstance(got, dict) and all(k in got and _same(got[k], v) for k, v in want.items())
    if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        return float(got) == want
    return type(got) is type(want) and got == want


def make_config(fx):
    cfg_cls = getattr(transformers, fx["config_cls"], None)
    if cfg_cls is None:
        raise RuntimeError("transformers %s has no %s" % (transformers.__version__, fx["config_cls"]))
    fields = {f.name for f in dataclasses.fields(cfg_cls)}
    amap = dict(getattr(cfg_cls, "attribute_map", {}) or {})
    extra = set(fx.get("extra_keys", ()))
    unknown = [k for k in fx["config"] if k not in fields and k not in amap and k not in extra]
    if unknown:
        raise KeyError("%s (transformers %s) does not declare config key(s) %s: they would be "
                       "stored as plain attributes and ignored by the model"
                       % (fx["config_cls"], transformers.__version__, unknown))
    c = copy.deepcopy(fx["config"])  # transformers fills in dicts it is given (rope_parameters)
    c.update(bos_token_id=0, eos_token_id=0, pad_token_id=0)
    config = cfg_cls(**c)
    want_all = dict(fx["config"])
    want_all.update(fx.get("expect", {}))
    bad = []
    for k, want in want_all.items():
        got = getattr(config, k, "<missing>")
        if not _same(got, want):
            bad.append("%s: gave %r, reads back %r" % (k, fx["config"].get(k), got))
    if bad:
        raise ValueError("%s (transformers %s) changed config values: %s"
                         % (fx["config_cls"], transformers.__version__, "; ".join(bad)))
    config._attn_implementation = "eager"
    config._experts_implementation = "eager"
    return config


def build(fx):
    model_cls = getattr(transformers, fx["model_cls"], None)
    if model_cls is None:
        raise RuntimeError("transformers %s has no %s" % (transformers.__version__, fx["model_cls"]))
    model = model_cls(make_config(fx))
    if model.config._attn_implementation != "eager":
        raise RuntimeError("attention implementation is %r, not eager" % model.config._attn_implementation)
    return model


def decoder_layers(model):
    return model.base_model.layers


def layer_signature(layer):
    parts = sorted("%s:%s" % (n, type(m).__name__) for n, m in layer.named_children()
                   if "Norm" not in type(m).__name__)
    return " ".join(parts)


def shared_block_assignment(model):
    """Zamba2: for each hybrid layer, which distinct shared block (by weight storage) it uses."""
    ptrs, out = [], []
    for layer in decoder_layers(model):
        st = getattr(layer, "shared_transformer", None)
        if st is None:
            continue
        p = st.self_attn.q_proj.weight.data_ptr()
        if p not in ptrs:
            ptrs.append(p)
        out.append(ptrs.index(p))
    return out


# ---------------------------------------------------------------------------
# re-initialisation
# ---------------------------------------------------------------------------


# router buffers that only move the top-k choice (not the weights)
_CHOICE_BIASES = ("e_score_correction_bias", "feed_forward.expert_bias")

# persistent buffers computed from the config at construction (saved with the weights)
_CONFIG_BUFFERS = ("self_attn.slope_rate", "self_attn.query_decay", "self_attn.key_decay",
                   "self_attn.diagonal_decay")


def _owner(model, name):
    return model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else model


def _inv_softplus(x):
    return torch.log(torch.expm1(x))


def reinit_zoo_(model, fx):
    """Re-initialise every parameter so that every part of the model matters.
    Returns (rules used per parameter, parameters no rule covered)."""
    lo, hi = fx.get("dt_init", (0.001, 0.1))
    used, fell = {}, []
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied parameters appear once
            own = _owner(model, name)
            on = type(own).__name__
            leaf = name.rsplit(".", 1)[-1]
            if leaf == "A_log":
                rule = "log U(1,16)"
                p.copy_(torch.log(torch.empty_like(p).uniform_(1.0, 16.0)))
            elif leaf == "D":
                rule = "N(0,1)"
                p.copy_(torch.randn_like(p))
            elif leaf in ("dt_bias", "dt_proj_bias") or name.endswith("dt_proj.bias"):
                rule = "softplus^-1 U(%g,%g)" % (lo, hi)
                p.copy_(_inv_softplus(torch.empty_like(p).uniform_(lo, hi)))
            elif name.endswith(("dt_layernorm.weight", "b_layernorm.weight", "c_layernorm.weight")):
                rule = "U(0.5,1.5)"
                p.copy_(torch.empty_like(p).uniform_(0.5, 1.5))
            elif name.endswith(("q_layernorm.weight", "k_layernorm.weight")):
                # QK-norm: the norm weights set the attention temperature
                rule = "U(1.5,2.5)"
                p.copy_(torch.empty_like(p).uniform_(1.5, 2.5))
            elif leaf in ("x_proj_weight", "dt_proj_weight"):
                # Zamba: per-head projections [heads, out, in]
                rule = "N(0,1)/sqrt(fan_in) per head"
                p.copy_(torch.randn_like(p) / math.sqrt(p.shape[-1]))
            elif leaf == "recurrent_param":
                # RG-LRU: a = exp(-8 * r * softplus(param)), softplus(param) in [0.01, 0.15]
                rule = "softplus^-1 U(0.01,0.15)"
                p.copy_(_inv_softplus(torch.empty_like(p).uniform_(0.01, 0.15)))
            elif leaf in ("input_gate_weight", "recurrent_gate_weight"):
                rule = "N(0,1)/sqrt(block_width)"
                p.copy_(torch.randn_like(p) / math.sqrt(p.shape[1]))
            elif leaf in ("input_gate_bias", "recurrent_gate_bias"):
                rule = "0.5 N(0,1)"
                p.copy_(0.5 * torch.randn_like(p))
            elif ("RMSNorm" in on or "LayerNorm" in on) and leaf == "weight":
                if on in ("RecurrentGemmaRMSNorm", "Qwen3_5RMSNorm", "Qwen3NextRMSNorm",
                          "Qwen3_5MoeRMSNorm"):  # (1 + weight)
                    rule = "0.1 N(0,1) (zero-centred norm)"
                    p.copy_(0.1 * torch.randn_like(p))
                else:
                    rule = "1 + 0.1 N(0,1)"
                    p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif "Router" in on or name.endswith("feed_forward.router.weight"):
                # router logits O(2): routing decisions far from ties
                rule = "2 N(0,1)/sqrt(fan_in)"
                p.copy_(2.0 * torch.randn_like(p) / math.sqrt(p.shape[-1]))
            elif name.endswith(("q_proj.weight", "k_proj.weight")):
                # attention scores O(4): softmax far from uniform
                rule = "2 N(0,1)/sqrt(fan_in)"
                p.copy_(2.0 * torch.randn_like(p) / math.sqrt(p.shape[1]))
            elif name.endswith(("embed_tokens.weight", "embeddings.weight")) or name == "lm_head.weight":
                rule = "0.2 N(0,1)"
                p.copy_(0.2 * torch.randn_like(p))
            elif isinstance(own, torch.nn.Conv1d) and leaf == "weight":
                # depthwise [C, 1, K]: fan_in = K
                rule = "N(0,1)/sqrt(kernel)"
                p.copy_(torch.randn_like(p) / math.sqrt(p.shape[-1]))
            elif on.endswith("Experts") and p.dim() == 3:
                # [experts, out, in]
                rule = "N(0,1)/sqrt(fan_in) per expert"
                p.copy_(torch.randn_like(p) / math.sqrt(p.shape[2]))
            elif leaf == "weight" and p.dim() == 2:
                rule = "N(0,1)/sqrt(fan_in)"
                p.copy_(torch.randn_like(p) / math.sqrt(p.shape[1]))
            elif leaf == "bias":
                rule = "0.2 N(0,1)"
                p.copy_(0.2 * torch.randn_like(p))
            else:
                rule = "FALLTHROUGH 0.2 N(0,1)"
                fell.append("%s %s (%s)" % (name, tuple(p.shape), on))
                log("  NOTE: no re-initialisation rule for parameter %s %s in %s -> 0.2 N(0,1)"
                    % (name, tuple(p.shape), on))
                p.copy_(0.2 * torch.randn_like(p))
            used[name] = rule
        # per-fixture overrides, in parameter order (see "init" in the fixture definitions)
        for name, p in model.named_parameters():
            for suffix, how in fx.get("init", {}).items():
                if not name.endswith(suffix):
                    continue
                if how[0] == "normal":
                    p.copy_(how[1] + how[2] * torch.randn_like(p))
                    used[name] = "%g + %g N(0,1) (fixture override)" % (how[1], how[2])
                else:
                    p.mul_(how[1])
                    used[name] += ", then x%g (fixture override)" % how[1]
                break
        persistent = set(model.state_dict().keys())
        params = {n for n, _ in model.named_parameters(remove_duplicate=False)}
        for name, b in model.named_buffers():
            if name not in persistent or name in params:
                continue
            if name.endswith(_CHOICE_BIASES):
                # Nemotron-H, LFM2-MoE: added to the sigmoid scores for the top-k choice only
                used[name] = "0.3 N(0,1) (buffer)"
                b.copy_(0.3 * torch.randn_like(b))
            elif name.endswith(_CONFIG_BUFFERS):
                # MiniMax: the decay of each lightning-attention head, a function of the config
                used[name] = "kept (computed from the config)"
            else:
                fell.append("buffer %s %s" % (name, tuple(b.shape)))
                log("  NOTE: persistent buffer %s %s is saved but not re-initialised" % (name, tuple(b.shape)))
    return used, fell


# ---------------------------------------------------------------------------
# measurements
# ---------------------------------------------------------------------------


def full_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids], dtype=torch.long)).logits[0].float()


def _moe_layers(model):
    """(label, experts module, number of experts) of every MoE block, in layer order."""
    out = []
    for name, m in model.named_modules():
        if type(m).__name__.endswith("Experts"):
            n = getattr(m, "num_experts", None)
            out.append((name, m, n))
    return out


def moe_usage(model, ids):
    """How many (token, k) slots pick each expert, per MoE layer, over one full forward."""
    mods = _moe_layers(model)
    if not mods:
        return {}
    counts = {}
    hooks = []

    def make(name, n):
        def pre(mod, args, kwargs):
            idx = args[1] if len(args) > 1 else kwargs.get("top_k_index")
            c = torch.bincount(idx.reshape(-1).long(), minlength=n)[:n]
            counts[name] = (counts.get(name, torch.zeros(n, dtype=torch.long)) + c)
        return pre

    for name, m, n in mods:
        hooks.append(m.register_forward_pre_hook(make(name, n), with_kwargs=True))
    try:
        full_logits(model, ids)
    finally:
        for h in hooks:
            h.remove()
    return {k: v.tolist() for k, v in counts.items()}


def _ssm_mixers(model):
    return [(n, m) for n, m in model.named_modules()
            if hasattr(m, "dt_bias") and hasattr(m, "in_proj") and hasattr(m, "time_step_limit")
            and hasattr(m, "num_heads")]


def dt_clamp_stats(model, ids):
    """Fraction of the chunk path's dt = softplus(dt_raw + dt_bias) values below / above the
    clamp bounds of each Mamba-2 mixer, over one full forward."""
    mixers = _ssm_mixers(model)
    if not mixers:
        return {}
    acc = {"n": 0, "lo": 0, "hi": 0, "min": float("inf"), "max": 0.0}
    hooks = []

    def make(mx):
        def hook(mod, inp, out):
            H = mx.num_heads
            raw = out[..., -H:].float()
            mup = getattr(mx, "mup_vector", None)  # Falcon-H1's ssm_multipliers
            if mup is not None:
                raw = raw * mup[..., -H:].float()
            dt = torch.nn.functional.softplus(raw + mx.dt_bias.float())
            lo, hi = mx.time_step_limit
            acc["n"] += dt.numel()
            acc["lo"] += int((dt < lo).sum())
            acc["hi"] += int((dt > hi).sum())
            acc["min"] = min(acc["min"], float(dt.min()))
            acc["max"] = max(acc["max"], float(dt.max()))
        return hook

    for _, mx in mixers:
        hooks.append(mx.in_proj.register_forward_hook(make(mx)))
    try:
        full_logits(model, ids)
    finally:
        for h in hooks:
            h.remove()
    lim = [list(mx.time_step_limit) for _, mx in mixers][0]
    return {"time_step_limit": [float(x) for x in lim], "values": acc["n"],
            "below_lo": acc["lo"] / max(acc["n"], 1), "above_hi": acc["hi"] / max(acc["n"], 1),
            "dt_min": acc["min"], "dt_max": acc["max"]}


def _group_key(name):
    """Parameter group: the layer index becomes {i} (adapter-use and expert indices stay)."""
    return re.sub(r"^((?:model|backbone)\.layers)\.\d+\.", r"\1.{i}.", name)


def sensitivity(model, ids, ref, usage):
    """max |delta logits| when one parameter group gets noise (0.3 of its RMS)."""
    gen = torch.Generator().manual_seed(99)
    groups = {}
    for name, p in model.named_parameters():
        own = _owner(model, name)
        if type(own).__name__.endswith("Experts") and p.dim() == 3:
            layer = name.rsplit(".", 1)[0]
            for e in range(p.shape[0]):
                groups.setdefault("%s[expert %d]" % (layer, e), []).append((name, e))
        else:
            groups.setdefault(_group_key(name), []).append((name, None))
    for name, b in model.named_buffers():
        if name.endswith(_CHOICE_BIASES):
            groups.setdefault(_group_key(name), []).append((name, None))

    out, unreached = {}, []
    for label, members in groups.items():
        m = copy.deepcopy(model)
        with torch.no_grad():
            for name, e in members:
                try:
                    t = m.get_parameter(name)
                except AttributeError:
                    t = m.get_buffer(name)
                if e is not None:
                    t = t[e]
                rms = float(t.float().pow(2).mean().sqrt())
                scale = 0.3 * rms if rms > 0 else 0.1
                if name.endswith(_CHOICE_BIASES):
                    scale = 1.0 * rms + 0.3  # only moves the top-k choice
                t.add_(scale * torch.randn(t.shape, generator=gen))
        out[label] = float((full_logits(m, ids) - ref).abs().max())
        for name, e in members:
            if e is not None and usage:
                layer = name.rsplit(".", 1)[0]
                if layer in usage and usage[layer][e] == 0 and label not in unreached:
                    unreached.append(label)
    return out, unreached


def config_probes(model, fx, ids, ref):
    """Rebuild the model from its config with one value changed and the same weights."""
    out = {}

    def rebuilt(changes):
        cfg = copy.deepcopy(model.config)
        for k, v in copy.deepcopy(changes).items():
            setattr(cfg, k, v)
        m = type(model)(cfg)
        m.load_state_dict(model.state_dict(), strict=True)
        m.to(torch.float32).eval()
        return float((full_logits(m, ids) - ref).abs().max())

    out["control: rebuilt, nothing changed"] = rebuilt({})
    for label, changes in _probes(fx):
        out[label] = rebuilt(changes)
    return out


def normalizer_probe(model, ids, ref):
    """RecurrentGemma: the embedding scale sqrt(hidden) is a bf16 buffer; use the exact value."""
    m = copy.deepcopy(model)
    exact = math.sqrt(m.config.hidden_size)
    stored = float(m.base_model.normalizer)
    as_bf16 = float(torch.tensor(exact, dtype=torch.bfloat16))
    check(stored == as_bf16, "RecurrentGemma normalizer %r is not sqrt(hidden) rounded to bf16 (%r)"
          % (stored, as_bf16))
    with torch.no_grad():
        m.base_model.normalizer = torch.tensor(exact, dtype=torch.float32)
    d = float((full_logits(m, ids) - ref).abs().max())
    return {"normalizer_used": stored, "sqrt_hidden": exact, "is_sqrt_hidden_rounded_to_bf16": stored == as_bf16,
            "max_dlogit_with_exact_fp32_sqrt": d}


# ---------------------------------------------------------------------------
# one candidate model
# ---------------------------------------------------------------------------


def attempt(fx, seed):
    torch.manual_seed(seed)
    model = build(fx).to(torch.float32).eval()
    cfg = model.config
    used, fell = reinit_zoo_(model, fx)
    emb = model.get_input_embeddings().weight
    if cfg.tie_word_embeddings:
        assert model.lm_head.weight.data_ptr() == emb.data_ptr(), "tie broken"
    else:
        assert model.lm_head.weight.data_ptr() != emb.data_ptr(), "weights tied, config says untied"

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
    assert seq[: len(prompt)] == prompt, "generate did not echo the prompt"
    generated = seq[len(prompt):]
    assert len(generated) == N, "generated %d tokens, wanted %d" % (len(generated), N)
    scores = torch.stack([s[0].float() for s in out.scores])
    glogits = torch.stack([s[0].float() for s in out.logits])

    full = prompt + generated[:-1]
    logits = full_logits(model, full)
    R = len(full)
    assert logits.shape == (R, V), logits.shape
    tail = logits[len(prompt) - 1:]
    score_diff = float((scores - tail).abs().max())
    first_row_diff = float((scores[0] - tail[0]).abs().max())  # the prefill's row
    glogit_diff = float((glogits - tail).abs().max())
    argmax = tail.argmax(-1).tolist()
    top2 = tail.topk(2, dim=-1).values
    min_margin = float((top2[:, 0] - top2[:, 1]).min())
    s2 = scores.topk(2, dim=-1).values
    score_margin = float((s2[:, 0] - s2[:, 1]).min())
    usage = moe_usage(model, full)
    all_reached = all(min(c) > 0 for c in usage.values()) if usage else True
    return dict(model=model, prompt=prompt, generated=generated, full=full, logits=logits, R=R, V=V,
                score_diff=score_diff, first_row_diff=first_row_diff, glogit_diff=glogit_diff,
                min_margin=min_margin, score_margin=score_margin, max_abs=float(logits.abs().max()),
                distinct=len(set(generated)), seed=seed, argmax_ok=argmax == generated, argmax=argmax,
                usage=usage, all_reached=all_reached, reinit=used, fell=fell)


def _ok(fx, a):
    ok = (a["argmax_ok"] and a["min_margin"] >= MIN_MARGIN and a["score_margin"] >= MIN_MARGIN
          and a["distinct"] >= MIN_DISTINCT)
    if fx.get("all_experts"):
        ok = ok and a["all_reached"]
    return ok


def _key(fx, a):
    return (a["argmax_ok"], bool(a["all_reached"]) or not fx.get("all_experts"),
            min(a["min_margin"], a["score_margin"], MIN_MARGIN), a["distinct"])


# ---------------------------------------------------------------------------
# the fixture
# ---------------------------------------------------------------------------


def _finite(v):
    """golden.json is strict JSON: an infinite bound (time_step_limit's default) is written as null."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    return v


def read_safetensors_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        hdr = json.loads(f.read(n))
    return {k: v for k, v in hdr.items() if k != "__metadata__"}


def _config_json_checks(name, fx, cj, model):
    check(cj.get("model_type") == model.config.model_type,
          "%s: config.json model_type %r" % (name, cj.get("model_type")))
    check(cj.get("architectures") == [fx["model_cls"]],
          "%s: config.json architectures %r" % (name, cj.get("architectures")))
    want_all = dict(fx["config"])
    want_all.update(fx.get("expect", {}))
    for k, want in want_all.items():
        if k not in cj:
            check(False, "%s: config.json lacks %s (given %r)" % (name, k, want))
            continue
        check(_same(cj[k], want), "%s: config.json %s = %r, given %r" % (name, k, cj[k], want))
    # every integer hyperparameter is an int, every multiplier a number, lists are lists
    for k, v in cj.items():
        if v is None or isinstance(v, bool):
            continue
        if k.endswith(("_size", "_heads", "_layers", "_dim", "_width", "_rank", "_period", "_offset",
                       "_tok", "_experts", "_groups", "_state", "_conv", "_kernel", "_headdim")) \
                and k != "mlp_only_layers":
            check(isinstance(v, int) and not isinstance(v, bool),
                  "%s: config.json %s = %r is not an int" % (name, k, v))
        if k.endswith(("_multiplier", "_soft_cap", "_eps", "epsilon")) or k == "logits_scaling":
            check(isinstance(v, (int, float)) and not isinstance(v, bool),
                  "%s: config.json %s = %r is not a number" % (name, k, v))
        if k.endswith(("_multipliers", "layer_types", "layers_block_type", "block_types", "_indices",
                       "mlp_only_layers")):
            check(isinstance(v, list), "%s: config.json %s = %r is not a list" % (name, k, v))
    if "rope_parameters" in cj and cj["rope_parameters"] is not None:
        rp = cj["rope_parameters"]
        check(isinstance(rp, dict) and isinstance(rp.get("rope_theta"), (int, float)),
              "%s: config.json rope_parameters %r has no numeric rope_theta" % (name, rp))


def gen_fixture(fx, outroot, kernels):
    name = fx["name"]
    log("=" * 70)
    log("fixture", name, "(%s, transformers %s)" % (fx["model_cls"], transformers.__version__))
    if transformers.__version__ != "5.17.0":
        log("  NOTE: written against transformers 5.17.0; this is", transformers.__version__)
    best = None
    for i in range(SEED_TRIES):
        a = attempt(fx, fx["seed"] + 1000 * i)
        key = _key(fx, a)
        if best is None or key > best[0]:
            best = (key, a)
        if _ok(fx, a):
            break
    tries = i + 1
    a = best[1]
    assert a["argmax_ok"], ("argmax of the full forward != generated tokens", a["argmax"], a["generated"])
    model, prompt, generated, full, logits = a["model"], a["prompt"], a["generated"], a["full"], a["logits"]
    log("  seed %d chosen after %d tries (margin %.4g, generate-score margin %.4g, %d distinct tokens)"
        % (a["seed"], tries, a["min_margin"], a["score_margin"], a["distinct"]))
    check(a["min_margin"] >= MIN_MARGIN, "%s: small top-2 margin %.4g" % (name, a["min_margin"]))
    check(a["score_margin"] >= MIN_MARGIN, "%s: small generate-score margin %.4g" % (name, a["score_margin"]))
    check(a["distinct"] >= MIN_DISTINCT, "%s: only %d distinct generated tokens" % (name, a["distinct"]))
    if fx.get("all_experts"):
        check(a["all_reached"], "%s: some expert is never picked: %r" % (name, a["usage"]))
    check(not a["fell"], "%s: parameters without a re-initialisation rule: %r" % (name, a["fell"]))

    log("  config:", json.dumps(_norm(fx["config"]), sort_keys=True))
    sigs = [layer_signature(l) for l in decoder_layers(model)]
    log("  layers:")
    for k, s in enumerate(sigs):
        log("    %d: %s" % (k, s))
    check(sigs == fx["layers"], "%s: layer schedule %r, expected %r" % (name, sigs, fx["layers"]))
    extra = {"layer_signatures": sigs}
    if fx.get("shared_blocks") is not None:
        sb = shared_block_assignment(model)
        log("  shared block of each hybrid layer:", sb)
        check(sb == fx["shared_blocks"], "%s: shared blocks %r, expected %r" % (name, sb, fx["shared_blocks"]))
        extra["shared_block_of_hybrid_layer"] = sb
    if fx.get("mlp_width") is not None:
        w = decoder_layers(model)[0].feed_forward.w1.weight.shape[0]
        check(w == fx["mlp_width"], "%s: MLP width %d, expected %d" % (name, w, fx["mlp_width"]))
        extra["mlp_width"] = w

    R, V = a["R"], a["V"]
    log("  prompt    ", prompt)
    log("  generated ", generated)
    log("  rows %d vocab %d max|logit| %.4f  gen-scores diff %.3g (prefill row %.3g)  gen-logits diff %.3g"
        % (R, V, a["max_abs"], a["score_diff"], a["first_row_diff"], a["glogit_diff"]))
    check(a["first_row_diff"] < 1e-4, "%s: generate's prefill row differs from the forward by %g"
          % (name, a["first_row_diff"]))
    if fx.get("decode_clamp"):
        log("  NOTE: transformers' single-token path skips the dt clamp of the chunked path; "
            "generate's scores may differ from the full forward after the first token (same greedy tokens)")
        extra["decode_path_note"] = (
            "transformers applies the dt clamp (time_step_limit / time_step_min) only in the chunked "
            "scan of the full forward and the prefill, not in its single-token generate step: "
            "generate_scores_max_diff is that difference. logits.f32 is the full forward (clamped at "
            "every position); the seed was chosen so that both paths give the same greedy tokens with "
            "margins >= %g." % MIN_MARGIN)
    else:
        check(a["score_diff"] < 1e-3, "%s: generate scores disagree with the full forward by %g"
              % (name, a["score_diff"]))
    check(0.5 < a["max_abs"] < 50, "%s: max|logit| %.4f is outside O(1-10)" % (name, a["max_abs"]))

    usage = a["usage"]
    if usage:
        log("  MoE routing (picks per expert, per layer):", usage)
        extra["moe_usage"] = usage
    clamp = dt_clamp_stats(model, full)
    if clamp:
        log("  dt clamp: limit %s, below %.3f, above %.3f of %d values (dt in [%.4g, %.4g])"
            % (clamp["time_step_limit"], clamp["below_lo"], clamp["above_hi"], clamp["values"],
               clamp["dt_min"], clamp["dt_max"]))
        extra["dt_clamp"] = clamp
        for b in fx.get("clamp_bounds", ()):
            frac = clamp["below_lo"] if b == "lo" else clamp["above_hi"]
            check(frac > 0, "%s: the dt clamp's %s bound is never hit" % (name, b))

    sens, unreached = sensitivity(model, full, logits, usage)
    log("  sensitivity (max|dlogit| with noise on one parameter group):")
    for k, v in sens.items():
        log("    %-78s %.4g%s" % (k, v, "  (expert never picked)" if k in unreached else ""))
    weak = [k for k, v in sens.items() if v < WEAK and k not in unreached]
    check(not weak, "%s: weak dependence on %s" % (name, weak))
    for k in unreached:
        check(sens[k] == 0.0, "%s: %s is never picked but changes the logits by %g" % (name, k, sens[k]))
    extra["unreached_expert_groups"] = unreached

    probes = config_probes(model, fx, full, logits)
    log("  config probes (same weights, one config value changed):")
    for k, v in probes.items():
        log("    %-78s %.4g" % (k, v))
    ctl = probes.pop("control: rebuilt, nothing changed")
    check(ctl < 1e-6, "%s: rebuilding from the config changes the logits by %g" % (name, ctl))
    weakp = [k for k, v in probes.items() if v < WEAK]
    check(not weakp, "%s: config probes with no effect: %s" % (name, weakp))
    if fx.get("normalizer_probe"):
        npb = normalizer_probe(model, full, logits)
        log("  embedding normalizer:", npb)
        extra["embedding_normalizer"] = npb

    # ---- save ----
    d = os.path.join(outroot, name)
    if os.path.exists(d):
        shutil.rmtree(d)
    os.makedirs(d)
    model.save_pretrained(d)
    for f in sorted(os.listdir(d)):
        if not (f in ("config.json", "generation_config.json") or f.endswith(".safetensors")):
            log("  removing", f)
            p = os.path.join(d, f)
            shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
    st_files = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
    check(st_files == ["model.safetensors"], "%s: files %r" % (name, st_files))
    hdr = read_safetensors_header(os.path.join(d, "model.safetensors"))
    tensors = {k: [v["dtype"], v["shape"]] for k, v in sorted(hdr.items())}
    bad = {k: v[0] for k, v in tensors.items() if v[0] != "F32"}
    check(not bad, "%s: unexpected tensor dtypes %r" % (name, bad))
    log("  tensors (%d):" % len(tensors))
    for k, (dt, shp) in tensors.items():
        log("    %-72s %s %s" % (k, dt, shp))

    with open(os.path.join(d, "config.json")) as f:
        cj = json.load(f)
    log("  config.json:", json.dumps(cj, sort_keys=True))
    _config_json_checks(name, fx, cj, model)

    # reload from disk (same eager paths) and compare weights and logits
    cls = type(model)
    try:
        re_model = cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager",
                                       experts_implementation="eager")
    except TypeError:
        re_model = cls.from_pretrained(d, torch_dtype=torch.float32, attn_implementation="eager")
    re_model.eval()
    sd0, sd1 = model.state_dict(), re_model.state_dict()
    missing = sorted(set(sd0) - set(sd1))
    unexpected = sorted(set(sd1) - set(sd0))
    differ = sorted(k for k in set(sd0) & set(sd1) if not torch.equal(sd0[k].float(), sd1[k].float()))
    check(not missing and not unexpected and not differ,
          "%s: reloaded weights: missing %r, unexpected %r, different %r" % (name, missing, unexpected, differ))
    reload_diff = float((full_logits(re_model, full) - logits).abs().max())
    log("  reload: weights identical: %s, logits max diff %.3g"
        % (not (missing or unexpected or differ), reload_diff))
    check(reload_diff < 1e-5, "%s: reloaded model disagrees by %g" % (name, reload_diff))

    with open(os.path.join(d, "logits.f32"), "wb") as f:
        f.write(logits.contiguous().numpy().astype("<f4").tobytes())
    golden = {
        "model_class": type(model).__name__,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "seed": a["seed"],
        "seed_tries": tries,
        "prompt": prompt,
        "generated": generated,
        "rows": R,
        "vocab": V,
        "first_generated_row": len(prompt) - 1,
        "max_abs_logit": a["max_abs"],
        "generate_scores_max_diff": a["score_diff"],
        "generate_first_row_max_diff": a["first_row_diff"],
        "generate_logits_max_diff": a["glogit_diff"],
        "reload_max_diff": reload_diff,
        "min_top2_margin": a["min_margin"],
        "min_generate_score_margin": a["score_margin"],
        "weights_dtype": "f32",
        "sharded": False,
        "safetensors_files": st_files,
        "config_given": _norm(fx["config"]),
        "tensors": tensors,
        "sensitivity": sens,
        "config_probes": probes,
        "reinit": a["reinit"],
        **extra,
        "reference_path": {
            "device": "cpu",
            "attention": "eager",
            "experts": "eager",
            "kernels": kernels,
            "transformers_fallback_messages": list(_fallbacks.messages) if _fallbacks else [],
        },
        "logits_file": "logits.f32: little-endian float32 [rows, vocab] row-major; "
                       "row i = logits after token i of prompt+generated[:-1]",
    }
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump(_finite(golden), f, indent=1, allow_nan=False)
        f.write("\n")
    sizes = {f: os.path.getsize(os.path.join(d, f)) for f in sorted(os.listdir(d))}
    total = sum(sizes.values())
    log("  files:", sizes, "total", total)
    check(total < fx.get("max_kb", 600) * 1024, "%s: fixture too big (%d bytes)" % (name, total))
    return total
