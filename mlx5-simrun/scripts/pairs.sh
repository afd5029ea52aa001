#!/usr/bin/env bash
# Unmodified RDMA programs as process pairs on the simulator (step 12): each pair runs
# under mlx5_simrun --shared, server and client in two processes that meet over TCP and
# exchange RoCE v2 datagrams on the loopback (the UDP wire, docs/udp-wire.md).
#
# usage: mlx5-simrun/scripts/pairs.sh BUILD_DIR [FILTER]
#   BUILD_DIR  where mlx5_simrun and libmlx5_simkern.so are (target/release)
#   FILTER     run only the pairs whose name contains it
#
# Each pair checks: both exit 0; for perftest, that what it reports (sizes x iterations)
# equals the simulator's counters (payload bytes on the wire, WQEs executed); for the
# pingpongs, that both print their iteration count. Prints a table (program, flags,
# link, result, figure) and exits 1 if any pair failed. A program that is not installed
# is reported as skipped.
set -u
build=${1:?usage: pairs.sh BUILD_DIR [FILTER]}
filter=${2:-}
run="$build/mlx5_simrun"
[ -x "$run" ] || { echo "pairs.sh: no $run (cargo build --release -p mlx5-simrun -p mlx5-simkern)"; exit 2; }
out=$(mktemp -d /tmp/mlx5-pairs.XXXXXX)
port=$((20000 + $$ % 20000))
failed=0
passed=0
skipped=0

# stat FILE FIELD: a counter from a MLX5_SIMKERN_STATS file (mlx5_0's line).
stat() { grep '^mlx5_0 ' "$1" 2>/dev/null | grep -o "$2: [0-9]*" | head -1 | awk '{print $2}'; }

# Runs one pair. pair NAME LINK CHECK -- PROGRAM ARGS...
#   LINK: ib | roce; CHECK: bw-c (client's payload), bw-s (server's payload), lat (both
#   sides' payload), wqe (client's WQEs), pp (pingpong: both print iterations), ucx
#   (ucx_perftest's Final line).
pair() {
  local name=$1 link=$2 check=$3
  shift 4
  if [ -n "$filter" ] && [[ "$name" != *"$filter"* ]]; then return; fi
  local tool=$1
  if [ "$tool" = env ]; then # env VAR=... PROGRAM: the program
    for a in "${@:2}"; do [[ "$a" == *=* ]] || { tool=$a; break; }; done
  fi
  if ! command -v "$tool" >/dev/null 2>&1; then
    printf '%-44s %-5s %-8s %s\n' "$name" "$link" "skipped" "($tool not installed)"
    skipped=$((skipped + 1))
    return
  fi
  port=$((port + 1))
  local portflag=-p
  local d="$out/$name"
  mkdir -p "$d"
  ( MLX5_SIMKERN_STATS="$d/s.stats" timeout 300 "$run" --shared --link "$link" -- "$@" $portflag $port \
      > "$d/s.log" 2>&1; echo $? > "$d/s.rc" ) &
  local srv=$!
  sleep 0.5
  MLX5_SIMKERN_STATS="$d/c.stats" timeout 300 "$run" --shared --link "$link" -- "$@" $portflag $port 127.0.0.1 \
      > "$d/c.log" 2>&1
  echo $? > "$d/c.rc"
  wait $srv
  local src crc result=ok figure=""
  src=$(cat "$d/s.rc"); crc=$(cat "$d/c.rc")
  if [ "$src" != 0 ] || [ "$crc" != 0 ]; then
    result="FAIL(exit $src/$crc)"
  else
    # perftest's result lines: "#bytes #iterations ..." rows (first two numbers).
    local rows want
    rows=$(grep -E '^ *[0-9]+ +[0-9]+ ' "$d/c.log")
    want=$(awk '{s += $1 * $2} END {print s + 0}' <<<"$rows")
    # (perftest's iteration counts are totals over its QPs.)
    case $check in
      bw-c) [ "$(stat "$d/c.stats" wire_payload_bytes)" = "$want" ] || result="FAIL(bytes: perftest $want, simulator $(stat "$d/c.stats" wire_payload_bytes))" ;;
      bw-s) [ "$(stat "$d/s.stats" wire_payload_bytes)" = "$want" ] || result="FAIL(bytes: perftest $want, simulator $(stat "$d/s.stats" wire_payload_bytes))" ;;
      lat)
        local c s
        c=$(stat "$d/c.stats" wire_payload_bytes); s=$(stat "$d/s.stats" wire_payload_bytes)
        [ "$c" = "$want" ] && [ "$s" = "$want" ] || result="FAIL(bytes: perftest $want, simulator $c/$s)" ;;
      wqe)
        want=$(awk '{s += $2} END {print s + 0}' <<<"$rows")
        [ "$(stat "$d/c.stats" wqes_executed)" = "$want" ] || result="FAIL(WQEs: perftest $want, simulator $(stat "$d/c.stats" wqes_executed))" ;;
      pp)
        grep -q "iters in" "$d/c.log" && grep -q "iters in" "$d/s.log" || result="FAIL(no iteration count)" ;;
      ucx)
        grep -q "^Final:" "$d/c.log" || result="FAIL(no Final line)" ;;
    esac
    [ -n "$rows" ] || [ "$check" = pp ] || [ "$check" = ucx ] || result="FAIL(no result rows)"
    case $check in
      pp) figure=$(grep -o '[0-9.]* usec/iter' "$d/c.log" | head -1) ;;
      ucx) figure=$(grep '^Final:' "$d/c.log" | awk '{$1=$1; print}') ;;
      *) figure=$(tail -n 1 <<<"$rows" | awk '{$1=$1; print}') ;;
    esac
  fi
  printf '%-44s %-5s %-8s %s\n' "$name" "$link" "$result" "$figure"
  if [ "$result" = ok ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "---- $name server:"; tail -n 15 "$d/s.log"; echo "---- $name client:"; tail -n 15 "$d/c.log"
    echo "---- stats:"; cat "$d/s.stats" "$d/c.stats" 2>/dev/null
  fi
}

