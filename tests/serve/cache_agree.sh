#!/usr/bin/env bash
# tests/serve/cache_agree.sh cached|uncached — a cache hit agrees with a miss
# (serve/sched.c). Run by tests/serve/run.sh (URL, TMP set) against a server
# of models/pymamba with f32 weights, compiled with a chunk whose prefill
# program rounds differently from the decode program. `cached`, against a server with the prompt cache: a first
# turn, then its second turn, which must start from the state at the end of
# the first; that response goes to $TMP/agree-cached.json. `uncached`,
# against a server without the cache: the same second turn, whose text and
# tokens must equal those, and whose logprobs (every token's and its top 2
# alternatives') must agree within 1e-4.
set -euo pipefail
PY=$([ -x /usr/bin/python3 ] && echo /usr/bin/python3 || command -v python3)
post() { curl -s -o "$TMP/body" -w '%{http_code}' -H 'Content-Type: application/json' "$URL/v1/completions" --data-binary "$1"; }
js() { "$PY" -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1"; }
j() { "$PY" -c "import json,sys; b=json.load(open(sys.argv[2])); print($1)" "$1" "$TMP/body"; }
fail() { echo "  FAILED: $1"; head -c 2000 "$TMP/body"; echo; exit 1; }

P1=$("$PY" -c 'print("# " + " ".join("step %d of a long recipe" % i for i in range(9)) + "\ndef cook(pot, heat):")')
if [ "$1" = cached ]; then
  [ "$(post "{\"prompt\": $(js "$P1"), \"max_tokens\": 15, \"temperature\": 0}")" = 200 ] || fail "first turn"
  "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["choices"][0]["text"], end="")' "$TMP/body" >"$TMP/agree-turn1"
fi
P2="$P1$(cat "$TMP/agree-turn1")
# now serve it"
[ "$(post "{\"prompt\": $(js "$P2"), \"max_tokens\": 40, \"temperature\": 0, \"logprobs\": 2}")" = 200 ] || fail "second turn ($1)"
if [ "$1" = cached ]; then
  [ "$(j "b['usage']['prompt_tokens_details']['cached_tokens'] > 0")" = True ] || fail "the second turn did not start from the cache"
  cp "$TMP/body" "$TMP/agree-cached.json"
  echo "  ok: a second turn from the cache ($(j "b['usage']['prompt_tokens_details']['cached_tokens']") of $(j "b['usage']['prompt_tokens']") prompt tokens)"
  exit 0
fi
"$PY" - "$TMP/agree-cached.json" "$TMP/body" <<'EOF' || fail "the second turn's logprobs differ with and without the cache"
import json, sys
a, b = (json.load(open(f))["choices"][0] for f in sys.argv[1:])
assert len(a["logprobs"]["token_logprobs"]) == len(b["logprobs"]["token_logprobs"]) == 40
assert a["text"] == b["text"] and a["logprobs"]["tokens"] == b["logprobs"]["tokens"]
for i, (x, y) in enumerate(zip(a["logprobs"]["token_logprobs"], b["logprobs"]["token_logprobs"])):
    assert abs(x - y) <= 1e-4, f"token_logprobs[{i}]: {x!r} from the cache, {y!r} without"
for i, (x, y) in enumerate(zip(a["logprobs"]["top_logprobs"], b["logprobs"]["top_logprobs"])):
    assert x.keys() == y.keys() and all(abs(x[k] - y[k]) <= 1e-4 for k in x), f"top_logprobs[{i}]: {x!r} from the cache, {y!r} without"
EOF
echo "  ok: the second turn from the cache has the tokens of the same request without the cache, and its logprobs within 1e-4"
