#!/usr/bin/env bash
# tests/serve/curl_checks.sh [smoke] — curl against a running `ssmc serve`
# of models/pymamba at $URL (started by tests/serve/run.sh, which sets URL,
# SSMC, TMP and, for another backend than cpu, BACKEND). Every check prints
# its name; the first failure exits non-zero.
set -euo pipefail
BACKEND=${BACKEND:-cpu}
# Debian's "$PY" (a version manager's shim can take a second per start)
PY=$([ -x /usr/bin/python3 ] && echo /usr/bin/python3 || command -v python3)
FAILS=0
PASSES=0

T0=$EPOCHREALTIME
ok() { PASSES=$((PASSES + 1)); awk -v a="$T0" -v b="$EPOCHREALTIME" -v m="$1" 'BEGIN { printf "  ok (%5.1fs): %s\n", b - a, m }'; }
fail() { FAILS=$((FAILS + 1)); echo "  FAILED: $1"; [ -f "$TMP/body" ] && head -c 2000 "$TMP/body" && echo; exit 1; }

# post PATH JSON [curl options...]: the status code; the body in $TMP/body
post() {
  local path=$1 data=$2
  shift 2
  curl -s -o "$TMP/body" -w '%{http_code}' -H 'Content-Type: application/json' "$@" "$URL$path" --data-binary "$data"
}

# j EXPR [FILE]: a Python expression over the JSON body `b` (default $TMP/body)
j() { "$PY" -c "import json,sys; b=json.load(open(sys.argv[2])); print($1)" "$1" "${2:-$TMP/body}"; }

