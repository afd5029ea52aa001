#!/usr/bin/env bash
# Instructions per post and per poll (one CQE), counted by callgrind:
# run N and 2N operations and divide the difference by N, so that set-up,
# tear-down and loop entry cancel out. poll_zip: poll with CQE compression
# on (sessions of up to 64 completions). Needs valgrind.
#   benches/callgrind.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1000}
cargo bench --bench hot_path --no-run >/dev/null 2>&1
bin=$(ls -t target/release/deps/hot_path-* | grep -v '\.d$' | head -1)
count() { # what n phase
  local out; out=$(mktemp)
  valgrind --tool=callgrind --callgrind-out-file="$out" --toggle-collect="*$3*" "$bin" "$1" "$2" >/dev/null 2>&1
  callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",","",$1); print $1}'
  rm -f "$out"
}
for what in post poll poll_zip; do
  phase=${what%_zip}_phase
  a=$(count "$what" "$n" "$phase")
  b=$(count "$what" $((2 * n)) "$phase")
  echo "$what: $(( (b - a) / n )) instructions per operation (N=$n: $a, 2N: $b)"
done
