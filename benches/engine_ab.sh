#!/usr/bin/env bash
# The simulator's engine against another commit's, in one run: `sim_scaling`
# built at BASE (in a git worktree under target/) and from the working tree,
# run in turn RUNS times each (base, new, base, new, ...), the best of each
# figure kept, and new / base printed per row. Step 11's figures are taken
# against its starting commit, the default BASE (docs/engine-by-role.md).
#
# usage: benches/engine_ab.sh [BASE] [RUNS] [-- SIM_SCALING_ARGS...]
#   default arguments: --rate-only --deterministic-only
#   BENCH=instructions: callgrind instead, instructions per message of the rate run
#   (N and 2N messages, the difference over N) for 1 and 4096 QPs, base and new
#   e.g.  benches/engine_ab.sh e00793c 5 -- --bandwidth-only
#         benches/engine_ab.sh e00793c 5 -- --rate-only --threaded-only
#         benches/engine_ab.sh e00793c 1 -- --busy 2 --busy-only   (two busy processes)
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-e00793c}
runs=${2:-5}
shift $(($# < 2 ? $# : 2))
[ "${1:-}" = "--" ] && shift
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(--rate-only --deterministic-only)

sha=$(git rev-parse --short=12 "$base^{commit}")
tree=target/engine-base/$sha
if [ ! -d "$tree" ]; then
  git worktree add --detach "$tree" "$sha" >/dev/null
fi
# sim_scaling's --no-pingpong came after the base: give the base's the same flag (the
# example only; the engine is the base's).
if ! grep -q no_pingpong "$tree/mlx5-tools/examples/sim_scaling.rs"; then
  python3 - "$tree/mlx5-tools/examples/sim_scaling.rs" <<'PY'
import sys
p = sys.argv[1]
s = open(p).read()
anchor = "    /// Only this message size (bytes) in the bandwidth table."
s = s.replace(anchor, "    /// No pingpong pass.\n    #[arg(long)]\n    no_pingpong: bool,\n" + anchor, 1)
s = s.replace(".filter(|_| !a.bandwidth_only)\n        .map(|&(m, name)| (name, best(a.runs, || pingpong(m, rounds))))",
              ".filter(|_| !a.bandwidth_only && !a.no_pingpong)\n        .map(|&(m, name)| (name, best(a.runs, || pingpong(m, rounds))))")
open(p, "w").write(s)
PY
fi
(cd "$tree" && CARGO_TARGET_DIR="$PWD/target" cargo build -q --release -p mlx5-tools --example sim_scaling)
cargo build -q --release -p mlx5-tools --example sim_scaling
old="$tree/target/release/examples/sim_scaling"
new=target/release/examples/sim_scaling

if [ "${BENCH:-}" = instructions ]; then
  per_msg() { # binary, HOSTS:QPS
    local n=20000 t=()
    for m in $n $((2 * n)); do
      valgrind --tool=callgrind --callgrind-out-file=/tmp/engine_ab.cg.$$ "$1" --rate-only --deterministic-only \
        --no-pingpong --runs 1 --messages $m --only "$2" >/dev/null 2>&1
      t+=("$(sed -n 's/^summary: //p' /tmp/engine_ab.cg.$$)")
      rm -f /tmp/engine_ab.cg.$$
    done
    echo $(((t[1] - t[0]) / n))
  }
  printf '%-10s %8s %8s\n' config base new
  for c in 2:1 2:4096; do
    printf '%-10s %8s %8s\n' "$c" "$(per_msg "$old" "$c")" "$(per_msg "$new" "$c")"
  done
  exit 0
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for i in $(seq "$runs"); do
  "$old" --json --runs 1 "${args[@]}" >"$out/base.$i"
  "$new" --json --runs 1 "${args[@]}" >"$out/new.$i"
done

python3 - "$out" "$runs" "$sha" <<'EOF'
import json, sys
out, runs, sha = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def load(side):
    return [json.load(open(f"{out}/{side}.{i}")) for i in range(1, runs + 1)]
base, new = load("base"), load("new")
def best(docs, table, key, value, lower_better):
    rows = {}
    for d in docs:
        for r in d.get(table, []):
            k = key(r)
            v = r[value]
            if k not in rows or (v < rows[k] if lower_better else v > rows[k]):
                rows[k] = v
    return rows
print(f"base {sha}, best of {runs} runs each, interleaved")
rate_key = lambda r: (r["mode"], r["hosts"], r["qps"], r["sq_depth"])
b, n = best(base, "rate", rate_key, "ns_per_msg", True), best(new, "rate", rate_key, "ns_per_msg", True)
if b:
    print(f"{'mode':14} {'hosts':>5} {'QPs':>5} {'SQ':>4} {'base ns':>9} {'new ns':>9} {'rate new/base':>14}")
    for k in b:
        if k in n:
            print(f"{k[0]:14} {k[1]:5} {k[2]:5} {k[3]:4} {b[k]:9.1f} {n[k]:9.1f} {b[k] / n[k]:14.2f}")
busy_key = lambda r: (r["mode"], r["what"])
b, n = best(base, "busy", busy_key, "median_ns", True), best(new, "busy", busy_key, "median_ns", True)
bw_, nw_ = best(base, "busy", busy_key, "worst_ns", False), best(new, "busy", busy_key, "worst_ns", False)
if b:
    print(f"busy processes: {base[0].get('busy_processes')}; median and worst ns (best median, worst worst)")
    for k in b:
        if k in n:
            print(f"{k[0]:10} {k[1]:22} base {b[k]:8.1f} / {bw_[k]:8.1f}  new {n[k]:8.1f} / {nw_[k]:8.1f}  new/base {b[k] / n[k]:.2f}")
bw_key = lambda r: r["bytes"]
for what in ("write_Bps", "read_Bps"):
    b, n = best(base, "bandwidth", bw_key, what, False), best(new, "bandwidth", bw_key, what, False)
    m = best(new, "bandwidth", bw_key, "memcpy_Bps", False)
    for k in b:
        if k in n:
            print(f"{what[:-4]:6} {k:>9} B: base {b[k] / 1e9:6.2f} GB/s, new {n[k] / 1e9:6.2f} GB/s,"
                  f" new/base {n[k] / b[k]:.2f}, new/memcpy {n[k] / m[k]:.2f}")
EOF
