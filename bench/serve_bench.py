#!/usr/bin/env python3
"""Second-turn latency of `ssmc serve` with and without its prompt cache.

Starts `ssmc serve MODEL` twice on 127.0.0.1 (a free port): once with the
prompt cache (--cache-mb, default 4096) and once without (--cache-mb 0). For
each of N conversations it sends a first turn (a prompt of about --history
tokens, --gen tokens generated greedily), then a second turn whose prompt is
the first prompt, the first answer and about --new new tokens, streamed, and
measures that second turn: time to the first streamed text (the prefill,
which the cache shortens to the new tokens, plus the server's first decode
slice of up to 8 tokens) and time to the whole answer.
Prints one table (medians over the conversations) and the speedup.

Needs only the Python standard library and a built ssmc. A model directory
without tokenizer.json (bench/hf_bench.py make writes none) is served with
--tokenizer models/pymamba/tokenizer.json (ids below 4096: valid for any
vocabulary at least that large).

    cmake --build build -j
    python3 bench/hf_bench.py make /tmp/m14 --preset mamba-1.4b   # a 1.4B-shaped model
    python3 bench/serve_bench.py /tmp/m14 --backend vulkan
"""
import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
WORDS = ("the of and to in is for that with as on by this are from be or it at an which "
         "model state layer token cache prompt device kernel buffer value index result python "
         "function return class import list dict string number error file path line").split()


def text_of(n_words, rng):
    lines, line = [], []
    for _ in range(n_words):
        line.append(rng.choice(WORDS))
        if len(line) == 12:
            lines.append(" ".join(line))
            line = []
    lines.append(" ".join(line))
    return "\n".join(lines)


def post(url, body, stream=False):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    try:
        r = urllib.request.urlopen(req, timeout=3600)
    except urllib.error.HTTPError as e:  # the server's message, not only its status
        raise RuntimeError("HTTP %d from %s: %s" % (e.code, url, e.read().decode(errors="replace")))
    with r:
        if not stream:
            return json.loads(r.read()), time.perf_counter() - t0, None
        first, text, usage = None, "", None
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(chunk["error"]["message"])
            if chunk.get("usage"):
                usage = chunk["usage"]
            for c in chunk.get("choices", []):
                if c.get("text") and first is None:
                    first = time.perf_counter() - t0
                text += c.get("text") or ""
        return {"text": text, "usage": usage}, time.perf_counter() - t0, first


def start(args, cache_mb):
    cmd = [args.ssmc, "serve", args.model, "--port", "0", "--backend", args.backend, "--cache-mb", str(cache_mb),
           "--cache-every", "0", "--max-tokens", str(max(args.gen, 16)), "--parallel", "1"]
    if not os.path.exists(os.path.join(args.model, "tokenizer.json")):
        cmd += ["--tokenizer", args.tokenizer]
    if args.weights:
        cmd += ["--weights", args.weights]
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        sys.stderr.write(line)
        if "listening on" in line:
            return p, line.strip().split("listening on ")[1]
    sys.exit(f"ssmc serve did not start: {' '.join(cmd)}")


def run(args, cache_mb):
    proc, url = start(args, cache_mb)
    try:
        post(url + "/v1/completions", {"prompt": "warm up", "max_tokens": 2, "temperature": 0})
        rows = []
        for c in range(args.conversations):
            rng = random.Random(1000 + c)
            history = text_of(int(args.history * 0.8), rng)
            r1, _, _ = post(url + "/v1/completions", {"prompt": history, "max_tokens": args.gen, "temperature": 0})
            prompt2 = history + r1["choices"][0]["text"] + "\n" + text_of(int(args.new * 0.8), rng)
            r2, total, first = post(url + "/v1/completions", {"prompt": prompt2, "max_tokens": args.gen, "temperature": 0,
                                                             "stream": True, "stream_options": {"include_usage": True}},
                                    stream=True)
            u = r2["usage"]
            rows.append((u["prompt_tokens"], u["prompt_tokens_details"]["cached_tokens"],
                         (first if first is not None else total) * 1e3, total * 1e3, r2["text"]))
        return rows
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="a model directory (or a bundle, with --weights)")
    ap.add_argument("--ssmc", default=os.path.join(ROOT, "build", "ssmc"))
    ap.add_argument("--backend", default="vulkan", choices=["vulkan", "cpu"])
    ap.add_argument("--weights", help="the checkpoint, when MODEL is a bundle")
    ap.add_argument("--tokenizer", default=os.path.join(ROOT, "models", "pymamba", "tokenizer.json"))
    ap.add_argument("--history", type=int, default=2000, help="first-turn prompt, about this many tokens")
    ap.add_argument("--new", type=int, default=32, help="new tokens of the second turn, about")
    ap.add_argument("--gen", type=int, default=16, help="tokens generated per turn")
    ap.add_argument("--conversations", type=int, default=5)
    ap.add_argument("--cache-mb", type=int, default=4096)
    args = ap.parse_args()
    with_cache, without = run(args, args.cache_mb), run(args, 0)
    same = all(a[4] == b[4] for a, b in zip(with_cache, without))
    print(f"\n{args.model} on {args.backend}: second turns of {args.conversations} conversations "
          f"(medians; greedy, {args.gen} tokens generated)\n")
    print("| prompt cache | turn-2 prompt tokens | reused from cache | prefilled | time to first token (ms) | whole turn (ms) |")
    print("|---|---|---|---|---|---|")
    for name, rows in (("on", with_cache), ("off", without)):
        p = statistics.median(r[0] for r in rows)
        c = statistics.median(r[1] for r in rows)
        print(f"| {name} | {p:.0f} | {c:.0f} | {p - c:.0f} | {statistics.median(r[2] for r in rows):.1f} | "
              f"{statistics.median(r[3] for r in rows):.1f} |")
    ttft_on, ttft_off = statistics.median(r[2] for r in with_cache), statistics.median(r[2] for r in without)
    print(f"\ntime to first token: {ttft_off / ttft_on:.1f}x faster with the cache; "
          f"same text with and without: {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