# jq-free JSON building: js STRING -> a JSON string literal
js() { "$PY" -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1"; }

# run_text PROMPT [run options...]: what `ssmc run` generates after PROMPT
run_text() {
  local prompt=$1
  shift
  "$SSMC" run models/pymamba --weights models/pymamba --backend "$BACKEND" ${CHUNK:+--chunk "$CHUNK"} --prompt "$prompt" "$@" >"$TMP/run.out" 2>"$TMP/run.err" ||
    { cat "$TMP/run.err" >&2; fail "ssmc run $*" >&2; }
  "$PY" -c 'import sys; t=open(sys.argv[1]).read(); p=sys.argv[2]; assert t.startswith(p) and t.endswith("\n"), t; print(t[len(p):-1], end="")' \
    "$TMP/run.out" "$prompt"
}

metric() { curl -s "$URL/metrics" | awk -v m="$1" '$1 == m {print $2}'; }

# ---- the basics ---------------------------------------------------------------------
[ "$(curl -s -o "$TMP/body" -w '%{http_code}' "$URL/health")" = 200 ] && [ "$(j "b['status']")" = ok ] && ok "GET /health" || fail "GET /health"
[ "$(curl -s -o "$TMP/body" -w '%{http_code}' "$URL/v1/models")" = 200 ] && [ "$(j "b['data'][0]['id']")" = pymamba ] && ok "GET /v1/models" || fail "GET /v1/models"
[ "$(curl -s -o "$TMP/body" -w '%{http_code}' "$URL/v1/models/pymamba")" = 200 ] && [ "$(j "b['id'], b['object']")" = "pymamba model" ] && ok "GET /v1/models/pymamba" || fail "GET /v1/models/pymamba"
[ "$(curl -s -o "$TMP/body" -w '%{http_code}' "$URL/v1/models/gpt-4")" = 404 ] && j "b['error']['message']" | grep -q "The model 'gpt-4' does not exist" && ok "GET /v1/models/gpt-4: 404" || fail "GET /v1/models/gpt-4: 404"

# ---- the chat page (serve/page/) ---------------------------------------------------------
# page PATH TYPE FILE: GET PATH answers 200, of TYPE, with the bytes of serve/page/FILE
page() {
  [ "$(curl -s -D "$TMP/headers" -o "$TMP/body" -w '%{http_code}' "$URL$1")" = 200 ] &&
    grep -qi "^Content-Type: $2" "$TMP/headers" && cmp -s "$TMP/body" "serve/page/$3" &&
    ok "GET $1: serve/page/$3 as $2" || { cat "$TMP/headers"; fail "GET $1: serve/page/$3 as $2"; }
}
page / 'text/html; charset=utf-8' index.html
page /chat.js 'text/javascript; charset=utf-8' chat.js
page /chat.css 'text/css; charset=utf-8' chat.css
grep -q 'src="chat.js"' serve/page/index.html && grep -q 'v1/chat/completions' serve/page/chat.js &&
  ok "the page loads chat.js, which calls v1/chat/completions" || fail "the page's script"

# ---- web pages (CORS) ----------------------------------------------------------------
# a page of this machine: the preflight is answered, and the answer names its origin
code=$(curl -s -D "$TMP/headers" -o "$TMP/body" -w '%{http_code}' -X OPTIONS "$URL/v1/chat/completions" \
  -H 'Origin: http://localhost:5173' -H 'Access-Control-Request-Method: POST' -H 'Access-Control-Request-Headers: content-type')
[ "$code" = 204 ] && grep -qi '^Access-Control-Allow-Origin: http://localhost:5173' "$TMP/headers" &&
  grep -qi '^Access-Control-Allow-Methods: POST, OPTIONS' "$TMP/headers" && grep -qi '^Access-Control-Allow-Headers: content-type' "$TMP/headers" &&
  ok "CORS preflight from http://localhost:5173" || { cat "$TMP/headers"; fail "CORS preflight from http://localhost:5173"; }
[ "$(curl -s -D "$TMP/headers" -o "$TMP/body" -w '%{http_code}' -H 'Origin: http://127.0.0.1:8000' "$URL/v1/models")" = 200 ] &&
  grep -qi '^Access-Control-Allow-Origin: http://127.0.0.1:8000' "$TMP/headers" && ok "CORS: a GET from http://127.0.0.1:8000" || fail "CORS: a GET from http://127.0.0.1:8000"
# a page elsewhere: refused, before any work, with the option that allows it
[ "$(post /v1/completions '{"prompt": "x", "max_tokens": 2}' -H 'Origin: https://evil.example')" = 403 ] &&
  j "b['error']['message']" | grep -q -- "--cors-origin" && ok "CORS: a request from https://evil.example: 403" || fail "CORS: a request from https://evil.example: 403"
[ "$(curl -s -D "$TMP/headers" -o "$TMP/body" -w '%{http_code}' -X OPTIONS -H 'Origin: http://localhost.evil.example' "$URL/v1/completions")" = 403 ] &&
  ! grep -qi '^Access-Control-Allow-Origin' "$TMP/headers" && ok "CORS: a preflight from http://localhost.evil.example: 403" || fail "CORS: a preflight from http://localhost.evil.example: 403"

# greedy completion = ssmc run's continuation
P='def add(a, b):'
want=$(run_text "$P" -n 24 ${RUN_OPTS:-})
[ "$(post /v1/completions "{\"prompt\": $(js "$P"), \"max_tokens\": 24, \"temperature\": 0}")" = 200 ] || fail "greedy completion"
got=$(j "b['choices'][0]['text']")
[ "$got" = "$want" ] && ok "greedy completion equals ssmc run" || { echo "want [$want]"; echo "got  [$got]"; fail "greedy completion equals ssmc run"; }
[ "$(j "b['usage']['completion_tokens'] + b['usage']['prompt_tokens'] == b['usage']['total_tokens']")" = True ] && ok "usage adds up" || fail "usage adds up"
# min_p 1 keeps only the likeliest token: a hot sampler then draws greedy's text
[ "$(post /v1/completions "{\"prompt\": $(js "$P"), \"max_tokens\": 24, \"temperature\": 1.8, \"seed\": 5, \"min_p\": 1}")" = 200 ] &&
  [ "$(j "b['choices'][0]['text']")" = "$want" ] && ok "min_p 1 draws greedy's text" || fail "min_p 1 draws greedy's text"
want_mp=$(run_text "$P" -n 20 --temperature 1.5 --seed 9 --min-p 0.3)
[ "$(post /v1/completions "{\"prompt\": $(js "$P"), \"max_tokens\": 20, \"temperature\": 1.5, \"seed\": 9, \"min_p\": 0.3}")" = 200 ] &&
  [ "$(j "b['choices'][0]['text']")" = "$want_mp" ] && ok "min_p 0.3 draws what ssmc run --min-p 0.3 draws" || fail "min_p equals ssmc run --min-p"
# a repetition penalty (transformers' name, then llama.cpp's) draws what ssmc run --repeat-penalty draws
want_rp=$(run_text "$P" -n 24 --repeat-penalty 1.5 ${RUN_OPTS:-})
[ "$want_rp" != "$want" ] || fail "a repetition penalty of 1.5 changes the greedy text"
[ "$(post /v1/completions "{\"prompt\": $(js "$P"), \"max_tokens\": 24, \"temperature\": 0, \"repetition_penalty\": 1.5}")" = 200 ] &&
  [ "$(j "b['choices'][0]['text']")" = "$want_rp" ] && ok "repetition_penalty 1.5 equals ssmc run --repeat-penalty 1.5" || fail "repetition_penalty equals ssmc run --repeat-penalty"
want_rps=$(run_text "$P" -n 20 --temperature 1.2 --seed 4 --repeat-penalty 1.3)
[ "$(post /v1/completions "{\"prompt\": $(js "$P"), \"max_tokens\": 20, \"temperature\": 1.2, \"seed\": 4, \"repeat_penalty\": 1.3}")" = 200 ] &&
  [ "$(j "b['choices'][0]['text']")" = "$want_rps" ] && ok "repeat_penalty 1.3, sampled, equals ssmc run's" || fail "repeat_penalty equals ssmc run --repeat-penalty, sampled"

# the same prompt again: its state comes from the cache, the text is the same
# (a prompt's state is cached at its last chunk boundary, see serve/sched.c, so
# this one is longer than two chunks)
chunk=$(metric ssmc_prefill_chunk)
PR=$("$PY" -c 'print("# " + " ".join("repeated prompt line %d" % i for i in range(12)) + "\ndef add(a, b):")')
want=$(run_text "$PR" -n 24)
[ "$(post /v1/completions "{\"prompt\": $(js "$PR"), \"max_tokens\": 24, \"temperature\": 0}")" = 200 ] &&
  [ "$(j "b['choices'][0]['text']")" = "$want" ] || fail "a longer prompt"
[ "$(post /v1/completions "{\"prompt\": $(js "$PR"), \"max_tokens\": 24, \"temperature\": 0}")" = 200 ] || fail "repeat"
[ "$(j "b['choices'][0]['text']")" = "$want" ] && [ "$(j "b['usage']['prompt_tokens_details']['cached_tokens'] == (b['usage']['prompt_tokens'] - 1) // $chunk * $chunk > 0")" = True ] &&
  ok "a repeated prompt is restored from the cache (at its last multiple of the chunk, $chunk) and generates the same" || fail "repeated prompt from the cache"

if [ "${1:-}" = smoke ]; then
  echo "curl checks ($BACKEND smoke): $PASSES passed, $FAILS failed"
  exit 0
fi

# logprobs: each generated token's log-probability and its likeliest alternatives
[ "$(post /v1/completions "{\"prompt\": $(js "$P"), \"max_tokens\": 12, \"temperature\": 0, \"logprobs\": 3}")" = 200 ] || fail "logprobs"
"$PY" - "$TMP/body" "$(run_text "$P" -n 12)" <<'EOF' && ok "logprobs: tokens join to the text; greedy picks the likeliest; offsets; 3 alternatives" || fail "logprobs"
import json, sys
b = json.load(open(sys.argv[1]))
c = b["choices"][0]
lp = c["logprobs"]
assert c["text"] == sys.argv[2] and "".join(lp["tokens"]) == c["text"], lp["tokens"]
n = b["usage"]["completion_tokens"]
assert len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"]) == n == 12
for t, l, top, off in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], lp["text_offset"]):
    assert l <= 0 and len(top) == 3 and max(top.values()) == l, (t, l, top)
    assert sorted(top.values(), reverse=True) == list(top.values()), top
    assert c["text"][off:off + len(t)] == t, (off, t)
EOF
# logprobs with a stop string: the entries cover the returned text and no more
"$PY" - "$URL" "$P" <<'EOF' && ok "logprobs with a stop string: the tokens up to the stop, the one it begins in cut there" || fail "logprobs with a stop string"
import json, sys, urllib.request
def complete(**kw):
    body = dict(prompt=sys.argv[2], max_tokens=12, temperature=0, logprobs=1, **kw)
    rq = urllib.request.Request(sys.argv[1] + "/v1/completions", json.dumps(body).encode(),
                                {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(rq))
whole = complete()["choices"][0]
text, lp = whole["text"], whole["logprobs"]
T, O = lp["tokens"], lp["text_offset"]
# a stop string inside token k, not at its start; and one from token k's
# start into token k + 1. k is in the first turn (8 tokens), so tokens drawn
# after the stop string come in the same turn.
inside = [k for k in range(1, 6) if len(T[k]) >= 2 and text.find(T[k][1:]) == O[k] + 1][0]
spans = [k for k in range(1, 6) if T[k + 1] and text.find(T[k] + T[k + 1][0]) == O[k]][0]
cases = [(T[inside][1:], inside + 1, T[:inside] + [T[inside][:1]], inside + 1),
         (T[spans] + T[spans + 1][0], spans, T[:spans], spans + 2)]
for stop, n, tokens, drawn in cases:
    b = complete(stop=[stop])
    c, l = b["choices"][0], b["choices"][0]["logprobs"]
    assert c["finish_reason"] == "stop" and c["text"] == "".join(tokens) == text[:len(c["text"])], (stop, c)
    assert l["tokens"] == tokens, (stop, l["tokens"], tokens)
    assert l["text_offset"] == O[:n] and l["token_logprobs"] == lp["token_logprobs"][:n], (stop, l)
    assert len(l["top_logprobs"]) == n
    assert b["usage"]["completion_tokens"] == drawn, (stop, b["usage"])
EOF
[ "$(post /v1/completions '{"prompt": "x", "logprobs": 6}')" = 400 ] && [ "$(j "b['error']['param']")" = logprobs ] &&
  [ "$(post /v1/completions '{"prompt": "x", "logprobs": 1, "stream": true}')" = 400 ] &&
  [ "$(post /v1/chat/completions '{"messages": [{"role": "user", "content": "x"}], "logprobs": true}')" = 400 ] &&
  ok "logprobs: over 5, with stream, or on chat is a 400" || fail "logprobs errors"

# sampling with a seed: streamed deltas = the whole text = ssmc run with that seed
want=$(run_text "$P" -n 20 --temperature 0.9 --seed 42)
[ "$(post /v1/completions "{\"prompt\": $(js "$P"), \"max_tokens\": 20, \"temperature\": 0.9, \"seed\": 42}")" = 200 ] || fail "seeded completion"
[ "$(j "b['choices'][0]['text']")" = "$want" ] && ok "seeded sampling equals ssmc run --seed (draws continue across turns)" || fail "seeded sampling"
[ "$(post /v1/completions "{\"prompt\": $(js "$P"), \"max_tokens\": 20, \"temperature\": 0.9, \"seed\": 42, \"stream\": true}")" = 200 ] || fail "stream"
"$PY" - "$TMP/body" "$want" <<'EOF' && ok "streamed completion: SSE chunks joined = the text, finish_reason, [DONE]" || fail "streamed completion"
import json, sys
events = [l[6:] for l in open(sys.argv[1]).read().split("\n") if l.startswith("data: ")]
assert events[-1] == "[DONE]", events[-1]
chunks = [json.loads(e) for e in events[:-1]]
assert all(c["object"] == "text_completion" for c in chunks)
assert "".join(c["choices"][0]["text"] for c in chunks) == sys.argv[2]
assert chunks[-1]["choices"][0]["finish_reason"] == "length"
EOF

# a stop string ends the text before it
[ "$(post /v1/completions "{\"prompt\": $(js "$P"), \"max_tokens\": 24, \"temperature\": 0, \"stop\": [\"(\"]}")" = 200 ] || fail "stop"
greedy=$(run_text "$P" -n 24)
[ "$(j "b['choices'][0]['finish_reason']")" = stop ] && [ "$(j "b['choices'][0]['text']")" = "${greedy%%(*}" ] && ok "stop string" || fail "stop string"

# the next turn of a completion: the prompt extends the last exchange
P2="$P$greedy
    return"
before=$(metric ssmc_cache_hits_total)
ntok=$("$SSMC" tokenize --tokenizer models/pymamba/tokenizer.json "$P" | tr ',' '\n' | wc -l)
[ "$(post /v1/completions "{\"prompt\": $(js "$P2"), \"max_tokens\": 12, \"temperature\": 0}")" = 200 ] || fail "second turn"
cached=$(j "b['usage']['prompt_tokens_details']['cached_tokens']")
[ "$cached" -gt "$ntok" ] && [ "$(metric ssmc_cache_hits_total)" -gt "$before" ] &&
  ok "second turn prefills only the new tokens ($cached of $(j "b['usage']['prompt_tokens']") cached; /metrics counts the hit)" || fail "second turn cache hit ($cached cached, first prompt $ntok tokens)"
[ "$(j "b['choices'][0]['text']")" = "$(run_text "$P2" -n 12)" ] && ok "second turn from the cache equals ssmc run on the whole prompt" || fail "second turn text"

# a long shared prefix is reused at a --cache-every boundary (32 here)
SYS=$("$PY" -c 'print("# " + " ".join("shared system prompt line %d" % i for i in range(20)))')
post /v1/completions "{\"prompt\": $(js "$SYS
def one():"), \"max_tokens\": 2}" >/dev/null
[ "$(post /v1/completions "{\"prompt\": $(js "$SYS
class Two:"), \"max_tokens\": 2}")" = 200 ] && [ "$(j "b['usage']['prompt_tokens_details']['cached_tokens'] >= 32")" = True ] &&
  ok "two prompts sharing a long prefix: the second reuses $(j "b['usage']['prompt_tokens_details']['cached_tokens']") tokens" || fail "shared prefix"

# chat, whole and streamed with usage
MSG='[{"role": "system", "content": "You write Python."}, {"role": "user", "content": "A sorting function"}]'
[ "$(post /v1/chat/completions "{\"messages\": $MSG, \"max_tokens\": 10, \"temperature\": 0}")" = 200 ] &&
  [ "$(j "b['object'] + ' ' + b['choices'][0]['message']['role']")" = "chat.completion assistant" ] && ok "chat completion" || fail "chat completion"
whole=$(j "b['choices'][0]['message']['content']")
[ "$(post /v1/chat/completions "{\"messages\": $MSG, \"max_tokens\": 10, \"temperature\": 0, \"stream\": true, \"stream_options\": {\"include_usage\": true}}")" = 200 ] || fail "chat stream"
"$PY" - "$TMP/body" "$whole" <<'EOF' && ok "streamed chat: role first, deltas = the message, a usage chunk, [DONE]" || fail "streamed chat"
import json, sys
events = [l[6:] for l in open(sys.argv[1]).read().split("\n") if l.startswith("data: ")]
assert events[-1] == "[DONE]"
chunks = [json.loads(e) for e in events[:-1]]
assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == sys.argv[2]
assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 10
EOF

# two conversations at once give what each gives alone
conv() { # conv NAME SEED: two turns, the texts in $TMP/conv-NAME
  local m="[{\"role\": \"user\", \"content\": \"conversation $1\"}]" out="$TMP/conv-$1" b="$TMP/b-$1"
  : >"$out"
  for turn in 1 2; do
    curl -s -o "$b" "$URL/v1/chat/completions" --data-binary "{\"messages\": $m, \"max_tokens\": 16, \"temperature\": 0.8, \"seed\": $2}"
    "$PY" -c 'import json,sys; b=json.load(open(sys.argv[1])); print(b["choices"][0]["message"]["content"] + "|" + str(b["usage"]["prompt_tokens_details"]["cached_tokens"]))' "$b" >>"$out"
    m=$("$PY" -c 'import json,sys; m=json.loads(sys.argv[1]); b=json.load(open(sys.argv[2])); m += [b["choices"][0]["message"], {"role": "user", "content": "go on"}]; print(json.dumps(m))' "$m" "$b")
  done
}
conv A 1 & conv B 2 & wait
cp "$TMP/conv-A" "$TMP/conv-A.together"
cp "$TMP/conv-B" "$TMP/conv-B.together"
conv A 1
conv B 2
texts() { sed 's/|[0-9]*$//' "$1"; } # the cached counts depend on what ran before
[ "$(texts "$TMP/conv-A")" = "$(texts "$TMP/conv-A.together")" ] && [ "$(texts "$TMP/conv-B")" = "$(texts "$TMP/conv-B.together")" ] &&
  ok "two concurrent conversations give the texts each gives alone" || { cat "$TMP"/conv-*; fail "concurrent conversations"; }
second=$(grep -o '|[0-9]*$' "$TMP/conv-A" | sed -n 2p | tr -d '|')
[ "$second" -gt 0 ] && ok "a chat's second turn reuses the first ($second tokens cached)" || fail "chat second turn cache"

# busy: --parallel 2 --queue 1, so a fourth request at once gets 503
for i in 1 2 3 4 5; do
  curl -s -o "$TMP/busy$i" -w '%{http_code}\n' "$URL/v1/completions" --data-binary "{\"prompt\": \"x = $i\", \"max_tokens\": 60}" >"$TMP/busy$i.code" &
done
wait
n503=$(cat "$TMP"/busy*.code | grep -c 503 || true)
n200=$(cat "$TMP"/busy*.code | grep -c 200 || true)
b503=$(grep -l '"type":"server_error"' "$TMP"/busy? | head -1)
[ "$n503" -ge 1 ] && [ "$n200" -ge 3 ] && [ -n "$b503" ] && ok "a full queue answers 503 with an OpenAI error ($n200 served, $n503 refused)" || fail "503 ($n200 x 200, $n503 x 503)"

# a client that goes away mid-stream
curl -s -N --max-time 1 "$URL/v1/completions" --data-binary '{"prompt": "import", "max_tokens": 400, "stream": true}' >/dev/null || true
for _ in $(seq 1 100); do [ "$(metric ssmc_requests_active)" = 0 ] && break; sleep 0.1; done
[ "$(metric ssmc_requests_active)" = 0 ] && [ "$(curl -s "$URL/health")" = '{"status":"ok"}' ] && ok "a dropped stream is abandoned, the server goes on" || fail "dropped stream"

# ---- slow and vanished clients (run.sh starts this server with --timeout 2) --------------
# 140 silent connections from one address (127.0.0.2; half of them stop in the middle of
# a header): the default --max-client-connections keeps 32 and closes the rest at once,
# /health from another address answers meanwhile, and after 2 s of silence the server
# closes the 32 too
"$PY" - "$URL" <<'EOF' && ok "140 silent connections from one address: 32 held, /health answers, closed after --timeout" || fail "silent connections"
import select, socket, sys, time, urllib.request
url = sys.argv[1]
host, port = url.split("//")[1].split(":")
socks = []
for i in range(140):
    s = socket.socket()
    s.bind(("127.0.0.2", 0))
    s.connect((host, int(port)))
    if i % 2:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
    socks.append(s)
t0 = time.monotonic()
with urllib.request.urlopen(url + "/health", timeout=10) as r:
    assert r.status == 200 and time.monotonic() - t0 < 1, (r.status, time.monotonic() - t0)

def closed(s):
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True

def held(most, wait):  # the sockets still open once at most `most` are, or after `wait` s
    left = [s for s in socks if s.fileno() >= 0]
    end = time.monotonic() + wait
    while len(left) > most and time.monotonic() < end:
        for s in select.select(left, [], [], 0.05)[0]:
            if closed(s):
                s.close()
                left.remove(s)
    return left

n = len(held(32, 1.5))  # the refused ones go at once, the held ones after 2 s
assert n == 32, f"{n} connections held"
n = len(held(0, 5))
assert n == 0, f"{n} connections still open 5 s later"
EOF
# the timeout counts the client's silence, not the time the server takes to answer: two
# prompts of 160 tokens prefilled side by side take longer than 2 s before a first byte
t0=$EPOCHREALTIME
p160() { "$PY" -c 'import sys; print(",".join([sys.argv[1]] * 160))' "$1"; }
curl -s -o "$TMP/body" "$URL/v1/completions" --data-binary "{\"prompt\": [$(p160 51)], \"max_tokens\": 4}" &
curl -s -N "$URL/v1/completions" --data-binary "{\"prompt\": [$(p160 50)], \"max_tokens\": 4, \"stream\": true}" >"$TMP/slow.sse" || true
wait
took=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
[ "$(j "b['usage']['prompt_tokens']")" = 160 ] && [ "$(grep -c '^data: \[DONE\]' "$TMP/slow.sse")" = 1 ] &&
  ok "answers that take ${took}s to make outlast --timeout 2, streamed or not" || { cat "$TMP/body" "$TMP/slow.sse"; fail "answers longer than --timeout"; }

# a client that hangs up before a non-streamed answer, or in the middle of a stream's
# long prompt: the request is dropped at its next step (between two prefill chunks), not
# run to its end for nobody
gone() { # gone NAME JSON PROMPT_TOKENS: dropped by its client after 1 s, it must stop within 3 s
  local cancelled prefilled fed
  cancelled=$(metric ssmc_requests_cancelled_total)
  prefilled=$(metric ssmc_prompt_tokens_prefilled_total)
  curl -s -N --max-time 1 "$URL/v1/completions" --data-binary "$2" >/dev/null || true
  # (the device thread counts a request as cancelled and no longer active in two steps)
  for _ in $(seq 1 30); do
    [ "$(metric ssmc_requests_active)" = 0 ] && [ "$(metric ssmc_requests_cancelled_total)" = $((cancelled + 1)) ] && break
    sleep 0.1
  done
  fed=$(($(metric ssmc_prompt_tokens_prefilled_total) - prefilled))
  [ "$(metric ssmc_requests_active)" = 0 ] && [ "$(metric ssmc_requests_cancelled_total)" = $((cancelled + 1)) ] &&
    [ "$fed" -lt "$3" ] && ok "$1: dropped ($fed of its $3 prompt tokens prefilled)" ||
    fail "$1 (active $(metric ssmc_requests_active), cancelled $(metric ssmc_requests_cancelled_total), $fed prefilled)"
}
# (greedy: a sampled answer may draw the end of text before the client hangs up)
gone "a client gone before its answer of 1024 tokens" '{"prompt": "import", "max_tokens": 1024, "temperature": 0}' 1
P2000=$("$PY" -c 'print(",".join(["50"] * 2000))')
gone "a client gone during its stream's prompt of 2000 tokens" "{\"prompt\": [$P2000], \"max_tokens\": 1, \"stream\": true}" 2000

# ---- malformed requests: the status and an OpenAI-shaped error naming the problem ----------
bad() { # bad STATUS MATCH METHOD PATH [DATA]: the body's error message contains MATCH
  local code
  if [ -n "${5+x}" ]; then code=$(curl -s -o "$TMP/body" -w '%{http_code}' -X "$3" "$URL$4" --data-binary "$5")
  else code=$(curl -s -o "$TMP/body" -w '%{http_code}' -X "$3" "$URL$4"); fi
  [ "$code" = "$1" ] && "$PY" -c '
import json, sys
e = json.load(open(sys.argv[1]))["error"]
assert set(e) == {"message", "type", "param", "code"} and sys.argv[2] in e["message"], e' "$TMP/body" "$2" &&
    ok "$1: $2" || fail "expected $1 with '$2' for $3 $4 ${5:-}"
}
bad 400 "request body:1:14: not valid JSON" POST /v1/completions '{"prompt": "x"'
bad 400 "expected a JSON object" POST /v1/completions '[1, 2]'
bad 400 "temperature: expected a number from 0 to 2" POST /v1/completions '{"prompt": "x", "temperature": "hot"}'
bad 400 "temperature: expected a number from 0 to 2" POST /v1/completions '{"prompt": "x", "temperature": 2.5}'
bad 400 "max_tokens: expected an integer from 0 to 1024" POST /v1/completions '{"prompt": "x", "max_tokens": -1}'
bad 400 "top_p: expected a number above 0" POST /v1/completions '{"prompt": "x", "top_p": 0}'
bad 400 "min_p: expected a number from 0 to 1" POST /v1/completions '{"prompt": "x", "min_p": 1.5}'
bad 400 "repetition_penalty: expected a number above 0" POST /v1/completions '{"prompt": "x", "repetition_penalty": 0}'
bad 400 "repeat_penalty: expected a number above 0" POST /v1/completions '{"prompt": "x", "repeat_penalty": "x"}'
bad 400 "top_p: 1e-50 is 0 in the sampler's 32-bit float" POST /v1/completions '{"prompt": "x", "top_p": 1e-50}'
[ "$(j "b['error']['param']")" = top_p ] && ok "a top_p that is 0 as a float names top_p" || fail "top_p param"
bad 400 "n: only 1 is supported" POST /v1/completions '{"prompt": "x", "n": 2}'
bad 400 "stop: item 0: expected a non-empty string" POST /v1/completions '{"prompt": "x", "stop": [1]}'
bad 400 "stop: expected a string or an array of up to 4 strings" POST /v1/completions '{"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}'
bad 400 "prompt: missing" POST /v1/completions '{}'
bad 400 "prompt: the prompt has no tokens" POST /v1/completions '{"prompt": ""}'
bad 400 "prompt: item 1: expected a token id from 0 to 4095" POST /v1/completions '{"prompt": [1, 5000]}'
bad 400 "several prompts in one request" POST /v1/completions '{"prompt": ["a", "b"]}'
# run.sh starts this server with --max-prompt-tokens 3000 (a model without a KV cache has
# no --max-seq to bound a prompt)
bad 400 "prompt: the prompt has 3001 tokens, more than the 3000 a request may have (ssmc serve --max-prompt-tokens)" \
  POST /v1/completions "{\"prompt\": [$("$PY" -c 'print(",".join(["50"] * 3001))')]}"
bad 400 "messages: the prompt has" POST /v1/chat/completions \
  "{\"messages\": [{\"role\": \"user\", \"content\": \"$("$PY" -c 'print(" x" * 3000)')\"}]}"
[ "$(j "b['error']['param']")" = messages ] && grep -q "more than the 3000 a request may have" "$TMP/body" &&
  ok "a chat prompt past --max-prompt-tokens names messages" || fail "chat prompt past --max-prompt-tokens"
bad 400 "the key 'prompt' is given twice" POST /v1/completions '{"prompt": "a", "prompt": "b"}'
bad 400 "messages: expected a non-empty array" POST /v1/chat/completions '{"messages": "hi"}'
bad 400 "messages[0]: expected an object with a string 'role'" POST /v1/chat/completions '{"messages": [{"content": "hi"}]}'
bad 400 "tools: not supported" POST /v1/chat/completions '{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}'
bad 400 "stream: expected true or false" POST /v1/chat/completions '{"messages": [{"role": "user", "content": "x"}], "stream": "yes"}'
# a NUL character would cut a string short (cJSON's strings end at one): refused, naming where
bad 400 "prompt: holds a NUL character (\\u0000)" POST /v1/completions '{"prompt": "def add\u0000(a, b):"}'
[ "$(j "b['error']['param']")" = prompt ] && ok "a NUL in the prompt names prompt" || fail "NUL param"
bad 400 "stop[1]: holds a NUL character" POST /v1/completions '{"prompt": "x", "stop": ["a", "b\u0000c"]}'
bad 400 "messages[1].content[0].text: holds a NUL character" POST /v1/chat/completions \
  '{"messages": [{"role": "user", "content": "hi"}, {"role": "user", "content": [{"type": "text", "text": "a\u0000"}]}]}'
bad 400 "messages[0].content: holds a NUL character" POST /v1/chat/completions '{"messages": [{"role": "user", "content": "hi\u0000there"}]}'
code=$(printf '{"prompt": "a\0b"}' | curl -s -o "$TMP/body" -w '%{http_code}' "$URL/v1/completions" --data-binary @-)
[ "$code" = 400 ] && [ "$(j "b['error']['param']")" = prompt ] && ok "400: a NUL byte in the prompt" || fail "NUL byte ($code)"
[ "$(post /v1/completions '{"prompt": "a\\u0000b", "max_tokens": 1}')" = 200 ] && [ "$(j "b['usage']['prompt_tokens'] > 3")" = True ] &&
  ok "an escaped backslash before u0000 is no NUL" || fail "escaped backslash"
bad 404 "Invalid URL (GET /v2/nothing)" GET /v2/nothing
bad 404 "Invalid URL (GET /chat.mjs)" GET /chat.mjs
bad 404 "Invalid URL (GET /v1/index.html)" GET /v1/index.html
bad 404 "Invalid URL (POST /)" POST / '{}'
code=$(curl -s --path-as-is -o "$TMP/body" -w '%{http_code}' "$URL/../CMakeLists.txt")
[ "$code" = 404 ] && ok "404: GET /../CMakeLists.txt" || fail "GET /../CMakeLists.txt ($code)"
bad 405 "GET /v1/completions: method not allowed (use POST)" GET /v1/completions
bad 405 "method not allowed (use GET)" POST /health '{}'
head -c 70000 /dev/zero | tr '\0' 'a' >"$TMP/big"
code=$(curl -s -o "$TMP/body" -w '%{http_code}' "$URL/v1/completions" --data-binary @"$TMP/big")
[ "$code" = 413 ] && grep -q "larger than 65536 bytes" "$TMP/body" && ok "413: an oversized body" || fail "413 ($code)"
code=$(head -c 70000 /dev/zero | tr '\0' 'a' | curl -s -o "$TMP/body" -w '%{http_code}' -H 'Transfer-Encoding: chunked' "$URL/v1/completions" --data-binary @-)
[ "$code" = 413 ] && ok "413: an oversized chunked body" || fail "413 chunked ($code)"
[ "$(curl -s "$URL/health")" = '{"status":"ok"}' ] && ok "still healthy after the bad requests" || fail "health after bad requests"

echo "curl checks: $PASSES passed, $FAILS failed"
