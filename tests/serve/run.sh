#!/usr/bin/env bash
# tests/serve/run.sh SSMC MODE — starts `ssmc serve` on 127.0.0.1 (a free
# port) with the shipped model (models/pymamba, CPU backend) and drives it:
#   curl    curl requests (tests/serve/curl_checks.sh): completions and chat,
#           streamed and not, the same text as `ssmc run`, cache hits, two
#           concurrent conversations, 503, silent connections and answers that
#           take longer than --timeout, clients that hang up, and every
#           malformed request; then short next turns (turn_checks.sh) and
#           requests decoding together in slots, each with the text it has
#           alone (batch_checks.sh); then
#           servers of a model with a KV cache of 8 positions and of one
#           whose weights produce NaN, which also checks the default bound of a
#           prompt, and of a chat template that passes the bounds of a render
#           (tests/serve/limit_checks.sh); then --host and --cors-origin, and
#           --no-page
#   openai  the official openai npm client (tests/serve/openai.test.mjs)
#   load    8 concurrent clients x 50 requests (tests/serve/load.test.mjs):
#           no failure, and the server's RSS bounded
#   vulkan  a smoke run of the same server on the Vulkan backend (lavapipe),
#           and, with f32 weights, a second turn served from the cache has the
#           tokens of the same request on a server without the cache, and its
#           logprobs within 1e-4 (tests/serve/cache_agree.sh); that bundle has
#           no slots, so its requests take turns; a bundle of 2 slots served
#           with --parallel 3 decodes 2 requests together
# Run from the source tree (ctest does). Exits non-zero on any failure.
set -euo pipefail
SSMC=$1
MODE=$2
cd "$(dirname "$0")/../.."
TMP=$(mktemp -d)
SERVER_PID=
cleanup() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID"
    wait "$SERVER_PID" || true
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT

# start_server [ssmc serve options...]: sets URL and SERVER_PID (the model:
# $MODEL, default models/pymamba)
start_server() {
  "$SSMC" serve "${MODEL:-models/pymamba}" --port 0 "$@" >"$TMP/server.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 1200); do # 120 s: a sanitized server on lavapipe beside other suites
    if grep -q "listening on" "$TMP/server.log"; then break; fi
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then cat "$TMP/server.log"; echo "server died"; exit 1; fi
    sleep 0.1
  done
  # (no match is not an exit under set -e: the check below says what happened)
  URL=$(grep -o "listening on http://[^ ]*:[0-9]*" "$TMP/server.log" | head -1 | cut -d' ' -f3 || true)
  [ -n "$URL" ] || { cat "$TMP/server.log"; echo "server did not start in 120 s"; exit 1; }
  export URL SERVER_PID
}

# stop_server: SIGTERM, and the server must exit 0
stop_server() {
  kill -TERM "$SERVER_PID"
  local rc=0
  wait "$SERVER_PID" || rc=$?
  SERVER_PID=
  [ "$rc" -eq 0 ] || { cat "$TMP/server.log"; echo "server exited with $rc"; exit 1; }
}

TEMPLATE=tests/data/chat/nemotron-h-8b-reasoning-128k/chat_template.jinja
case "$MODE" in
curl)
  start_server --backend cpu --chunk 4 --chat-template "$TEMPLATE" --parallel 2 --queue 1 --cache-every 32 \
    --max-body-kb 64 --timeout 2 --max-prompt-tokens 3000
  SSMC="$SSMC" TMP="$TMP" CHUNK=4 bash tests/serve/curl_checks.sh
  stop_server
  # next turns of fewer tokens than the chunk (tests/serve/turn_checks.sh)
  printf '%s' '{% for m in messages %}{{ m.role }}:{{ m.content }}
{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}' >"$TMP/turns.jinja"
  start_server --backend cpu --chunk 16 --chat-template "$TMP/turns.jinja"
  SSMC="$SSMC" TMP="$TMP" bash tests/serve/turn_checks.sh
  # requests that decode together in the 4 slots of --parallel's default
  # (tests/serve/batch_checks.sh)
  grep -q "4 slots: up to 4 requests decode together" "$TMP/server.log" || { cat "$TMP/server.log"; echo "FAILED: 4 slots"; exit 1; }
  bash tests/serve/batch_checks.sh
  stop_server
  # the edges of a model (tests/serve/limit_checks.sh): a KV cache of 8 positions
  MODEL=tests/data/jamba_tiny start_server --backend cpu --chunk 4 --max-seq 8 \
    --tokenizer models/pymamba/tokenizer.json
  # attention in slots: each its own position and KV cache
  grep -q "4 slots: up to 4 requests decode together" "$TMP/server.log" ||
    { cat "$TMP/server.log"; echo "FAILED: a model with attention in slots"; exit 1; }
  bash tests/serve/limit_checks.sh max-seq
  stop_server
  # and weights that produce NaN: mamba1_untied with a NaN in embedding row 684
  mkdir "$TMP/nan_model"
  cp tests/data/mamba1_untied/config.json "$TMP/nan_model/"
  python3 - tests/data/mamba1_untied/model.safetensors "$TMP/nan_model/model.safetensors" <<'EOF'
