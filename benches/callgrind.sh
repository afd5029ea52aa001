#!/usr/bin/env bash
# Instructions per post and per poll (one CQE), counted by callgrind:
# run N and 2N operations and divide the difference by N, so that set-up,
# tear-down and loop entry cancel out. poll_zip: poll with CQE compression
# on (sessions of up to 64 completions). Each figure is printed beside the
# C baseline (benches/c/hot_path.c: the same work written by hand with
# mlx5dv.h's helpers), which mlx5-bench's build script compiles (cc crate)
# where the rdma-core headers are installed (Debian: libibverbs-dev). Needs
# valgrind. The gungraun harness of the same work, with every count beside
# its C counterpart: cargo bench -p mlx5-bench --bench instructions.
#   benches/callgrind.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1000}
cargo build --release -p mlx5-bench --bin hot_path >/dev/null 2>&1
bin=target/release/hot_path
count() { # mode what n phase (mode: rust or c)
  local out; out=$(mktemp)
  local c=(); [ "$1" = c ] && c=(c)
  valgrind --tool=callgrind --callgrind-out-file="$out" --toggle-collect="*$4*" "$bin" "${c[@]}" "$2" "$3" >/dev/null 2>&1
  callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",","",$1); print $1}'
  rm -f "$out"
}
per_op() { # mode what phase
  local a b; a=$(count "$1" "$2" "$n" "$3"); b=$(count "$1" "$2" $((2 * n)) "$3")
  echo $(( (b - a) / n ))
}
# post: a signaled 1-SGE RDMA_WRITE; post_vary: the same with addresses,
# keys and length changing per WQE; post_inline: a 32-byte inline SEND;
# post_ud: a UD SEND with its AV; post_dc: a DCI RDMA_WRITE with its AV;
# post_bf: the RDMA_WRITE rung by BlueFlame; recv: a 1-SGE receive;
# poll: a requester CQE (poll(n) calls); poll1: the same, one poll(1) call
# per CQE, as a latency loop polls; poll_zip: the same, compressed; poll_resp: a
# responder CQE; poll_err: a flush error CQE.
for what in post post_vary post_inline post_ud post_dc post_bf recv poll poll1 poll_zip poll_resp poll_err; do
  case $what in
    poll1) phase=poll1_phase ;;
    poll*) phase=poll_phase ;;
    *) phase=${what}_phase ;;
  esac
  rust=$(per_op rust "$what" "$phase")
  c="-"
  if [ "$what" != poll_zip ] && "$bin" c "$what" 1 >/dev/null 2>&1; then
    c=$(per_op c "$what" "$phase")
  fi
  printf '%-12s %5s instructions per operation (C with mlx5dv.h: %s)\n' "$what:" "$rust" "$c"
done

# The hardware backend (mlx5::hw: libibverbs, mlx5dv_init_obj, its doorbell
# record and register stores) on the simulator as a device (mlx5_simrun, the
# emulated uverbs kernel): hw_post, a signaled 1-SGE RDMA_WRITE rung by
# doorbell; hw_poll, its CQE (poll(16) calls). Where libibverbs and libmlx5
# are installed.
if cargo build --release -q -p mlx5-simrun -p mlx5-simkern 2>/dev/null \
  && { [ -e /usr/lib/x86_64-linux-gnu/libmlx5.so.1 ] || [ -e /usr/lib/aarch64-linux-gnu/libmlx5.so.1 ]; }; then
  hw_count() { # what n phase
    local out; out=$(mktemp)
    target/release/mlx5_simrun -- valgrind --tool=callgrind --callgrind-out-file="$out" \
      --toggle-collect="*$3*" "$bin" "$1" "$2" >/dev/null 2>&1
    callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",","",$1); print $1}'
    rm -f "$out"
  }
  for what in hw_post hw_poll; do
    a=$(hw_count "$what" "$n" "${what}_phase"); b=$(hw_count "$what" $((2 * n)) "${what}_phase")
    printf '%-12s %5s instructions per operation (hardware backend, emulated device)\n' "$what:" $(( (b - a) / n ))
  done
fi
