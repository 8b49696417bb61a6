#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What the provider says when it cannot work (issue fix6p), with unmodified fi_info /
# fi_pingpong (libfabric-bin) and a private npo-emud mesh8 (docs/libfabric.md "Backend",
# "Environment variables", "Domains are cards"):
#  - FI_NPO_BACKEND without a daemon, bogus, empty, with ?card=: rc 61 and one stderr line why;
#  - FI_NPO_BACKEND=...?doorbell=socket: every card's queues ring by socket (no shadow page);
#  - emu:mesh8 inside a job of 2 ranks: no cards, the line says to use npo-emud;
#  - bad values (FI_NPO_CARD, FI_NPO_LAYERING, FI_NPO_FAULT, FI_NPO_FAULT_MS, FI_NPO_RING_LANES,
#    FI_NPO_POLL_BACKOFF, FI_NPO_STALL_MS, FI_NPO_TRACE_MAX, FI_NPO_TRACE in a missing directory)
#    are reported once each, naming variable, value and accepted form, and the default is used
#    (the ping-pong still passes);
#  - fi_domain on a card another process holds: one stderr line naming the holder's pid, the
#    card count, and (9 local ranks) that there are more ranks than cards;
#  - fi_info claims one free card (one owner connect, npo-emud logs every connect), inside a
#    job the local rank's card first, and lists it first (alone inside a job).
# Usage: run-diagnostics.sh NPO_EMUD PROVIDER_DIR
set -euo pipefail
# shellcheck source=fi-script.sh
source "$(dirname "${BASH_SOURCE[0]}")/fi-script.sh"
emud="$1" provdir="$2"
if ! command -v fi_info >/dev/null || ! command -v fi_pingpong >/dev/null; then
  echo "SKIP: fi_info / fi_pingpong not installed (package libfabric-bin)"; exit 0
fi
fi_workdir npo-fi-diag
export FI_PROVIDER_PATH="${provdir}"
unset FI_NPO_CARD NPO_BACKEND FI_NPO_FAULT FI_NPO_FAULT_MS FI_NPO_RING_LANES FI_NPO_POLL_BACKOFF FI_NPO_STALL_MS \
  FI_NPO_LAYERING FI_NPO_TRACE FI_NPO_TRACE_MAX FI_LOG_LEVEL
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# expect_no_cards NAME PATTERN [env assignments...]: fi_info -p npo answers 61 and prints
# exactly one line of ours matching PATTERN (besides libfabric's "fi_getinfo: -61").
expect_no_cards() {
  local name="$1" pat="$2"
  shift 2
  set +e
  local out
  out="$(env "$@" fi_info -p npo 2>&1)"
  local rc=$?
  set -e
  echo "${name}: rc=${rc}: ${out}"
  [[ ${rc} -eq 61 ]] || fail "${name}: expected no data (61)"
  [[ "$(grep -c '^npo: ' <<<"${out}")" -eq 1 ]] || fail "${name}: expected one line of the provider"
  grep -qE "${pat}" <<<"${out}" || fail "${name}: the line does not match '${pat}'"
}
expect_no_cards "no daemon" "^npo: no cards: FI_NPO_BACKEND=emu-remote:${dir}/none: no directory ${dir}/none \(is npo-emud running" \
  FI_NPO_BACKEND="emu-remote:${dir}/none"
expect_no_cards "bogus backend" "^npo: no cards: FI_NPO_BACKEND=bogus:xyz: .*bogus" FI_NPO_BACKEND=bogus:xyz
expect_no_cards "empty backend" "^npo: no cards: FI_NPO_BACKEND is empty; the default (vfio:all|emu-remote:/run/npo-emud)" \
  FI_NPO_BACKEND=
expect_no_cards "emu: in a job" "in-process emulator is private to each process, and this job has 2 ranks.*npo-emud --topology emu:mesh8 --socket-dir DIR. and FI_NPO_BACKEND=emu-remote:DIR" \
  FI_NPO_BACKEND=emu:mesh8 OMPI_COMM_WORLD_SIZE=2
# stale lock file: a daemon that was killed
mkdir -p "${dir}/dead"
echo 999999999 >"${dir}/dead/npo-emud.lock"
expect_no_cards "dead daemon" "^npo: no cards: .*npo-emud at ${dir}/dead is gone \(pid 999999999" \
  FI_NPO_BACKEND="emu-remote:${dir}/dead"

