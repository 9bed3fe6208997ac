#!/usr/bin/env bash
# tests/serve/batch_checks.sh — requests that decode together in the slots of
# a running `ssmc serve` (started by tests/serve/run.sh, which sets URL) of
# models/pymamba with --parallel 4 and a chat template that renders each
# message as ROLE:CONTENT and a newline. Every request's greedy text must be
# the text of the same request served alone:
#   - six streamed requests at once, of different prompts and lengths (two
#     wait in the queue and join slots as others finish; one client hangs up
#     after three events), with a request with logprobs among them (served in
#     the session between steps of the slots); the slots' steps drew for
#     several requests at once; every token came as an event of its own; the
#     client that hung up was dropped
#   - a request that arrives while two long streams decode joins them and
#     ends before them
#   - two chats at once: each second turn restores the first turn's state
#     (cached_tokens: every token the first turn fed)
# `batch_checks.sh few SLOTS` instead runs three streams at once on a server
# of SLOTS slots (fewer than three), each with the text it has alone.
set -euo pipefail
PY=$([ -x /usr/bin/python3 ] && echo /usr/bin/python3 || command -v python3)
"$PY" - "$URL" "${1:-all}" "${2:-4}" <<'EOF'
import json, sys, threading, time, urllib.request
url, mode, slots = sys.argv[1], sys.argv[2], int(sys.argv[3])


def metric(name):
    for line in urllib.request.urlopen(url + "/metrics").read().decode().split("\n"):
        if line.startswith(name + " "):
            return int(line.split()[1])
    raise KeyError(name)


def post(body, path="/v1/completions"):
    rq = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(rq) as r:
        return json.load(r)


def stream(body, out, hang_up_after=None, path="/v1/completions"):
    """Streams `body` into out: text, events (those with text), usage, finish, end (time)."""
    body = dict(body, stream=True, stream_options={"include_usage": True})
    rq = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    out.update(text="", events=0, usage=None, finish=None)
    r = urllib.request.urlopen(rq)
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        assert "error" not in chunk, chunk
        if chunk.get("usage"):
            out["usage"] = chunk["usage"]
        for c in chunk["choices"]:
            piece = c.get("text") or c.get("delta", {}).get("content") or ""
            out["text"] += piece
            out["events"] += piece != ""
            out["finish"] = c.get("finish_reason") or out["finish"]
        if hang_up_after is not None and out["events"] >= hang_up_after:
            r.close()  # the client hangs up
            break
    out["end"] = time.monotonic()


