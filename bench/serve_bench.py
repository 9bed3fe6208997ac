#!/usr/bin/env python3
"""Second-turn latency of `ssmc serve` with and without its prompt cache;
with --clients, the aggregate decode rate of concurrent clients.

Starts `ssmc serve MODEL` twice on 127.0.0.1 (a free port): once with the
prompt cache (--cache-mb, default 4096) and once without (--cache-mb 0). For
each of N conversations it sends a first turn (a prompt of about --history
tokens, --gen tokens generated greedily), then a second turn whose prompt is
the first prompt, the first answer and about --new new tokens, streamed, and
measures that second turn: time to the first streamed text (the prefill,
which the cache shortens to the new tokens, plus the server's first decode
slice of up to 8 tokens) and time to the whole answer.
Prints one table (medians over the conversations) and the speedup.

With --clients N[,M...], it instead starts `ssmc serve MODEL --parallel P` once (P:
--parallel, default the largest N) and, for each N in turn, runs N clients at once,
each sending --requests streamed greedy requests one after another (a prompt of about
--prompt tokens, its own words, so that the prompt cache does not help; --gen tokens
generated). It prints, for each N, the tokens generated, the wall time from the first
request to the last token, the aggregate tokens a second (all clients' tokens over that
time) and the time to the first streamed text of the requests (median and 95th
percentile).

Needs only the Python standard library and a built ssmc. A model directory
without tokenizer.json (bench/hf_bench.py make writes none) is served with
--tokenizer models/pymamba/tokenizer.json (ids below 4096: valid for any
vocabulary at least that large).

    cmake --build build -j
    python3 bench/hf_bench.py make /tmp/m14 --preset mamba-1.4b   # a 1.4B-shaped model
    python3 bench/serve_bench.py /tmp/m14 --backend vulkan
    python3 bench/serve_bench.py models/pymamba --backend vulkan --clients 1,8
"""
import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
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


def start(args, cache_mb, parallel=1):
    cmd = [args.ssmc, "serve", args.model, "--port", "0", "--backend", args.backend, "--cache-mb", str(cache_mb),
           "--cache-every", "0", "--max-tokens", str(max(args.gen, 16)), "--parallel", str(parallel)]
    if not os.path.exists(os.path.join(args.model, "tokenizer.json")):
        cmd += ["--tokenizer", args.tokenizer]
    if args.weights:
        cmd += ["--weights", args.weights]
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        sys.stderr.write(line)
        if "listening on" in line:
            # keep reading what it says, so that it never blocks on a full pipe
            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
            return p, line.strip().split("listening on ")[1]
    sys.exit(f"ssmc serve did not start: {' '.join(cmd)}")


def percentile(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


def clients(args):
    counts = [int(n) for n in args.clients.split(",")]
    parallel = args.parallel or max(counts)
    proc, url = start(args, args.cache_mb, parallel)
    rows = []
    try:
        post(url + "/v1/completions", {"prompt": "warm up", "max_tokens": 2, "temperature": 0})
        for n in counts:
            ttft, tokens = [], [0] * n

            def client(c):
                rng = random.Random(7919 * n + c)
                for _ in range(args.requests):
                    body = {"prompt": text_of(int(args.prompt * 0.8), rng), "max_tokens": args.gen, "temperature": 0,
                            "stream": True, "stream_options": {"include_usage": True}}
                    r, total, first = post(url + "/v1/completions", body, stream=True)
                    ttft.append((first if first is not None else total) * 1e3)
                    tokens[c] += r["usage"]["completion_tokens"]

            threads = [threading.Thread(target=client, args=(c,)) for c in range(n)]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.perf_counter() - t0
            rows.append((n, sum(tokens), wall, percentile(ttft, 0.5), percentile(ttft, 0.95)))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    print(f"\n{args.model} on {args.backend}, ssmc serve --parallel {parallel}: {args.requests} streamed greedy "
          f"requests a client, prompts of about {args.prompt} tokens, {args.gen} generated\n")
    print("| clients | tokens generated | wall (s) | aggregate tokens/s | TTFT p50 (ms) | TTFT p95 (ms) |")
    print("|---|---|---|---|---|---|")
    for n, tok, wall, p50, p95 in rows:
        print(f"| {n} | {tok} | {wall:.1f} | {tok / wall:.1f} | {p50:.0f} | {p95:.0f} |")
    if len(rows) > 1:
        base = rows[0][1] / rows[0][2]
        print("\n" + "; ".join(f"{n} clients: {tok / wall / base:.1f}x the aggregate of {rows[0][0]}"
                               for n, tok, wall, _, _ in rows[1:]))


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
    ap.add_argument("--gen", type=int, help="tokens generated a turn (default 16; with --clients, 64)")
    ap.add_argument("--conversations", type=int, default=5)
    ap.add_argument("--cache-mb", type=int, default=4096)
    ap.add_argument("--clients", help="N[,M...]: concurrent clients, each count in turn (the throughput mode)")
    ap.add_argument("--parallel", type=int, help="with --clients: ssmc serve --parallel (default: the most clients)")
    ap.add_argument("--requests", type=int, default=4, help="with --clients: requests a client sends")
    ap.add_argument("--prompt", type=int, default=64, help="with --clients: prompt tokens, about")
    args = ap.parse_args()
    if args.gen is None:
        args.gen = 64 if args.clients else 16
    if args.clients:
        clients(args)
        return
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