printf '%-44s %-5s %-8s %s\n' "pair" "link" "result" "last row (perftest: bytes iterations figures) / pingpong"

# perftest: every program with default flags and the flag sets of the issue. "-a" runs
# every size from 2 bytes to 8 MiB, with -n 20 iterations each to keep CI short.
for prog in ib_write_bw ib_write_lat ib_read_bw ib_read_lat ib_send_bw ib_send_lat ib_atomic_bw ib_atomic_lat; do
  case $prog in
    ib_write_bw | ib_send_bw) check=bw-c ;;
    ib_read_bw | ib_read_lat) check=bw-s ;;
    ib_write_lat | ib_send_lat) check=lat ;;
    *) check=wqe ;;
  esac
  pair "$prog" ib $check -- $prog -d mlx5_0
  case $prog in ib_atomic_*) ;; *) pair "$prog -a -n 20" ib $check -- $prog -d mlx5_0 -a -n 20 ;; esac
  pair "$prog --use_old_post_send" ib $check -- $prog -d mlx5_0 --use_old_post_send
  case $prog in *_bw) pair "$prog -q 4" ib $check -- $prog -d mlx5_0 -q 4 ;; esac
  case $prog in ib_write_* | ib_send_*) pair "$prog -I 64 -s 64" ib $check -- $prog -d mlx5_0 -I 64 -s 64 ;; esac
  case $prog in *_bw) pair "$prog --report_gbits" ib $check -- $prog -d mlx5_0 --report_gbits ;; esac
  pair "$prog --out_json" ib $check -- $prog -d mlx5_0 --out_json --out_json_file "$out/$prog.json"
  pair "$prog (RoCE)" roce $check -- $prog -d mlx5_0
  # DC: perftest's DC path without DEVX (DCI and DCT through mlx5dv_create_qp).
  pair "$prog -c DC" ib $check -- $prog -d mlx5_0 -c DC
done
# This crate's tools on their hardware backend (mlx5dv through the real libmlx5), two
# processes on the emulated device, meeting over their own exchange.
tools="${build}"
for prog in write_bw write_lat read_bw read_lat send_bw send_lat atomic_bw atomic_lat; do
  case $prog in
    write_bw | send_bw) check=bw-c ;;
    read_bw | read_lat) check=bw-s ;;
    write_lat | send_lat) check=lat ;;
    *) check=wqe ;;
  esac
  if [ -x "$tools/mlx5_$prog" ]; then
    pair "mlx5_$prog --backend hw" ib $check -- "$tools/mlx5_$prog" --backend hw -d mlx5_0
  else
    printf '%-44s %-5s %-8s %s\n' "mlx5_$prog --backend hw" ib skipped "(not built: cargo build --release -p mlx5-tools)"
    skipped=$((skipped + 1))
  fi
