#!/usr/bin/env bash
# tests/serve/cache_bits.sh cached|uncached — a cache hit gives the bits of a
# miss (serve/sched.c). Run by tests/serve/run.sh (URL, TMP set) against a
# server compiled with a chunk whose prefill program rounds differently from
# the decode program. `cached`, against a server with the prompt cache: a
# first turn, then its second turn, which must start from the cache; that
# response goes to $TMP/bits-cached.json. `uncached`, against a server
# without the cache: the same second turn, whose text and logprobs (every
# token's and its top 2 alternatives', printed to the last bit of a double)
# must equal those.
set -euo pipefail
PY=$([ -x /usr/bin/python3 ] && echo /usr/bin/python3 || command -v python3)
post() { curl -s -o "$TMP/body" -w '%{http_code}' -H 'Content-Type: application/json' "$URL/v1/completions" --data-binary "$1"; }
js() { "$PY" -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1"; }
j() { "$PY" -c "import json,sys; b=json.load(open(sys.argv[2])); print($1)" "$1" "$TMP/body"; }
fail() { echo "  FAILED: $1"; head -c 2000 "$TMP/body"; echo; exit 1; }

P1=$("$PY" -c 'print("# " + " ".join("step %d of a long recipe" % i for i in range(9)) + "\ndef cook(pot, heat):")')
if [ "$1" = cached ]; then
  [ "$(post "{\"prompt\": $(js "$P1"), \"max_tokens\": 15, \"temperature\": 0}")" = 200 ] || fail "first turn"
  "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["choices"][0]["text"], end="")' "$TMP/body" >"$TMP/bits-turn1"
fi
P2="$P1$(cat "$TMP/bits-turn1")
# now serve it"
[ "$(post "{\"prompt\": $(js "$P2"), \"max_tokens\": 40, \"temperature\": 0, \"logprobs\": 2}")" = 200 ] || fail "second turn ($1)"
if [ "$1" = cached ]; then
  [ "$(j "b['usage']['prompt_tokens_details']['cached_tokens'] > 0")" = True ] || fail "the second turn did not start from the cache"
  cp "$TMP/body" "$TMP/bits-cached.json"
  echo "  ok: a second turn from the cache ($(j "b['usage']['prompt_tokens_details']['cached_tokens']") of $(j "b['usage']['prompt_tokens']") prompt tokens)"
  exit 0
fi
"$PY" - "$TMP/bits-cached.json" "$TMP/body" <<'EOF' || fail "the second turn's logprobs differ with and without the cache"
import json, sys
a, b = (json.load(open(f))["choices"][0] for f in sys.argv[1:])
assert len(a["logprobs"]["token_logprobs"]) == len(b["logprobs"]["token_logprobs"]) == 40
for k in ("tokens", "token_logprobs", "top_logprobs"):
    for i, (x, y) in enumerate(zip(a["logprobs"][k], b["logprobs"][k])):
        assert x == y, f"{k}[{i}]: {x!r} from the cache, {y!r} without"
assert a["text"] == b["text"]
EOF
echo "  ok: the second turn from the cache has the logprobs of the same request without the cache, bit for bit"
