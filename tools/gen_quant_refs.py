#!/usr/bin/env python3
"""References for quantized bundles of existing golden fixtures.

    python3 tools/gen_quant_refs.py tests/data MAPS NAME... [--dtypes q8_0,q4_0]

For each fixture (tests/data/NAME with golden.json) and dtype D it reads
MAPS/NAME.D.json, the dtype each matmul and embedding weight of a D bundle
keeps and its shape ({checkpoint name: {"dtype": "q8_0" | "q4_0" | "bf16",
"shape": [...]}}, as `ssmc inspect --json` lists a bundle compiled with
--dtype D; a name with "{*}" stands for each stacked part, and where the
model holds the parts fused, as transformers' experts.gate_up_proj, the
fused tensor is quantized a row of the same length at a time). It loads the saved model in float32 on the CPU, checks that
it still gives logits.f32, replaces each listed weight by the values a
bundle computes with (quantized and taken back to f32 by this file's own
model of the formats in docs/quantization.md, or rounded to bf16), and
writes transformers' logits over the fixture's tokens to logits_Dw.f32,
recording the file, the map and its distance from logits.f32 under
golden.json's "quant". tests/test_golden.c holds quantized bundles to it.
Runs where transformers does: the GPU machine's Python, on its CPU, one
thread, no TF32.
"""
import copy
import json
import os
import re
import sys

import torch
import transformers


def f16(x):
    return x.to(torch.float16).to(torch.float32)


def bits_to_f32(u):
    return u.to(torch.int32).view(torch.float32)


def up4(x):
    """x >= 0 rounded up to 4 significant bits, then to f16 (q8_0's d)."""
    u = x.view(torch.int32).to(torch.int64)
    u = torch.where((u & 0xFFFFF) != 0, (u | 0xFFFFF) + 1, u)
    big = f16(bits_to_f32(u))
    small = torch.ceil(x * 2.0**24) * 2.0**-24  # a multiple of f16's least subnormal
    return torch.where(x < 2.0**-21, small.to(torch.float32), big)


def round8(x):
    """x rounded to nearest even at 8 significant bits."""
    u = x.view(torch.int32).to(torch.int64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return bits_to_f32(u)


def round_clamp(v, lo, hi):
    """v rounded half away from zero, clamped (as roundf)."""
    t = torch.trunc(v)
    f = v - t
    t = t + (f >= 0.5).float() - (f <= -0.5).float()
    return t.clamp(lo, hi)


def blocks(w):
    """w [rows, k] as [rows, nb, 32] blocks (NaN past k) and k."""
    k = w.shape[-1]
    nb = (k + 31) // 32
    pad = torch.full((w.shape[0], nb * 32 - k), float("nan"))
    return torch.cat([w, pad], 1).reshape(w.shape[0], nb, 32), k


def quant(w, dt):
    """The values a bundle computes with for weight w stored as dt."""
    if dt == "bf16":
        return w.to(torch.bfloat16).to(torch.float32)
    shape = w.shape
    x, k = blocks(w.reshape(-1, shape[-1]).float())
    live = ~torch.isnan(x)
    x0 = torch.where(live, x, torch.zeros(()))
    one = torch.ones((), dtype=torch.float32)
    if dt == "q8_0":
        d = up4(x0.abs().amax(-1) / torch.tensor(127.0))
        qd = round_clamp(x0 * torch.where(d > 0, one / d, 0 * d)[..., None], -127, 127) * d[..., None]
    else:  # q4_0: the best of 9 scales m / (-8 + t / 10), errors summed in order
        idx = x0.abs().argmax(-1, keepdim=True)  # the first of the largest
        m = torch.gather(x0, -1, idx)[..., 0]
        best = torch.zeros_like(m)
        best_err = torch.full_like(m, float("inf"))
        for t in range(-4, 5):
            den = torch.tensor(-8.0) + torch.tensor(float(t)) / torch.tensor(10.0)
            d = f16(round8(m / den))
            inv = torch.where(d != 0, one / d, 0 * d)
            err = torch.zeros_like(m)
            for j in range(32):
                e = x0[..., j] - round_clamp(x0[..., j] * inv, -8, 7) * d
                err = err + torch.where(live[..., j], e * e, torch.zeros(()))
            take = (err < best_err) & (m != 0)
            best = torch.where(take, d, best)
            best_err = torch.where(take, err, best_err)
        d = best
        qd = round_clamp(x0 * torch.where(d != 0, one / d, 0 * d)[..., None], -8, 7) * d[..., None]
    out = qd.reshape(x.shape[0], -1)[:, :k]
    return out.reshape(shape)


def logits_of(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids], dtype=torch.long)).logits[0].float()