import json, struct, sys
data = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", data[:8])[0]
start = json.loads(data[8:8 + n])["backbone.embeddings.weight"]["data_offsets"][0]
struct.pack_into("<f", data, 8 + n + start + 4 * (684 * 48 + 7), float("nan"))
open(sys.argv[2], "wb").write(data)
EOF
  MODEL=$TMP/nan_model start_server --backend cpu --tokenizer models/pymamba/tokenizer.json
  bash tests/serve/limit_checks.sh nan
  bash tests/serve/limit_checks.sh prompt
  stop_server
  # a chat template that passes a bound of its render for some message contents
  cat >"$TMP/hostile.jinja" <<'EOF'
{%- for m in messages %}
{%- if m.content == 'work' %}{{ range(1000000) | unique | length }}
{%- elif m.content == 'self' %}{% set ns = namespace() %}{% set ns.x = ns %}{{ ns | tojson }}
{%- elif m.content == 'int' %}{{ (-9223372036854775807 - 1) // -1 }}
{%- elif m.content == 'bytes' %}{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}
{%- elif m.content == 'deep' %}{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = [ns.l] %}{% endfor %}
{%- endif %}{{ m.role }}: {{ m.content }}
{% endfor %}
EOF
  start_server --backend cpu --chat-template "$TMP/hostile.jinja"
  bash tests/serve/limit_checks.sh template
  stop_server
  # a host given by name, and the origins of --cors-origin
  start_server --backend cpu --host localhost --cors-origin 'https://app.example,http://b.example:8000'
  grep -q "listening on http://localhost:[0-9]" "$TMP/server.log" &&
    [ "$(curl -s "$URL/health")" = '{"status":"ok"}' ] && echo "  ok: --host localhost" || { cat "$TMP/server.log"; echo "FAILED: --host localhost"; exit 1; }
  for o in https://app.example http://b.example:8000; do
    [ "$(curl -s -D "$TMP/headers" -o /dev/null -w '%{http_code}' -H "Origin: $o" "$URL/v1/models")" = 200 ] &&
      grep -qi "^Access-Control-Allow-Origin: $o" "$TMP/headers" || { cat "$TMP/headers"; echo "FAILED: --cors-origin allows $o"; exit 1; }
  done
  [ "$(curl -s -o /dev/null -w '%{http_code}' -H "Origin: https://app.example:8443" "$URL/v1/models")" = 403 ] &&
    echo "  ok: --cors-origin allows its origins, and only them" || { echo "FAILED: --cors-origin allows another port"; exit 1; }
  stop_server
  # the page of the server's own address may call it; --no-page: no page at /
  start_server --backend cpu --host 127.0.0.2 --no-page
  ! grep -q "chat page" "$TMP/server.log" && [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/")" = 404 ] &&
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/chat.js")" = 404 ] &&
    echo "  ok: --no-page: / and /chat.js are 404" || { cat "$TMP/server.log"; echo "FAILED: --no-page"; exit 1; }
  [ "$(curl -s -o /dev/null -w '%{http_code}' -H "Origin: $URL" "$URL/v1/models")" = 200 ] &&
    [ "$(curl -s -o /dev/null -w '%{http_code}' -H "Origin: http://127.0.0.2:1" "$URL/v1/models")" = 403 ] &&
    echo "  ok: a page of the server's own address ($URL) may call it" || { echo "FAILED: own address's page"; exit 1; }
  stop_server
  ;;
openai)
  [ -d tests/serve/node_modules/openai ] || { echo "tests/serve/node_modules is missing: run tools/install-deps.sh --test (npm ci)"; exit 1; }
  start_server --backend cpu --chunk 4 --chat-template "$TEMPLATE" --parallel 4
  node --test tests/serve/openai.test.mjs
  stop_server
  ;;
load)
  [ -d tests/serve/node_modules/openai ] || { echo "tests/serve/node_modules is missing: run tools/install-deps.sh --test (npm ci)"; exit 1; }
  # Under AddressSanitizer, freed memory waits in a quarantine of 256 MiB
  # before reuse, so the server's RSS climbs by whatever the quarantine has
  # not yet filled, leak or not (247 MiB here once the interpreter reused its
  # buffers). A 16 MiB quarantine makes RSS measure the server again; leaks
  # are LeakSanitizer's to find at exit. The variable means nothing to a
  # build without ASan.
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=16" \
    start_server --backend cpu --chat-template "$TEMPLATE" --parallel 8 --queue 8 --cache-mb 8
  node --test tests/serve/load.test.mjs
  stop_server
  ;;
vulkan)
  start_server --backend vulkan --chunk 16 --cache-every 32
  SSMC="$SSMC" TMP="$TMP" BACKEND=vulkan CHUNK=16 bash tests/serve/curl_checks.sh smoke
  stop_server
  # chunks of 16 run the tiled gemm, whose rounding differs from the decode
  # program's: a cache hit must agree with a miss all the same. With f32
  # weights: bf16 weights' matmuls take their activations at f16's precision,
  # and there a hit and a miss differ by a few 1e-4 of the largest logit
  "$SSMC" compile models/pymamba --dtype f32 --chunk 16 -q -o "$TMP/pymamba-f32.ssmb"
  MODEL=$TMP/pymamba-f32.ssmb start_server --weights models/pymamba --backend vulkan
  # a bundle without slots: its requests take turns, and the server says so
  grep -q "pymamba-f32.ssmb has no slots (ssmc compile --slots 4): up to 4 requests take turns" "$TMP/server.log" ||
    { cat "$TMP/server.log"; echo "FAILED: a bundle without slots"; exit 1; }
  SSMC="$SSMC" TMP="$TMP" bash tests/serve/cache_agree.sh cached
  stop_server
  MODEL=$TMP/pymamba-f32.ssmb start_server --weights models/pymamba --backend vulkan --cache-mb 0
  SSMC="$SSMC" TMP="$TMP" bash tests/serve/cache_agree.sh uncached
  stop_server
  # a bundle of fewer slots than --parallel: that many decode together, the
  # others wait (tests/serve/batch_checks.sh few)
  "$SSMC" compile models/pymamba --slots 2 --chunk 16 -q -o "$TMP/pymamba-2.ssmb"
  MODEL=$TMP/pymamba-2.ssmb start_server --weights models/pymamba --backend vulkan --parallel 3
  grep -q "pymamba-2.ssmb has 2 slots, fewer than --parallel 3: 2 requests decode together" "$TMP/server.log" ||
    { cat "$TMP/server.log"; echo "FAILED: a bundle of 2 slots"; exit 1; }
  bash tests/serve/batch_checks.sh few 2
  stop_server
  # a batched program that does not open on the device (4 slots' KV caches
  # of 1024 positions, 256 KiB, past a binding range of 128 KiB, where one
  # sequence's fit): the requests take turns, and the server says why
  SSM_VK_MAX_STORAGE_RANGE=131072 MODEL=tests/data/jamba_tiny start_server --backend vulkan \
    --chunk 16 --max-seq 1024 --tokenizer models/pymamba/tokenizer.json
  grep -q "the model has no slots (its batched program of 4 slots does not open: .*'slots\.l1\.k_cache' .*does not fit" \
    "$TMP/server.log" || { cat "$TMP/server.log"; echo "FAILED: slots that do not fit"; exit 1; }
  curl -sf "$URL/v1/completions" -H 'content-type: application/json' \
    -d '{"prompt": "def", "max_tokens": 4, "temperature": 0}' | grep -q '"finish_reason":"length"' ||
    { cat "$TMP/server.log"; echo "FAILED: a completion without slots"; exit 1; }
  stop_server
  ;;
*)
  echo "usage: $0 SSMC curl|openai|load|vulkan"
  exit 2
  ;;
esac
echo "serve $MODE: ok"
