#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/fuzz_*.c) in build-fuzz/ with clang
# and runs each for a bounded time on its seed corpus, then prints per target
# the executions run and whether it crashed, leaked or timed out.
#
#   tools/fuzz.sh [SECONDS_PER_TARGET (60)] [TARGET...]   e.g. tools/fuzz.sh 30 ir yaml
#
# tests/fuzz/NAME.dict, when there is one, is the target's libFuzzer dictionary.
# New inputs go to build-fuzz/corpus/NAME (the seeds in tests/fuzz/corpus/NAME
# are only read); a failing input is saved as build-fuzz/artifacts/NAME/crash-*
# (or leak-*, timeout-*, oom-*): add it to tests/fuzz/corpus/NAME once fixed.
# Exits non-zero when any target failed.
set -uo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in tests/fuzz/fuzz_*.c; do t=${f##*/fuzz_}; targets+=("${t%.c}"); done
fi

mkdir -p build-fuzz
blog=build-fuzz/build.log
cmake -S . -B build-fuzz -DSSM_FUZZ=ON -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  >"$blog" 2>&1 || { cat "$blog"; exit 1; }
cmake --build build-fuzz -j"$(nproc)" --target "${targets[@]/#/fuzz_}" >>"$blog" 2>&1 ||
  { tail -50 "$blog"; exit 1; }

# inputs larger than a target's largest sensible file are not worth mutating
max_len() {
  case $1 in
    bundle) echo 393216 ;; # the mamba1_tiny seed (chunk 4) is 321,664 bytes
    chat) echo 16384 ;; # the largest seed (jamba-mini-1.7) is 9,632 bytes
    safetensors) echo 65536 ;;
    state) echo 32768 ;; # the mamba2_tiny seed is 20,672 bytes
    tokenizer) echo 131072 ;;
    *) echo 16384 ;;
  esac
}

if command -v llvm-symbolizer >/dev/null; then export ASAN_SYMBOLIZER_PATH=$(command -v llvm-symbolizer); fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

failed=0
summary=""
for t in "${targets[@]}"; do
  exe=build-fuzz/fuzz_$t
  seeds=tests/fuzz/corpus/$t
  work=build-fuzz/corpus/$t
  art=build-fuzz/artifacts/$t/
  log=build-fuzz/fuzz_$t.log
  mkdir -p "$work" "$art"
  echo "== fuzz_$t: ${secs}s"
  dict=()
  if [ -f "tests/fuzz/$t.dict" ]; then dict=(-dict="tests/fuzz/$t.dict"); fi
  "$exe" -max_total_time="$secs" -max_len="$(max_len "$t")" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$art" "${dict[@]}" "$work" "$seeds" >"$log" 2>&1
  rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  found=$(grep -oE '(crash|leak|timeout|oom|slow-unit)-[0-9a-f]+' "$log" | sort -u | tr '\n' ' ')
  if [ $rc -ne 0 ]; then
    failed=1
    echo "-- fuzz_$t FAILED (exit $rc); the end of $log:"
    grep -E '^(==[0-9]+==ERROR|SUMMARY|fuzz property broken|.*runtime error)' "$log" | head -5
    tail -30 "$log"
  fi
  line=$(printf '%-14s executions %-10s exit %-3s %s' "fuzz_$t" "${execs:-?}" "$rc" \
         "${found:+artifacts: $found}")
  summary+="$line"$'\n'
done
echo "== fuzz summary (${secs}s per target)"
printf '%s' "$summary"
exit $failed
