#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Any launcher, a free card each (issue 34 point 1; docs/libfabric.md "Picking a card"):
# unmodified fi_pingpong pairs started by a plain shell, without -d, on one npo-emud mesh8.
#  - 4 long-running pairs at once: every process gets a card of its own (8 owner connects on 8
#    distinct cards in the daemon's log); 4 more pairs started together each pass their
#    checked ping-pong (-c, every size up to 6 MiB) on a card of their own;
#  - with all 8 cards held, fi_info answers -FI_ENODATA (61) with one line naming each card's
#    holder; a named card (FI_NPO_CARD, -d) is still only that card;
#  - inside a Slurm step (SLURM_LOCALID=5) the process takes card 5 first, and the next free
#    card when another process holds card 5.
# Usage: run-free-card.sh NPO_EMUD PROVIDER_DIR
set -euo pipefail
# shellcheck source=fi-script.sh
source "$(dirname "${BASH_SOURCE[0]}")/fi-script.sh"
emud="$1" provdir="$2"
if ! command -v fi_info >/dev/null || ! command -v fi_pingpong >/dev/null; then
  echo "SKIP: fi_info / fi_pingpong not installed (package libfabric-bin)"; exit 0
fi
fi_workdir npo-fi-free
export FI_PROVIDER_PATH="${provdir}"
unset FI_NPO_CARD NPO_BACKEND OMPI_COMM_WORLD_LOCAL_RANK MPI_LOCALRANKID PMI_LOCAL_RANK SLURM_LOCALID
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
"${emud}" --topology emu:mesh8 --socket-dir "${dir}/sock" >"${dir}/emud.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 300); do [[ -S "${dir}/sock/card-7.sock" ]] && break; sleep 0.05; done
[[ -S "${dir}/sock/card-7.sock" ]] || { echo "npo-emud did not come up"; cat "${dir}/emud.log"; exit 1; }
export FI_NPO_BACKEND="emu-remote:${dir}/sock"
owners() { grep -c '^npo-emud: connect card=[0-9]* pid=[0-9]* mode=owner' "${dir}/emud.log" || true; }
port=$((20000 + ($$ % 20000)))

# SLURM_LOCALID=5: card 5 first
d5="$(SLURM_LOCALID=5 fi_info -p npo | sed -n 's/^ *domain: //p' | sort -u | tr '\n' ' ')"
[[ "${d5}" == "npo5 " ]] || fail "SLURM_LOCALID=5 listed '${d5}', not npo5 alone"

# pair K: a server and a client on port+K, neither names a card
start_pair() {
  local k="$1" iters="$2" size="$3"
  timeout 120 fi_pingpong -p npo -e rdm -S "${size}" -I "${iters}" -c -B "$((port + k))" >"${dir}/srv${k}.log" 2>&1 &
  local s=$!
  pids+=("${s}")
  wait_listen "$((port + k))" "${s}" || fail "pair ${k}: the server did not listen within 30 s"
  timeout 120 fi_pingpong -p npo -e rdm -S "${size}" -I "${iters}" -c -P "$((port + k))" 127.0.0.1 \
    >"${dir}/cli${k}.log" 2>&1 &
  pids+=($!)
  pair_pids+=("${s}" "$!")
}

# 4 holder pairs (long runs) take the 8 cards
pair_pids=()
for k in 0 1 2 3; do start_pair "${k}" 100000000 64; done
for _ in $(seq 1 600); do [[ "$(owners)" -ge 9 ]] && break; sleep 0.05; done  # 1 (fi_info above) + 8
cards="$(sed -n 's/^npo-emud: connect card=\([0-9]*\) pid=[0-9]* mode=owner.*/\1/p' "${dir}/emud.log" | tail -n +2 | sort -n | tr '\n' ' ')"
echo "cards of the 4 holder pairs: ${cards}"
[[ "${cards}" == "0 1 2 3 4 5 6 7 " ]] || fail "8 processes took cards '${cards}', not 0..7 once each"

