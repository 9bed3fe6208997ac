#!/usr/bin/env bash
# tests/serve/limit_checks.sh max-seq|nan|prompt|template — a running `ssmc serve` at $URL
# (started by tests/serve/run.sh) at the edges of its model:
#   max-seq  tests/data/jamba_tiny with --max-seq 8 (a KV cache of 8 rows):
#            a request that runs out of positions gets the tokens that fit
#            with finish_reason "length", alone and decoding in slots beside
#            others; a prompt of more than 8 tokens is the client's error
#   nan      mamba1_untied with a NaN in the embedding row of the third
#            generated token: the server's error (500), not the client's, and
#            only that request's when others decode beside it
#   prompt   a model without attention (mamba1_untied, so no --max-seq) and the
#            default options: a prompt past --max-prompt-tokens is the client's error
#   template a chat template that, for some message contents, passes a bound
#            of its render (work, nesting, integers, bytes): each is that
#            request's 400 naming the bound, and the server goes on
set -euo pipefail
PY=$([ -x /usr/bin/python3 ] && echo /usr/bin/python3 || command -v python3)
"$PY" - "$URL" "$1" <<'EOF'
import json, sys, urllib.request, urllib.error
url, mode = sys.argv[1], sys.argv[2]

def post(body, path="/v1/completions"):
    rq = urllib.request.Request(url + path, json.dumps(body).encode(),
                                {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(rq) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()

def ok(name):
    print("  ok: " + name)

if mode == "max-seq":
    # 3 prompt tokens and 8 positions: 6 generated tokens fit (the last one is not fed)
    code, body = post({"prompt": [1, 2, 3], "max_tokens": 6, "temperature": 0})
    assert code == 200, body
    six = json.loads(body)["choices"][0]
    assert six["finish_reason"] == "length", six
    code, body = post({"prompt": [1, 2, 3], "max_tokens": 20, "temperature": 0})
    assert code == 200, body
    b = json.loads(body)
    assert b["choices"][0]["text"] == six["text"] and b["choices"][0]["finish_reason"] == "length", b
    assert b["usage"]["completion_tokens"] == 6, b["usage"]
    ok("past --max-seq: the 6 tokens that fit, finish_reason length")
    code, body = post({"prompt": [1, 2, 3], "max_tokens": 20, "temperature": 0, "stream": True})
    events = [l[6:] for l in body.split("\n") if l.startswith("data: ")]
    assert code == 200 and events[-1] == "[DONE]", body
    chunks = [json.loads(e) for e in events[:-1]]
    assert "".join(c["choices"][0]["text"] for c in chunks) == six["text"], chunks
    assert chunks[-1]["choices"][0]["finish_reason"] == "length", chunks[-1]
    ok("past --max-seq, streamed: the same text, finish_reason length")
    # in slots, each at its own position with its own KV cache: prompts of
    # different lengths at once give what they give alone, also at the end
    # of the cache
    import threading
    bodies = {"a": {"prompt": [1, 2, 3], "max_tokens": 20, "temperature": 0},
              "b": {"prompt": [4, 5], "max_tokens": 20, "temperature": 0},
              "c": {"prompt": [6, 7, 8, 9, 10], "max_tokens": 2, "temperature": 0}}
    alone = {k: post(v) for k, v in bodies.items()}
    def metric(name):
        for line in urllib.request.urlopen(url + "/metrics").read().decode().split("\n"):
            if line.startswith(name + " "):
                return int(line.split()[1])
        raise KeyError(name)
    # requests this short may each finish before the next one arrives (a
    # loaded machine): the three are sent again, each time checked, until
    # some of their tokens were drawn in steps of the slots
    drawn = metric("ssmc_batch_tokens_total")
    for attempt in range(10):
        results = {}
        def run(name):
            results[name] = post(bodies[name])
        threads = [threading.Thread(target=run, args=(k,)) for k in bodies]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for k in bodies:
            (code, body), (alone_code, alone_body) = results[k], alone[k]
            assert code == 200 and alone_code == 200, (k, body, alone_body)
            got, want = json.loads(body)["choices"][0], json.loads(alone_body)["choices"][0]
            assert got["text"] == want["text"] and got["finish_reason"] == want["finish_reason"], (k, got, want)
        assert json.loads(results["b"][1])["usage"]["completion_tokens"] == 7, results["b"]
        if metric("ssmc_batch_tokens_total") > drawn:
            break
    assert metric("ssmc_batch_tokens_total") > drawn, "no token was drawn in a step of the slots in 10 tries"
    ok("three at once in slots: each the text and finish_reason it has alone (past --max-seq: length)")
    code, body = post({"prompt": list(range(1, 9)), "max_tokens": 5, "temperature": 0})
    b = json.loads(body)
    assert code == 200 and b["usage"]["completion_tokens"] == 1, body
    assert b["choices"][0]["finish_reason"] == "length", b
    ok("a prompt of --max-seq tokens: one token")
    code, body = post({"prompt": list(range(1, 10)), "max_tokens": 5})
    e = json.loads(body)["error"]
    assert code == 400 and e["type"] == "invalid_request_error" and e["param"] == "prompt", body
    assert "9 tokens, more than the 8 positions" in e["message"], e
    ok("a prompt longer than --max-seq: 400 naming the prompt")
elif mode == "nan":
    # mamba1_untied after token 5 draws 655, 29, 684; row 684 of the
    # embedding holds a NaN, so the logits of position 3 are NaN
    for stream in (False, True):
        code, body = post({"prompt": [5], "max_tokens": 6, "temperature": 0, "stream": stream})
        if stream:
            events = [l[6:] for l in body.split("\n") if l.startswith("data: ")]
            assert code == 200 and events[-1] == "[DONE]", body
            body = events[-2]
        else:
            assert code == 500, (code, body)
        e = json.loads(body)["error"]
        assert e["type"] == "server_error" and e["param"] is None, e
        assert "non-finite logit at position 3" in e["message"], e
    ok("NaN logits: a server_error (500), streamed or not")
    # in slots: the request that reads the NaN row fails, one decoding beside it goes on
    import threading
    results = {}
    def run(name, body):
        results[name] = post(body)
    threads = [threading.Thread(target=run, args=("nan", {"prompt": [5], "max_tokens": 6, "temperature": 0})),
               threading.Thread(target=run, args=("fine", {"prompt": [7, 8], "max_tokens": 6, "temperature": 0}))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    code, body = results["nan"]
    assert code == 500 and "non-finite logit at position 3" in json.loads(body)["error"]["message"], body
    code, body = results["fine"]
    alone_code, alone = post({"prompt": [7, 8], "max_tokens": 6, "temperature": 0})
    assert code == 200 and alone_code == 200, (body, alone)
    assert json.loads(body)["choices"][0]["text"] == json.loads(alone)["choices"][0]["text"], (body, alone)
    ok("NaN logits in one slot: that request's 500; the one beside it has the text it has alone")
elif mode == "prompt":
    # no attention, so no KV cache and no --max-seq: the default --max-prompt-tokens bounds a prompt
    code, body = post({"prompt": [1] * 32769, "max_tokens": 1})
    e = json.loads(body)["error"]
    assert code == 400 and e["type"] == "invalid_request_error" and e["param"] == "prompt", body
    assert "32769 tokens, more than the 32768 a request may have (ssmc serve --max-prompt-tokens)" in e["message"], e
    ok("a prompt past the default --max-prompt-tokens of a model without a KV cache: 400")
elif mode == "template":
    chat = lambda content: post({"messages": [{"role": "user", "content": content}], "max_tokens": 1},
                                "/v1/chat/completions")
    for content, want in [("work", "runs too long"), ("self", "tojson: a value nested deeper"),
                          ("int", "integer overflow in floor division"), ("bytes", "a string longer than"),
                          ("deep", "nested deeper than 400")]:
        code, body = chat(content)
        e = json.loads(body)["error"]
        assert code == 400 and e["type"] == "invalid_request_error" and e["param"] == "messages", body
        assert want in e["message"], e
        with urllib.request.urlopen(url + "/health") as r:
            assert r.status == 200, r.status
    code, body = chat("hello")
    assert code == 200, body
    ok("a template past its bounds: each request's 400, /health and other requests answered")
else:
    sys.exit("usage: limit_checks.sh max-seq|nan|prompt|template")
EOF
