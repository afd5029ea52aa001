#!/usr/bin/env bash
# Instructions per post and per poll (one CQE), counted by callgrind:
# run N and 2N operations and divide the difference by N, so that set-up,
# tear-down and loop entry cancel out. poll_zip: poll with CQE compression
# on (sessions of up to 64 completions). Each figure is printed beside the
# C baseline (benches/c/hot_path.c: the same work written by hand with
# mlx5dv.h's helpers), built here when the rdma-core headers are installed
# (Debian: libibverbs-dev). Needs valgrind.
#   benches/callgrind.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1000}
cargo bench --bench hot_path --no-run >/dev/null 2>&1
bin=$(ls -t target/release/deps/hot_path-* | grep -v '\.d$' | head -1)
cbin=""
if [ -f /usr/include/infiniband/mlx5dv.h ]; then
  cbin=target/release/hot_path_c
  ${CC:-cc} -O2 -o "$cbin" benches/c/hot_path.c
fi
count() { # binary what n phase
  local out; out=$(mktemp)
  valgrind --tool=callgrind --callgrind-out-file="$out" --toggle-collect="*$4*" "$1" "$2" "$3" >/dev/null 2>&1
  callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",","",$1); print $1}'
  rm -f "$out"
}
per_op() { # binary what phase
  local a b; a=$(count "$1" "$2" "$n" "$3"); b=$(count "$1" "$2" $((2 * n)) "$3")
  echo $(( (b - a) / n ))
}
# post: a signaled 1-SGE RDMA_WRITE; post_inline: a 32-byte inline SEND;
# post_ud: a UD SEND with its AV; post_dc: a DCI RDMA_WRITE with its AV;
# post_bf: the RDMA_WRITE rung by BlueFlame; recv: a 1-SGE receive;
# poll: a requester CQE; poll_zip: the same, compressed; poll_resp: a
# responder CQE; poll_err: a flush error CQE.
for what in post post_inline post_ud post_dc post_bf recv poll poll_zip poll_resp poll_err; do
  case $what in
    poll*) phase=poll_phase ;;
    *) phase=${what}_phase ;;
  esac
  rust=$(per_op "$bin" "$what" "$phase")
  c="-"
  if [ -n "$cbin" ] && [ "$what" != poll_zip ]; then
    c=$(per_op "$cbin" "$what" "$phase")
  fi
  printf '%-12s %5s instructions per operation (C with mlx5dv.h: %s)\n' "$what:" "$rust" "$c"
done
