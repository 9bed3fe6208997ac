#!/usr/bin/env python3
"""Per-kernel timings of several ssmc builds and chunk sizes, side by side.

Run on the GPU machine from the repository root; the binaries are built
elsewhere and carried (say a commit's ssmc as base=old/ssmc and the change
as new=build/ssmc):

    python3 bench/sweep.py [--shapes falcon-mamba-7b:4,mamba-1.4b:8] [--models DIR,...]
                           [--dtype bf16] [--chunks 512,2048] [-n 16] [--decode]
                           [--rounds R] [--work /tmp/sweep] LABEL=SSMC [LABEL=SSMC ...]

Each shape is a random model of the real widths (bench/hf_bench.py's preset)
with the given number of layers (fewer than the real ones: a sweep measures
per layer, and makes and loads the model faster), made once under --work
(this needs torch and transformers); --models names model directories to use
as they are. For each model, chunk and binary, in that order: `ssmc compile
DIR --dtype D --chunk C` and `ssmc bench --profile --json -n N`; the first
variant runs again at the end, since the GPU's first measurement of a call
reads up to 25% slow, and the table keeps that repeat. With --rounds R each
variant runs once first, not kept (it warms the GPU), then R times,
interleaved, each round starting one variant later, and each cell is the
median of its R runs. On the H200 one process's run can be up to 25%
slower than the next one's in every kernel, the same binary or not: compare
the changed kernels with one that no variant changes (embed, the scan).

It prints per model the prefill time of each fused op group in microseconds
per dispatch and 512 tokens (the profile's total for the group, divided by
its dispatches and by chunk / 512): for a model of L layers that is per
layer and 512 tokens. The last row is the prefill rate the profile implies.
With --decode, the same for decode, per dispatch and token. Every JSON goes
to --work/sweep.json.
"""
import argparse
import copy
import json
import os
import statistics
import subprocess
import sys


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def make(shape, layers, work):
    """The random model of `shape` with `layers` layers (made once)."""
    d = os.path.join(work, "%s-%dl" % (shape, layers))
    if os.path.exists(os.path.join(d, "config.json")):
        return d
    import torch
    import transformers
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from hf_bench import PRESETS
    if shape not in PRESETS:
        sys.exit("sweep.py: unknown shape %r (known: %s)" % (shape, ", ".join(PRESETS)))
    cfg_name, cls_name, kw = PRESETS[shape]
    torch.manual_seed(0)
    config = getattr(transformers, cfg_name)(**dict(kw, num_hidden_layers=layers))
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = getattr(transformers, cls_name)(config)
    model.eval().save_pretrained(d)
    del model
    log("  made %s" % d)
    return d


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        log("  %s: %s" % (" ".join(cmd[:2]), (p.stderr or p.stdout).strip()[-400:]))
        return None
    return p.stdout


def bench(ssmc, model, dtype, chunk, n, work, label, compiled=False):
    bundle = os.path.join(work, "%s.%s.%s.%d.ssmb" % (os.path.basename(model), label, dtype,
                                                       chunk))
    if not compiled and run([ssmc, "compile", model, "-o", bundle, "--dtype", dtype, "--chunk",
                             str(chunk), "-q"]) is None:
        return None
    out = run([ssmc, "bench", bundle, "--weights", model, "-n", str(n), "--profile", "--json",
               "-q"])
    return json.loads(out) if out is not None else None


def median_profile(runs):
    """One profile whose every time (per op group, and the whole run's) is
    the median of those of `runs` (profiles of one bundle)."""
    runs = [r for r in runs if r]
    if not runs:
        return None
    out = copy.deepcopy(runs[0])
    for prog in ("prefill", "decode"):
        if prog not in out:
            continue
        out[prog]["us"] = statistics.median(r[prog]["us"] for r in runs)
        for i, g in enumerate(out[prog]["op_groups"]):
            g["us"] = statistics.median(r[prog]["op_groups"][i]["us"] for r in runs)
    return out


def per_group(profile, scale):
    """{op group: us per dispatch, times scale} of a profile's program."""
    return {g["name"]: g["us"] / g["dispatches"] * scale for g in profile["op_groups"]
            if g["dispatches"]}