# every card held: no data, one line naming the holders
set +e
out="$(fi_info -p npo 2>&1)"
rc=$?
set -e
echo "all held: rc=${rc}: ${out}"
[[ ${rc} -eq 61 ]] || fail "all cards held: fi_info rc ${rc}, not 61"
[[ "$(grep -c '^npo: ' <<<"${out}")" -eq 1 ]] || fail "all cards held: not one line of the provider"
grep -qE "^npo: no free card: all 8 cards of npo-emud at ${dir}/sock are held by other processes \(npo0 by pid [0-9]+, npo1 by pid [0-9]+, .*npo7 by pid [0-9]+\)" \
  <<<"${out}" || fail "all cards held: the line does not name every holder"
d5="$(SLURM_LOCALID=5 fi_info -p npo 2>&1 | head -1 || true)"
grep -q "^npo: no free card" <<<"${d5}" || fail "SLURM_LOCALID=5 with every card held: '${d5}'"
# a named card is listed without a claim (fi_domain would then say who holds it)
named="$(FI_NPO_CARD=2 fi_info -p npo | sed -n 's/^ *domain: //p' | sort -u | tr '\n' ' ')"
[[ "${named}" == "npo2 " ]] || fail "FI_NPO_CARD=2 listed '${named}'"
for p in "${pair_pids[@]}"; do kill "${p}" 2>/dev/null || true; done
for p in "${pair_pids[@]}"; do wait "${p}" 2>/dev/null || true; done

# card 5 held by a plain process: a Slurm rank 5 takes the next free one (6)
before="$(owners)"
timeout 60 fi_pingpong -p npo -e rdm -S 64 -I 100000000 -d npo5 -B "$((port + 8))" >"${dir}/h5.log" 2>&1 &
h5=$!
pids+=("${h5}")
wait_listen "$((port + 8))" "${h5}" || fail "the card-5 holder did not listen"
timeout 60 fi_pingpong -p npo -e rdm -S 64 -I 100000000 -d npo4 -P "$((port + 8))" 127.0.0.1 >"${dir}/h4.log" 2>&1 &
h4=$!
pids+=("${h4}")
for _ in $(seq 1 600); do [[ "$(owners)" -ge $((before + 2)) ]] && break; sleep 0.05; done
d6="$(SLURM_LOCALID=5 fi_info -p npo | sed -n 's/^ *domain: //p' | sort -u | tr '\n' ' ')"
[[ "${d6}" == "npo6 " ]] || fail "SLURM_LOCALID=5 with card 5 held listed '${d6}', not npo6"
kill "${h5}" "${h4}" 2>/dev/null || true
wait "${h5}" "${h4}" 2>/dev/null || true

# 4 pairs at once to completion: each payload checked, every process on its own card
before="$(owners)"
pair_pids=()
for k in 4 5 6 7; do start_pair "${k}" 10 all; done
rcs=()
for p in "${pair_pids[@]}"; do
  set +e
  wait "${p}"
  rcs+=($?)
  set -e
done
echo "4 concurrent pairs exit codes: ${rcs[*]}"
[[ "${rcs[*]}" == "0 0 0 0 0 0 0 0" ]] || { fail "concurrent pairs: exit codes ${rcs[*]}"; cat "${dir}"/srv[4-7].log "${dir}"/cli[4-7].log; }
# (a pair that ended gave its cards back: a later one may take them again)
took="$(($(owners) - before))"
echo "owner connects of the 4 concurrent pairs: ${took}"
[[ "${took}" -eq 8 ]] || fail "the 8 processes of the concurrent pairs made ${took} owner connects, not 8"
grep -h "^npo: " "${dir}"/srv[4-7].log "${dir}"/cli[4-7].log && fail "a pair printed a provider line"

if ((fails)); then echo "${fails} failure(s)"; exit 1; fi
echo PASS