done

# This crate's tools against perftest's, over perftest's exchange (--perftest_exchange),
# each side as server: both must exit 0, and what the client's rows report (size x
# iterations, totals over its QPs) must equal the bytes the client's simulator put on the
# wire (write latency: each side's).
mixed() { # NAME CHECK(bw-c|lat) SERVER-COMMAND CLIENT-COMMAND (words; no spaces inside one)
  local name=$1 check=$2 scmd=$3 ccmd=$4
  if [ -n "$filter" ] && [[ "$name" != *"$filter"* ]]; then return; fi
  local ours theirs
  for w in $scmd $ccmd; do
    case $w in */mlx5_*) ours=$w ;; ib_*) theirs=$w ;; esac
  done
  if ! command -v "$theirs" >/dev/null 2>&1 || [ ! -x "$ours" ]; then
    printf '%-44s %-5s %-8s %s\n' "$name" ib skipped "($theirs or $ours missing)"
    skipped=$((skipped + 1))
    return
  fi
  port=$((port + 1))
  local d="$out/mixed-$port" result=ok
  mkdir -p "$d"
  ( MLX5_SIMKERN_STATS="$d/s.stats" timeout 300 "$run" --shared -- $scmd -p $port > "$d/s.log" 2>&1
    echo $? > "$d/s.rc" ) &
  local srv=$!
  sleep 0.5
  MLX5_SIMKERN_STATS="$d/c.stats" timeout 300 "$run" --shared -- $ccmd -p $port 127.0.0.1 > "$d/c.log" 2>&1
  echo $? > "$d/c.rc"
  wait $srv
  local rows want c s
  rows=$(grep -E '^ *[0-9]+ +[0-9]+ ' "$d/c.log")
  want=$(awk '{s += $1 * $2} END {print s + 0}' <<<"$rows")
  c=$(stat "$d/c.stats" wire_payload_bytes); s=$(stat "$d/s.stats" wire_payload_bytes)
  if [ "$(cat "$d/s.rc")$(cat "$d/c.rc")" != 00 ]; then
    result="FAIL(exit $(cat "$d/s.rc")/$(cat "$d/c.rc"))"
  elif [ -z "$rows" ]; then
    result="FAIL(no result rows)"
  elif [ "$c" != "$want" ] || { [ "$check" = lat ] && [ "$s" != "$want" ]; }; then
    result="FAIL(bytes: rows $want, simulator $c/$s)"
  fi
  printf '%-44s %-5s %-8s %s\n' "$name" ib "$result" "$(tail -n 1 <<<"$rows" | awk '{$1=$1; print}')"
  if [ "$result" = ok ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "---- server:"; tail -n 15 "$d/s.log"; echo "---- client:"; tail -n 15 "$d/c.log"
  fi
}
x="--backend hw -d mlx5_0 --perftest_exchange"
for prog in write_lat write_bw send_lat send_bw; do
  case $prog in *_lat) check=lat ;; *) check=bw-c ;; esac
  ours="$tools/mlx5_$prog $x"
  mixed "ib_$prog -> mlx5_$prog (server)" $check "$ours" "ib_$prog -d mlx5_0"
  mixed "mlx5_$prog -> ib_$prog (server)" $check "ib_$prog -d mlx5_0" "$ours"
  mixed "ib_$prog -a -> mlx5_$prog (server)" $check "$ours -a -n 20" "ib_$prog -d mlx5_0 -a -n 20"
done
mixed "mlx5_write_bw -q 4 -s 64 -> ib_write_bw (server)" bw-c "ib_write_bw -d mlx5_0 -q 4 -s 64" "$tools/mlx5_write_bw $x -q 4 -s 64"
mixed "ib_send_bw -q 4 -> mlx5_send_bw (server)" bw-c "$tools/mlx5_send_bw $x -q 4" "ib_send_bw -d mlx5_0 -q 4"

# UD.
pair "ib_send_bw -c UD" ib bw-c -- ib_send_bw -d mlx5_0 -c UD
pair "ib_send_lat -c UD" ib lat -- ib_send_lat -d mlx5_0 -c UD
pair "ib_send_bw -c UD (RoCE)" roce bw-c -- ib_send_bw -d mlx5_0 -c UD
pair "ib_send_lat -c UD (RoCE)" roce lat -- ib_send_lat -d mlx5_0 -c UD