def one(d, maps, dt):
    name = os.path.basename(d)
    with open(os.path.join(d, "golden.json")) as f:
        g = json.load(f)
    with open(os.path.join(maps, "%s.%s.json" % (name, dt))) as f:
        wmap = json.load(f)
    ids = list(g["prompt"]) + list(g["generated"][:-1])
    model = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    ref = torch.frombuffer(bytearray(open(os.path.join(d, "logits.f32"), "rb").read()),
                           dtype=torch.float32).reshape(len(ids), -1)
    if float((logits_of(model, ids) - ref).abs().max()) > 1e-5 * float(ref.abs().max()):
        raise SystemExit("%s: the saved model gives other logits than logits.f32" % d)
    q = copy.deepcopy(model).eval()
    params = dict(q.named_parameters(remove_duplicate=False))
    done = set()
    with torch.no_grad():
        for wname, w in wmap.items():
            pat = re.compile(re.escape(wname).replace(re.escape("{*}"), r"\d+") + "$")
            hits = [p for p in params if pat.match(p)]
            k, flip = w["shape"][-1], False
            if not hits and "{*}" in wname:  # fused parts: experts.gate_up_proj, experts.down_proj
                head, tail = wname.split("{*}")
                stem = tail.strip(".").split(".")[0]
                words = set(stem.split("_"))  # gate_proj, up_proj: in gate_up_proj
                hits = [p for p in params if p.startswith(head.rstrip(".")) and words <=
                        set(p[len(head.rstrip(".")):].strip(".").split(".")[0].split("_"))]
                if len(hits) == 1 and params[hits[0]].shape[-1] != k:
                    flip = params[hits[0]].shape[-2] == k  # stored [parts, k, n]
                    if not flip:
                        raise SystemExit("%s: '%s' has no rows of %d" % (name, hits[0], k))
            if not hits:
                raise SystemExit("%s: no parameter is '%s'" % (name, wname))
            for p in hits:
                if p in done:
                    continue
                done.add(p)
                t = params[p].detach()
                t = quant(t.transpose(-1, -2).contiguous(), w["dtype"]).transpose(-1, -2) if flip \
                    else quant(t, w["dtype"])
                params[p].copy_(t)
    lw = logits_of(q, ids)
    with open(os.path.join(d, "logits_%sw.f32" % dt), "wb") as f:
        f.write(lw.contiguous().numpy().astype("<f4").tobytes())
    g.setdefault("quant", {})[dt] = {
        "file": "logits_%sw.f32" % dt,
        "max_abs_diff_vs_f32": float((lw - ref).abs().max()),
        "weights": wmap,
    }
    print("%s %s: %.3g from f32 (max |logit| %.3g)" % (
        name, dt, g["quant"][dt]["max_abs_diff_vs_f32"], float(ref.abs().max())), flush=True)
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump(g, f, indent=1)
        f.write("\n")


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    dtypes = ["q8_0", "q4_0"]
    for a in sys.argv[1:]:
        if a.startswith("--dtypes="):
            dtypes = a.split("=", 1)[1].split(",")
    if len(args) < 3 or any(h not in ("q8_0", "q4_0") for h in dtypes):
        print(__doc__)
        sys.exit(2)
    torch.set_num_threads(1)
    torch.backends.cuda.matmul.allow_tf32 = False
    root, maps, names = args[0], args[1], args[2:]
    failed = []
    for n in names:
        for dt in dtypes:
            try:
                one(os.path.join(root, n), maps, dt)
            except SystemExit as e:  # the others still run
                print(e, flush=True)
                failed.append("%s %s" % (n, dt))
    if failed:
        sys.exit("failed: " + ", ".join(failed))


if __name__ == "__main__":
    main()
