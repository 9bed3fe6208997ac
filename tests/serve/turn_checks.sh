#!/usr/bin/env bash
# tests/serve/turn_checks.sh — next turns of fewer new tokens than the prefill
# chunk are cache hits. Run by tests/serve/run.sh (URL, SSMC, TMP set) against
# a server of models/pymamba on the CPU backend with --chunk 16 and a chat
# template that renders each message as ROLE:CONTENT and a newline. The state
# at the end of a request covers its prompt and every generated token but the
# last (the next step's input), so a next turn restores exactly that
# (usage.prompt_tokens_details.cached_tokens) and gives what a cold run gives.
set -euo pipefail
PY=$([ -x /usr/bin/python3 ] && echo /usr/bin/python3 || command -v python3)
CHUNK=16
ok() { echo "  ok: $1"; }
fail() { echo "  FAILED: $1"; [ -f "$TMP/body" ] && head -c 2000 "$TMP/body" && echo; exit 1; }
post() { curl -s -o "$TMP/body" -w '%{http_code}' -H 'Content-Type: application/json' "$URL$1" --data-binary "$2"; }
j() { "$PY" -c "import json,sys; b=json.load(open(sys.argv[2])); print($1)" "$1" "${2:-$TMP/body}"; }
metric() { curl -s "$URL/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
# cold_ids IDS N: the ids `ssmc run` generates greedily after IDS, from an empty state
cold_ids() { "$SSMC" run models/pymamba --backend cpu --chunk "$CHUNK" --tokens "$1" -n "$2" --greedy 2>/dev/null | head -1; }
# decode IDS: their text (byte-level BPE of models/pymamba/tokenizer.json)
decode() {
  "$PY" - "$1" <<'EOF'
import json, sys
vocab = json.load(open("models/pymamba/tokenizer.json"))["model"]["vocab"]
piece = {v: k for k, v in vocab.items()}
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b)
        cs.append(256 + n)
        n += 1
byte = {chr(c): b for b, c in zip(bs, cs)}
ids = [int(i) for i in sys.argv[1].split(",")]
print(bytes(byte[ch] for i in ids for ch in piece[i]).decode("utf-8"), end="")
EOF
}

# completions as token ids: turn 1, then its prompt, all 6 generated ids and 2
# more (3 tokens past what turn 1 fed)
IDS1=$("$SSMC" tokenize --tokenizer models/pymamba/tokenizer.json --ids 'def add(a, b):')
GEN1=$(cold_ids "$IDS1" 6)
[ "$(post /v1/completions "{\"prompt\": [$IDS1], \"max_tokens\": 6, \"temperature\": 0}")" = 200 ] &&
  [ "$(j "b['choices'][0]['text']")" = "$(decode "$GEN1")" ] || fail "turn 1 by token ids"
IDS2="$IDS1,$GEN1,$("$SSMC" tokenize --tokenizer models/pymamba/tokenizer.json --ids ' #')"
n1=$(echo "$IDS1" | tr ',' '\n' | wc -l)
n2=$(echo "$IDS2" | tr ',' '\n' | wc -l)
[ $((n2 - (n1 + 5))) -lt "$CHUNK" ] || fail "turn 2 adds $((n2 - n1 - 5)) tokens, not fewer than the chunk"
hits=$(metric ssmc_cache_hits_total)
[ "$(post /v1/completions "{\"prompt\": [$IDS2], \"max_tokens\": 8, \"temperature\": 0}")" = 200 ] || fail "turn 2 by token ids"
[ "$(j "b['usage']['prompt_tokens_details']['cached_tokens']")" = $((n1 + 5)) ] && [ "$(metric ssmc_cache_hits_total)" = $((hits + 1)) ] &&
  ok "a second turn of $((n2 - n1 - 5)) new tokens (chunk $CHUNK) restores the $((n1 + 5)) tokens turn 1 fed" ||
  fail "turn 2 cached_tokens: want $((n1 + 5))"
[ "$(j "b['choices'][0]['text']")" = "$(decode "$(cold_ids "$IDS2" 8)")" ] &&
  ok "the second turn from the cache generates what a cold run does" || fail "turn 2 text differs from a cold run"

# a prompt that starts like nothing before it misses: cached_tokens 0
misses=$(metric ssmc_cache_misses_total)
[ "$(post /v1/completions '{"prompt": "Zebras graze at dawn", "max_tokens": 2}')" = 200 ] &&
  [ "$(j "b['usage']['prompt_tokens_details']['cached_tokens']")" = 0 ] && [ "$(metric ssmc_cache_misses_total)" = $((misses + 1)) ] &&
  ok "a miss reports cached_tokens 0" || fail "a miss"

# chat: the second turn's prompt starts with the first's prompt and the
# tokens its answer fed (the template renders the answer back as it was
# generated); streamed, the usage chunk says the same
M1='[{"role": "user", "content": "Write a parser"}]'
[ "$(post /v1/chat/completions "{\"messages\": $M1, \"max_tokens\": 10, \"temperature\": 0}")" = 200 ] &&
  [ "$(j "b['choices'][0]['finish_reason']")" = length ] || fail "chat turn 1"
fed=$(j "b['usage']['prompt_tokens'] + b['usage']['completion_tokens'] - 1")
M2=$("$PY" -c 'import json,sys; m=json.loads(sys.argv[1]); b=json.load(open(sys.argv[2])); print(json.dumps(m + [b["choices"][0]["message"], {"role": "user", "content": "Go"}]))' "$M1" "$TMP/body")
[ "$(post /v1/chat/completions "{\"messages\": $M2, \"max_tokens\": 6, \"temperature\": 0, \"stream\": true, \"stream_options\": {\"include_usage\": true}}")" = 200 ] || fail "chat turn 2"
"$PY" - "$TMP/body" "$fed" "$CHUNK" <<'EOF' && ok "a chat's second turn restores the first turn's $fed fed tokens (stream usage)" || fail "chat turn 2 cached_tokens: want $fed"
import json, sys
events = [l[6:] for l in open(sys.argv[1]).read().split("\n") if l.startswith("data: ")]
u = json.loads(events[-2])["usage"]
assert u["prompt_tokens_details"]["cached_tokens"] == int(sys.argv[2]), u
assert u["prompt_tokens"] - int(sys.argv[2]) < int(sys.argv[3]), u
EOF
echo "turn checks: ok"