"${emud}" --topology emu:mesh8 --socket-dir "${dir}/sock" >"${dir}/emud.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 300); do [[ -S "${dir}/sock/card-7.sock" ]] && break; sleep 0.05; done
[[ -S "${dir}/sock/card-7.sock" ]] || { echo "npo-emud did not come up"; cat "${dir}/emud.log"; exit 1; }
export FI_NPO_BACKEND="emu-remote:${dir}/sock"
expect_no_cards "?card=" "^npo: no cards: FI_NPO_BACKEND=emu-remote:${dir}/sock\?card=9: the provider takes no \?card=9" \
  FI_NPO_BACKEND="emu-remote:${dir}/sock?card=9"

# fi_getinfo claims a free card for the process (one owner connect; the daemon logs each):
# card 0 first outside a job, the local rank's card inside one (listed alone)
first_domain="$(fi_info -p npo | sed -n 's/^ *domain: //p' | head -1)"
[[ "${first_domain}" == npo0 ]] || fail "fi_info outside a job listed ${first_domain} first, not npo0"
rank3="$(OMPI_COMM_WORLD_LOCAL_RANK=3 fi_info -p npo | sed -n 's/^ *domain: //p' | sort -u | tr '\n' ' ')"
[[ "${rank3}" == "npo3 " ]] || fail "local rank 3 listed '${rank3}', not npo3 alone"
connects="$(grep -c '^npo-emud: connect card=[0-9]* pid=[0-9]* mode=owner' "${dir}/emud.log" || true)"
echo "daemon owner connects after 2 fi_info runs: ${connects}"
[[ "${connects}" -eq 2 ]] || fail "2 fi_info runs took ${connects} cards, not one each"
grep -q 'connect card=0 pid=[0-9]* mode=owner' "${dir}/emud.log" || fail "fi_info did not claim card 0"
grep -q 'connect card=3 pid=[0-9]* mode=owner' "${dir}/emud.log" || fail "local rank 3 did not claim card 3"

# FI_NPO_CARD
out="$(FI_NPO_CARD=abc fi_info -p npo -t FI_EP_DGRAM 2>&1)"
echo "${out}" | grep '^npo: ' || true
grep -q "^npo: FI_NPO_CARD='abc' is not valid (accepted: an integer 0..65535); using a free card (the local rank's first inside a parallel job)" <<<"${out}" ||
  fail "FI_NPO_CARD=abc not reported"
[[ "$(grep -c 'domain: npo' <<<"${out}")" -eq 8 ]] || fail "FI_NPO_CARD=abc: not every card listed"
set +e
out="$(FI_NPO_CARD=99 fi_info -p npo 2>&1)"
set -e
echo "${out}" | grep '^npo: ' || true
grep -q "^npo: FI_NPO_CARD=99 but emu-remote:${dir}/sock has 8 cards (npo0..npo7): fi_getinfo lists none" <<<"${out}" ||
  fail "FI_NPO_CARD=99 not reported"
# FI_NPO_LAYERING: yes is a yes; maybe is reported (and off)
FI_NPO_LAYERING=yes fi_info -p 'npo;ofi_rxd' -t FI_EP_RDM 2>&1 | grep -q 'provider: npo;ofi_rxd' ||
  fail "FI_NPO_LAYERING=yes did not layer"
set +e
out="$(FI_NPO_LAYERING=maybe fi_info -p 'npo;ofi_rxd' -t FI_EP_RDM 2>&1)"
set -e
grep -q "^npo: FI_NPO_LAYERING='maybe' is not valid (accepted: 1, on, yes, true or 0, off, no, false); using the default off" \
  <<<"${out}" || fail "FI_NPO_LAYERING=maybe not reported"
grep -q 'provider: npo;ofi_rxd' <<<"${out}" && fail "FI_NPO_LAYERING=maybe layered"

# Bad runtime values: reported once each, the defaults used, the ping-pong still passes.
port=$((20000 + ($$ % 20000)))
bad=(FI_NPO_FAULT=bogus FI_NPO_FAULT_MS=abc FI_NPO_RING_LANES=5000 FI_NPO_POLL_BACKOFF=maybe FI_NPO_STALL_MS=abc
  FI_NPO_TRACE_MAX=-5 FI_NPO_TRACE=/nonexistent/dir/t.json)