def table(title, columns, rows, rate):
    names = [c for c, _ in columns]
    width = max([len(r) for r in rows] + [len(title)])
    print("\n%-*s %s" % (width, title, " ".join("%12s" % c[-12:] for c in names)))
    for r in rows:
        cells = ["%12.1f" % t[r] if t and r in t else "%12s" % "-" for _, t in columns]
        print("%-*s %s" % (width, r, " ".join(cells)))
    if rate:
        print("%-*s %s" % (width, rate[0],
                           " ".join("%12.0f" % v if v else "%12s" % "-" for v in rate[1])))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binaries", nargs="+", metavar="LABEL=SSMC")
    ap.add_argument("--shapes", default="", help="SHAPE:LAYERS,... (bench/hf_bench.py presets)")
    ap.add_argument("--models", default="", help="model directories, comma-separated")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--chunks", default="512")
    ap.add_argument("-n", type=int, default=16, help="decode tokens of each bench")
    ap.add_argument("--decode", action="store_true", help="also the decode table")
    ap.add_argument("--rounds", type=int, default=1,
                    help="runs of each variant, interleaved; cells are their medians")
    ap.add_argument("--work", default="/tmp/sweep")
    args = ap.parse_args()
    bins = []
    for b in args.binaries:
        label, sep, path = b.partition("=")
        if not sep or not label or not os.access(path, os.X_OK):
            sys.exit("sweep.py: %r: expected LABEL=SSMC, an executable" % b)
        bins.append((label, os.path.abspath(path)))
    try:
        chunks = [int(c) for c in args.chunks.split(",")]
    except ValueError:
        sys.exit("sweep.py: --chunks %r: expected numbers" % args.chunks)
    os.makedirs(args.work, exist_ok=True)
    models = [m for m in args.models.split(",") if m]
    for s in (s for s in args.shapes.split(",") if s):
        shape, _, layers = s.partition(":")
        models.append(make(shape, int(layers or 4), args.work))
    if not models:
        sys.exit("sweep.py: give --shapes or --models")
    out = {}
    for model in models:
        variants = [(label, ssmc, c) for c in chunks for label, ssmc in bins]
        runs = {}
        if args.rounds <= 1:
            for label, ssmc, c in variants + variants[:1]:
                key = "%s@%d" % (label, c)
                log("%s: %s" % (os.path.basename(model), key))
                runs[key] = bench(ssmc, model, args.dtype, c, args.n, args.work, label)
        else:
            many = {}
            for label, ssmc, c in variants:  # compiled once; the first run warms the GPU
                key = "%s@%d" % (label, c)
                first = bench(ssmc, model, args.dtype, c, args.n, args.work, label)
                many[key] = [] if first else None
            for r in range(args.rounds):
                log("%s: round %d of %d" % (os.path.basename(model), r + 1, args.rounds))
                # each round starts one variant later, so that no variant
                # always runs first or after the same one
                for label, ssmc, c in variants[r % len(variants):] + variants[:r % len(variants)]:
                    key = "%s@%d" % (label, c)
                    if many[key] is not None:
                        many[key].append(bench(ssmc, model, args.dtype, c, args.n, args.work,
                                               label, compiled=True))
            runs = {k: median_profile(v) if v is not None else None for k, v in many.items()}
        out[model] = runs
        cols = [(k, r) for k, r in runs.items()]
        pre = [(k, per_group(r["prefill"], 512 / int(k.rsplit("@", 1)[1])) if r else None)
               for k, r in cols]
        rows = list(dict.fromkeys(g for _, t in pre if t for g in t))
        # the profile's "us" is GPU time per run, and a prefill run is one chunk
        rate = [int(k.rsplit("@", 1)[1]) * 1e6 / r["prefill"]["us"] if r else None
                for k, r in cols]
        table("%s %s prefill, us per dispatch and 512 tokens" % (os.path.basename(model),
                                                                 args.dtype),
              pre, rows, ("tokens/s (profile)", rate))
        if args.decode:
            dec = [(k, per_group(r["decode"], 1.0) if r else None) for k, r in cols]
            rows = list(dict.fromkeys(g for _, t in dec if t for g in t))
            rate = [1e6 / r["decode"]["us"] if r else None for _, r in cols]
            table("%s %s decode, us per dispatch and token" % (os.path.basename(model),
                                                               args.dtype),
                  dec, rows, ("tokens/s (profile)", rate))
    with open(os.path.join(args.work, "sweep.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
