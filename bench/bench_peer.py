#!/usr/bin/env python3
"""ssmc beside transformers on the same GPU and the same weights.

Run on a GPU machine with torch and transformers, from the repository root,
after building ssmc:

    python3 bench/bench_peer.py [--shapes mamba-130m,mamba-1.4b] [--dtypes f32,bf16,q8_0,q4_0]
                                [-n 256] [--chunk T] [--work /tmp/peer] [--ssmc build/ssmc]
                                [--profile]

For each shape it makes a model of the real shape with random weights
(bench/hf_bench.py's presets, saved once under --work), then for each dtype:
  - ssmc: `ssmc compile DIR --dtype D [--chunk T]` and `ssmc bench --json` (decode with
    the logits read back, decode with the token fed back on the device, and
    prefill), plus the dispatches per token from `ssmc inspect --json`;
  - transformers: greedy `generate` of n tokens after a 16-token prompt, and
    one forward over 512 and over 2048 tokens (prefill), CUDA-event timed, in
    that dtype, or in bf16 for a quantized one (q8_0, q4_0: transformers has
    no such weights; its bf16 run is what a quantized bundle replaces);
and it measures the device's read bandwidth itself (a reduction over a
large tensor). It prints one table: tokens/s, ms/token, dispatches/token,
% of the bandwidth limit (weights bytes x tokens/s / bandwidth), and the
ratio to transformers; and writes every number to --work/results.json.
A step that fails (e.g. a dtype this ssmc cannot compile) shows as n/a
with its message; the others go on.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_bench import PRESETS  # noqa: E402

TORCH_DTYPE = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def read_bandwidth():
    """Device read bandwidth in bytes/s: sum() over 4 GiB, best of 5."""
    x = torch.empty(1 << 30, dtype=torch.float32, device="cuda").uniform_()
    x.sum()
    torch.cuda.synchronize()
    best = 0.0
    for _ in range(5):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        x.sum()
        e.record()
        torch.cuda.synchronize()
        best = max(best, x.numel() * 4 / (s.elapsed_time(e) / 1e3))
    del x
    torch.cuda.empty_cache()
    return best


def make(shape, work):
    d = os.path.join(work, shape)
    if os.path.exists(os.path.join(d, "config.json")):
        return d
    cfg_name, cls_name, kw = PRESETS[shape]
    torch.manual_seed(0)
    t0 = time.time()
    config = getattr(transformers, cfg_name)(**kw)
    with torch.device("cuda"):
        model = getattr(transformers, cls_name)(config)
    model.eval().save_pretrained(d)
    log("  made %s in %.0f s" % (shape, time.time() - t0))
    del model
    torch.cuda.empty_cache()
    return d


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError("%s: %s" % (" ".join(cmd[:2]), (p.stderr or p.stdout).strip()[-400:]))
    return p.stdout


def ssmc_side(ssmc, d, dtype, n, work, shape, profile, chunk=None):
    bundle = os.path.join(work, "%s.%s.ssmb" % (shape, dtype))
    t0 = time.time()
    run([ssmc, "compile", d, "-o", bundle, "--dtype", dtype] +
        (["--chunk", str(chunk)] if chunk else []))
    compile_s = time.time() - t0
    cmd = [ssmc, "bench", bundle, "--weights", d, "-n", str(n), "--json"]
    if profile:
        cmd.append("--profile")
    out = json.loads(run(cmd))
    info = json.loads(run([ssmc, "inspect", bundle, "--json"]))
    out["dispatches_per_token"] = info["programs"]["decode"]["dispatches"]
    out["compile_s"] = compile_s
    return out


def timed(fn):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / 1e3


def hf_side(d, dtype, n):
    model = transformers.AutoModelForCausalLM.from_pretrained(
        d, dtype=TORCH_DTYPE[dtype]).cuda().eval()
    try:
        import mamba_ssm  # noqa: F401
        path = "mamba_ssm kernels"
    except ImportError:
        path = "reference PyTorch path"
    V = model.config.vocab_size
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, V, (1, 16), generator=g).cuda()
    kw = dict(do_sample=False, eos_token_id=None, pad_token_id=0)
    out = {"path": path}
    with torch.no_grad():
        model.generate(prompt, max_new_tokens=8, min_new_tokens=8, **kw)
        t = timed(lambda: model.generate(prompt, max_new_tokens=n, min_new_tokens=n, **kw))
        out["decode_tokens_per_s"] = n / t
        for T in (512, 2048):
            ids = torch.randint(0, V, (1, T), generator=g).cuda()
            model(ids)
            out["prefill_%d_tokens_per_s" % T] = T / timed(lambda: model(ids))
    del model
    torch.cuda.empty_cache()
    return out


def fmt(x, f="%.1f"):
    return "n/a" if x is None else f % x


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="mamba-130m,mamba-1.4b,mamba-2.8b,falcon-mamba-7b,mamba2-2.7b")
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("--work", default="/tmp/peer")
    ap.add_argument("--ssmc", default="build/ssmc")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--chunk", type=int, default=None,
                    help="prompt tokens per prefill run (ssmc compile --chunk)")
    ap.add_argument("--no-hf", action="store_true", help="skip transformers")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    bw = read_bandwidth()
    gpu = torch.cuda.get_device_name()
    log("%s: read bandwidth %.2f TB/s; transformers %s, torch %s"
        % (gpu, bw / 1e12, transformers.__version__, torch.__version__))
    results = {"gpu": gpu, "read_bandwidth": bw, "transformers": transformers.__version__,
               "torch": torch.__version__, "rows": []}
    for shape in args.shapes.split(","):
        d = make(shape, args.work)
        for dtype in args.dtypes.split(","):
            row = {"shape": shape, "dtype": dtype}
            log("%s %s" % (shape, dtype))
            try:
                row["ssmc"] = ssmc_side(args.ssmc, d, dtype, args.n, args.work, shape, args.profile,
                                        args.chunk)
            except Exception as e:  # keep going: device time is scarce
                row["ssmc_error"] = str(e)
                log("  ssmc: %s" % e)
            if not args.no_hf:
                row["hf_dtype"] = dtype if dtype in TORCH_DTYPE else "bf16"
                try:
                    row["hf"] = hf_side(d, row["hf_dtype"], min(args.n, 128))
                except Exception as e:
                    row["hf_error"] = str(e)
                    log("  transformers: %s" % e)
            results["rows"].append(row)
            with open(os.path.join(args.work, "results.json"), "w") as f:
                json.dump(results, f, indent=1)
    print("%s, read bandwidth %.2f TB/s (measured), ssmc %s, transformers %s"
          % (gpu, bw / 1e12, results["rows"][0].get("ssmc", {}).get("ssmc_version", "?"),
             transformers.__version__))
    print("| shape | dtype | weights GB | ssmc decode tok/s (fed back) | ms/token | dispatches/token "
          "| % of bandwidth limit | transformers (dtype) decode tok/s | ratio | ssmc prefill tok/s "
          "| transformers prefill 512 / 2048 tok/s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results["rows"]:
        s, h = r.get("ssmc", {}), r.get("hf", {})
        wb = s.get("weight_bytes")
        tok = s.get("decode_feedback_tokens_per_s")
        pct = 100 * wb * tok / bw if wb and tok else None
        hf_tok = h.get("decode_tokens_per_s")
        print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s / %s |" % (
            r["shape"], r["dtype"], fmt(wb / 1e9 if wb else None, "%.2f"), fmt(tok),
            fmt(1e3 / tok if tok else None, "%.3f"), fmt(s.get("dispatches_per_token"), "%d"),
            fmt(pct, "%.0f%%"), "%s (%s)" % (fmt(hf_tok), r.get("hf_dtype", "-")),
            fmt(tok / hf_tok if tok and hf_tok else None, "%.1fx"),
            fmt(s.get("prefill_tokens_per_s")), fmt(h.get("prefill_512_tokens_per_s")),
            fmt(h.get("prefill_2048_tokens_per_s"))))
        for k in ("ssmc_error", "hf_error"):
            if k in r:
                print("  %s %s: %s" % (r["shape"], k, r[k][:300]))


if __name__ == "__main__":
    main()