# The pingpongs of ibverbs-utils.
pair "ibv_rc_pingpong" ib pp -- ibv_rc_pingpong -d mlx5_0 -c
pair "ibv_rc_pingpong -e" ib pp -- ibv_rc_pingpong -d mlx5_0 -e
pair "ibv_rc_pingpong -N" ib pp -- ibv_rc_pingpong -d mlx5_0 -N
pair "ibv_rc_pingpong -g 0 (RoCE)" roce pp -- ibv_rc_pingpong -d mlx5_0 -g 0 -c
pair "ibv_ud_pingpong" ib pp -- ibv_ud_pingpong -d mlx5_0
pair "ibv_ud_pingpong -e" ib pp -- ibv_ud_pingpong -d mlx5_0 -e
pair "ibv_ud_pingpong -g 0 (RoCE)" roce pp -- ibv_ud_pingpong -d mlx5_0 -g 0
pair "ibv_srq_pingpong" ib pp -- ibv_srq_pingpong -d mlx5_0
pair "ibv_srq_pingpong -e" ib pp -- ibv_srq_pingpong -d mlx5_0 -e

# UCX (ucx_perftest) on the mlx5 transports, DEVX off: tag and put, latency and
# bandwidth, over RC and DC (with UD for their wire-up) and over UD. Final line:
# iterations, typical/average/overall latency (us), bandwidth (MB/s), message rate.
for tls in rc_mlx5,ud_mlx5 dc_mlx5,ud_mlx5 ud_mlx5; do
  for t in tag_lat tag_bw ucp_put_lat ucp_put_bw; do
    [ "$tls" = ud_mlx5 ] && [[ $t == ucp_put_* ]] && continue
    pair "ucx_perftest $t $tls" ib ucx -- env UCX_TLS=$tls UCX_NET_DEVICES=mlx5_0:1 UCX_IB_MLX5_DEVX=n \
      ucx_perftest -t $t -n 1000
  done
done

# One pair captured (--pcap, each process its own file of what it sent and received),
# decoded by tshark: every packet RoCE v2 (BTH), none malformed, no expert warning.
capture_pair() {
  local name="ib_write_bw --pcap (RoCE)"
  if [ -n "$filter" ] && [[ "$name" != *"$filter"* ]]; then return; fi
  if ! command -v tshark >/dev/null 2>&1 || ! command -v ib_write_bw >/dev/null 2>&1; then
    printf '%-44s %-5s %-8s %s\n' "$name" roce skipped "(tshark or perftest not installed)"
    skipped=$((skipped + 1))
    return
  fi
  port=$((port + 1))
  local d="$out/pcap" result=ok
  mkdir -p "$d"
  ( timeout 120 "$run" --shared --link roce --pcap "$d/s.pcap" -- ib_write_bw -d mlx5_0 -n 200 -s 3000 -p $port \
      > "$d/s.log" 2>&1; echo $? > "$d/s.rc" ) &
  local srv=$!
  sleep 0.5
  timeout 120 "$run" --shared --link roce --pcap "$d/c.pcap" -- ib_write_bw -d mlx5_0 -n 200 -s 3000 -p $port 127.0.0.1 \
      > "$d/c.log" 2>&1
  echo $? > "$d/c.rc"
  wait $srv
  local n=0
  if [ "$(cat "$d/s.rc")$(cat "$d/c.rc")" != 00 ]; then
    result="FAIL(exit)"
  else
    for f in "$d/s.pcap" "$d/c.pcap"; do
      local all bth bad
      all=$(tshark -r "$f" 2>/dev/null | wc -l)
      bth=$(tshark -r "$f" -Y infiniband.bth 2>/dev/null | wc -l)
      bad=$(tshark -r "$f" -Y '_ws.malformed || _ws.expert.severity >= 6291456' 2>/dev/null | wc -l)
      n=$((n + all))
      if [ "$all" = 0 ] || [ "$all" != "$bth" ] || [ "$bad" != 0 ]; then
        result="FAIL($f: $all packets, $bth with a BTH, $bad malformed or warned)"
      fi
    done
  fi
  printf '%-44s %-5s %-8s %s\n' "$name" roce "$result" "$n packets decoded (two captures)"
  if [ "$result" = ok ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
}
capture_pair

echo "pairs: $passed passed, $failed failed, $skipped skipped"
rm -rf "$out"
[ "$failed" = 0 ]