env "${bad[@]}" timeout 60 fi_pingpong -p npo -e rdm -S 4096 -I 10 -d npo0 -B "${port}" >"${dir}/srv.log" 2>&1 &
srv=$!
pids+=("${srv}")
wait_listen "${port}" "${srv}" || { echo "FAIL: the fi_pingpong server did not listen on port ${port} within 30 s"; cat "${dir}"/s*.log; exit 1; }
set +e
env "${bad[@]}" timeout 60 fi_pingpong -p npo -e rdm -S 4096 -I 10 -d npo1 -P "${port}" 127.0.0.1 >"${dir}/cli.log" 2>&1
cli_rc=$?
wait "${srv}"
srv_rc=$?
set -e
echo "--- client (rc ${cli_rc})"; cat "${dir}/cli.log"
[[ ${cli_rc} -eq 0 && ${srv_rc} -eq 0 ]] || fail "ping-pong with bad values failed (rc ${cli_rc} / ${srv_rc})"
for want in "FI_NPO_FAULT='bogus' is not valid (accepted: abort, report); using the default report" \
  "FI_NPO_FAULT_MS='abc' is not valid (accepted: an integer 1..86400000); using the default 5000" \
  "FI_NPO_RING_LANES='5000' is not valid (accepted: an integer 1..4096); using the default" \
  "FI_NPO_POLL_BACKOFF='maybe' is not valid (accepted: yield, sleep, 0, off, 1, on); using the default yield" \
  "FI_NPO_STALL_MS='abc' is not valid (accepted: an integer 0..86400000); using the default 0 (off)" \
  "FI_NPO_TRACE_MAX='-5' is not valid (accepted: an integer 0..1099511627776); using the default 1000000" \
  "FI_NPO_TRACE: cannot write the trace file /nonexistent/dir/t."; do
  n="$(grep -cF "npo: ${want}" "${dir}/cli.log" || true)"
  [[ "${n}" -eq 1 ]] || fail "expected once, saw ${n} times: npo: ${want}"
done
# Doorbells (docs/libfabric.md "Backend"): the ping-pong above asked for the shadow page its
# owner's engines need (npo-emud logs it per connection); ?doorbell=socket passes through to every
# card the provider opens and asks for none (the daemon runs the engines); any other query is
# refused.
shadow_lines() { grep -c ': shadow doorbells for 32 queues' "${dir}/emud.log" || true; }
shadow_before="$(shadow_lines)"
[[ "${shadow_before}" -ge 2 ]] || fail "the default ping-pong asked for ${shadow_before} shadow pages, not 2"
FI_NPO_BACKEND="${FI_NPO_BACKEND}?doorbell=socket" timeout 60 fi_pingpong -p npo -e rdm -S 4096 -I 10 -d npo0 \
  -B "$((port + 4))" >"${dir}/srv-socket.log" 2>&1 &
srv=$!
pids+=("${srv}")
wait_listen "$((port + 4))" "${srv}" || fail "the doorbell=socket server did not listen within 30 s"
set +e
FI_NPO_BACKEND="${FI_NPO_BACKEND}?doorbell=socket" timeout 60 fi_pingpong -p npo -e rdm -S 4096 -I 10 -d npo1 \
  -P "$((port + 4))" 127.0.0.1 >"${dir}/cli-socket.log" 2>&1
cli_rc=$?
wait "${srv}"
srv_rc=$?
set -e
[[ ${cli_rc} -eq 0 && ${srv_rc} -eq 0 ]] || fail "doorbell=socket ping-pong failed (rc ${cli_rc} / ${srv_rc})"
[[ "$(shadow_lines)" -eq "${shadow_before}" ]] || fail "doorbell=socket asked for a shadow page"
expect_no_cards "?doorbell=bogus" "^npo: no cards: .*: \?doorbell=bogus is neither \?doorbell=shadow nor \?doorbell=socket" \
  FI_NPO_BACKEND="${FI_NPO_BACKEND}?doorbell=bogus"