def together(jobs):
    outs = [{} for _ in jobs]
    threads = [threading.Thread(target=stream, args=(body, out), kwargs=kw) for (body, kw), out in zip(jobs, outs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outs


def ok(name):
    print("  ok: " + name)


def greedy(prompt, n):
    return {"prompt": prompt, "max_tokens": n, "temperature": 0}


assert metric("ssmc_slots") == slots, metric("ssmc_slots")
if mode == "few":
    jobs = [(greedy(p, n), {}) for p, n in (("def add(a, b):", 12), ("import os", 8), ("class Stack:", 10))]
    steps, drawn = metric("ssmc_batch_steps_total"), metric("ssmc_batch_tokens_total")
    outs = together(jobs)
    steps, drawn = metric("ssmc_batch_steps_total") - steps, metric("ssmc_batch_tokens_total") - drawn
    for (body, _), out in zip(jobs, outs):
        assert out["text"] == post(body)["choices"][0]["text"] and out["events"] >= body["max_tokens"] - 2, out
    assert 1 < drawn / steps <= slots, (drawn, steps)
    print(f"  ok: three streams at once in {slots} slots: each the text it has alone, a token an event; "
          f"{drawn} tokens in {steps} steps")
    sys.exit(0)
prompts = ["def add(a, b):", "class Stack:\n    def __init__(self):", "import os\nimport sys\n",
           "# a parser for arithmetic\ndef parse(text):", "for i in range(10):", "while True:\n    line ="]
lengths = [40, 12, 30, 5, 40, 60]
jobs = [(greedy(p, n), {}) for p, n in zip(prompts, lengths)]
jobs[5] = (jobs[5][0], {"hang_up_after": 3})
steps, drawn, cancelled = metric("ssmc_batch_steps_total"), metric("ssmc_batch_tokens_total"), metric("ssmc_requests_cancelled_total")
lp_body = dict(greedy("x = [", 10), logprobs=2)
lp = {}
lp_thread = threading.Thread(target=lambda: lp.update(post(lp_body)))
lp_thread.start()
outs = together(jobs)
lp_thread.join()
steps, drawn = metric("ssmc_batch_steps_total") - steps, metric("ssmc_batch_tokens_total") - drawn
for _ in range(30):  # the device thread drops the one whose client hung up at its next step
    if metric("ssmc_requests_active") == 0 and metric("ssmc_requests_cancelled_total") == cancelled + 1:
        break
    time.sleep(0.1)
assert metric("ssmc_requests_active") == 0 and metric("ssmc_requests_cancelled_total") == cancelled + 1, \
    (metric("ssmc_requests_active"), metric("ssmc_requests_cancelled_total"))
alone = [post(body)["choices"][0]["text"] for body, _ in jobs]
for i, (out, want) in enumerate(zip(outs[:5], alone)):
    assert out["text"] == want, (i, out["text"], want)
    assert out["finish"] == "length" and out["usage"]["completion_tokens"] == lengths[i], (i, out)
    # every token its own event: only a token whose text is not yet whole (a
    # character of several tokens) can share one
    assert out["events"] >= lengths[i] - 2, (i, out["events"], lengths[i])
assert alone[5].startswith(outs[5]["text"]) and outs[5]["events"] == 3, (outs[5], alone[5])
c = lp["choices"][0]
lp_alone = post(lp_body)["choices"][0]
assert c["text"] == lp_alone["text"] and c["logprobs"] == lp_alone["logprobs"], (c, lp_alone)
assert all(max(t.values()) == l for t, l in zip(c["logprobs"]["top_logprobs"], c["logprobs"]["token_logprobs"]))
assert drawn / steps > 2, f"{drawn} tokens in {steps} steps: the requests did not decode together"
ok(f"six streams at once (two queued, one hung up) and one with logprobs: each the text it has alone, "
   f"a token an event; {drawn} tokens in {steps} steps of the slots")

# a request that arrives while two long streams decode
long_jobs = [(greedy("def main():", 60), {}), (greedy("class Tree:", 60), {})]
outs = [{}, {}]
threads = [threading.Thread(target=stream, args=(body, out), kwargs=kw) for (body, kw), out in zip(long_jobs, outs)]
for t in threads:
    t.start()
for _ in range(600):
    if all(o.get("events", 0) >= 5 for o in outs):
        break
    time.sleep(0.01)
assert all(o.get("events", 0) >= 5 for o in outs), outs
late = post(greedy("print(", 8))
late_end = time.monotonic()
for t in threads:
    t.join()
assert late["choices"][0]["text"] == post(greedy("print(", 8))["choices"][0]["text"]
for (body, _), out in zip(long_jobs, outs):
    assert out["text"] == post(body)["choices"][0]["text"], out
    assert out["end"] > late_end, "the late request did not join the streams"
ok("a request that arrives while two streams decode joins them, ends first, and has the text it has alone")

# two chats at once, then their second turns at once: each restores its first turn
def chat_turns(name, out):
    m = [{"role": "user", "content": "conversation " + name}]
    b = post({"messages": m, "max_tokens": 10, "temperature": 0}, "/v1/chat/completions")
    fed = b["usage"]["prompt_tokens"] + b["usage"]["completion_tokens"] - 1
    m += [b["choices"][0]["message"], {"role": "user", "content": "go on"}]
    out.update(fed=fed, turn2=post({"messages": m, "max_tokens": 6, "temperature": 0}, "/v1/chat/completions"))

chats = [{}, {}]
threads = [threading.Thread(target=chat_turns, args=(n, o)) for n, o in zip("AB", chats)]
for t in threads:
    t.start()
for t in threads:
    t.join()
for o in chats:
    u = o["turn2"]["usage"]
    assert u["prompt_tokens_details"]["cached_tokens"] == o["fed"] > 0, (u, o["fed"])
ok(f"two chats at once: each second turn restores its first turn's {chats[0]['fed']} and {chats[1]['fed']} fed tokens")
print("batch checks: ok")
EOF
