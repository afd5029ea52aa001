#!/usr/bin/env bash
# rdma-core's own pyverbs tests (Debian: python3-pyverbs) under mlx5_simrun:
# every test file, each in its own process on one simulated device, once on
# an InfiniBand port and once on a RoCE one, and a line per file and link:
# passed, skipped by the test's own capability check (each reason below
# it, with its count), failed or crashed. A report: it exits 0 whatever the files say, and 2 when it
# cannot run at all (no pyverbs, no launcher).
#
# usage: mlx5-simrun/scripts/pyverbs.sh [TARGET_DIR]   (default target/release)
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-target/release}
simrun=$bin/mlx5_simrun
src=/usr/share/doc/rdma-core/tests
py=/usr/bin/python3
if [ ! -x "$simrun" ] || [ ! -f "$bin/libmlx5_simkern.so" ]; then
  echo "pyverbs: $simrun or its preload library missing (cargo build --release -p mlx5-simrun -p mlx5-simkern)"
  exit 2
fi
if [ ! -f "$src/run_tests.py" ] || ! "$py" -c 'import pyverbs' 2>/dev/null; then
  echo "pyverbs: python3-pyverbs is not installed (Debian: apt install python3-pyverbs)"
  exit 2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$src" "$work/tests"
gunzip -f "$work"/tests/*.gz 2>/dev/null || true
printf '%-28s %-5s %6s %6s %7s %6s %6s  %s\n' file link tests passed skipped failed errors verdict
total_failed=0
for link in ib roce; do
for f in "$work"/tests/test_*.py; do
  name=$(basename "$f" .py)
  out=$(cd "$work/tests" && timeout 300 "$OLDPWD/$simrun" --link "$link" -- "$py" run_tests.py -v "$name" 2>&1)
  rc=$?
  ran=$(sed -n 's/^Ran \([0-9]*\) tests\{0,1\} in.*/\1/p' <<<"$out" | tail -1)
  skipped=$(grep -o 'skipped=[0-9]*' <<<"$out" | tail -1 | cut -d= -f2)
  failed=$(grep -o 'failures=[0-9]*' <<<"$out" | tail -1 | cut -d= -f2)
  errors=$(grep -o 'errors=[0-9]*' <<<"$out" | tail -1 | cut -d= -f2)
  ran=${ran:-0} skipped=${skipped:-0} failed=${failed:-0} errors=${errors:-0}
  passed=$((ran - skipped - failed - errors))
  if [ -z "$(grep -E '^(OK|FAILED)' <<<"$out")" ]; then verdict="crashed (exit $rc)"
  elif [ $((failed + errors)) -gt 0 ]; then verdict=failed
  else verdict=ok; fi
  [ "$verdict" = ok ] || total_failed=$((total_failed + 1))
  printf '%-28s %-5s %6s %6s %7s %6s %6s  %s\n' "$name" "$link" "$ran" "$passed" "$skipped" "$failed" "$errors" "$verdict"
  # Each distinct reason the file's own checks gave for a skip, with its count.
  sed -n "s/.*\.\.\. skipped ['\"]\(.*\)['\"]\$/\1/p" <<<"$out" | sort | uniq -c | sort -rn |
    while read -r count reason; do printf '%36s %3s x %s\n' skipped "$count" "$reason"; done
done
done
echo "pyverbs: $total_failed file runs with failures or crashes (of 2 per file: InfiniBand, RoCE)"