expect_no_cards "?engine=bogus" "^npo: no cards: .*: \?engine=bogus is neither \?engine=local nor \?engine=daemon" \
  FI_NPO_BACKEND="${FI_NPO_BACKEND}?doorbell=shadow&engine=bogus"
expect_no_cards "?engine=local&doorbell=socket" "^npo: no cards: .*: \?engine=local needs \?doorbell=shadow" \
  FI_NPO_BACKEND="${FI_NPO_BACKEND}?engine=local&doorbell=socket"
# both options pass through together: every card listed
n_both="$(FI_NPO_BACKEND="${FI_NPO_BACKEND}?engine=daemon&doorbell=shadow" fi_info -p npo -t FI_EP_RDM 2>/dev/null | grep -c 'domain: npo' || true)"
[[ "${n_both}" -ge 8 ]] || fail "?engine=daemon&doorbell=shadow: ${n_both} domains listed, expected 8"

# upper case is the word: FI_NPO_FAULT=ABORT is abort (nothing reported)
if FI_NPO_FAULT=ABORT FI_NPO_FAULT_MS=0 fi_info -p npo 2>&1 | grep -q "FI_NPO_FAULT="; then
  fail "FI_NPO_FAULT=ABORT reported at getinfo"
fi

# fi_domain on a held card: one line with the holder, the card count; 9 ranks on 8 cards. The
# holder is a running ping-pong pair on cards 0 and 1 (fi_pingpong opens its domain only once
# its peer connected); each second job is a pair whose server asks for card 0.
card0_connects() { grep -c "^npo-emud: connect card=0 pid=[0-9]* mode=owner" "${dir}/emud.log" || true; }
card0_before="$(card0_connects)"
timeout 60 fi_pingpong -p npo -e rdm -S 64 -I 100000000 -d npo0 -B "$((port + 1))" >"${dir}/holder.log" 2>&1 &
pids+=($!)
wait_listen "$((port + 1))" "$!" || fail "the holder's fi_pingpong server did not listen within 30 s"
timeout 60 fi_pingpong -p npo -e rdm -S 64 -I 100000000 -d npo1 -P "$((port + 1))" 127.0.0.1 >"${dir}/holder1.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 600); do [[ "$(card0_connects)" -gt "${card0_before}" ]] && break; sleep 0.05; done
# (its pid: fi_pingpong's, a child of timeout)
holder="$(sed -n 's/.*npo-emud: connect card=0 pid=\([0-9]*\) mode=owner.*/\1/p' "${dir}/emud.log" | tail -1)"
[[ -n "${holder}" ]] || fail "the holder did not open card 0"
# second_job PORT [env...]: a ping-pong pair whose server asks for card 0; prints the server's output
second_job() {
  local p="$1"
  shift
  env "$@" timeout 30 fi_pingpong -p npo -e rdm -S 64 -I 10 -d npo0 -B "${p}" >"${dir}/second.log" 2>&1 &
  local s=$!
  wait_listen "${p}" "${s}" || true  # a server refused its card may end at once: its output says why
  env "$@" timeout 30 fi_pingpong -p npo -e rdm -S 64 -I 10 -d npo2 -P "${p}" 127.0.0.1 >/dev/null 2>&1 || true
  wait "${s}" || true
  cat "${dir}/second.log"
}
out="$(second_job "$((port + 2))")"
out9="$(second_job "$((port + 3))" OMPI_COMM_WORLD_LOCAL_SIZE=9)"
echo "--- second job on card 0: ${out}"
echo "--- 9 local ranks: ${out9}"
[[ "$(grep -c '^npo: fi_domain' <<<"${out}")" -eq 1 ]] || fail "held card: not one fi_domain line"
grep -q "^npo: fi_domain npo0: cannot open card 0 of npo-emud at ${dir}/sock: card 0 is open by pid ${holder} .*; the daemon has 8 cards" \
  <<<"${out}" || fail "held card: the line does not name the holder and the card count"
grep -q "^npo: fi_domain npo0: .*is open by pid ${holder} .*this job runs 9 ranks on this node but there are only 8 cards" \
  <<<"${out9}" || fail "9 ranks: the line does not say there are more ranks than cards"

if ((fails)); then echo "${fails} failure(s)"; exit 1; fi
echo PASS
