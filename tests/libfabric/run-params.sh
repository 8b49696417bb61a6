#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The provider's runtime parameters (issue 34 point 3; docs/libfabric.md "Environment
# variables", fi_npo(7)), with the unmodified fi_info of libfabric-bin:
#  - `fi_info -e` lists exactly the expected FI_NPO_* variables, each with a type and a help
#    line "# npo: ..." that gives its default;
#  - every one of them is in fi_npo(7) and in docs/libfabric.md, and fi_npo(7) renders
#    without a groff warning;
#  - an old name alone (NPO_FI_BACKEND=emu:mesh8) still works and says once that it is
#    deprecated; the new name wins over the old one (both ways), without the notice.
# Usage: run-params.sh PROVIDER_DIR MAN_PAGE LIBFABRIC_MD
set -euo pipefail
provdir="$1" man="$2" md="$3"
if ! command -v fi_info >/dev/null; then
  echo "SKIP: fi_info not installed (package libfabric-bin)"; exit 0
fi
export FI_PROVIDER_PATH="${provdir}"
unset FI_LOG_LEVEL NPO_BACKEND
for v in $(env | grep -oE '^(FI_NPO|NPO_FI)_[A-Z_]+' || true); do unset "${v}"; done
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
expected=(FI_NPO_BACKEND FI_NPO_CARD FI_NPO_FAULT FI_NPO_FAULT_MS FI_NPO_LAYERING FI_NPO_POLL_BACKOFF
  FI_NPO_RING_LANES FI_NPO_STALL_MS FI_NPO_STATS FI_NPO_TRACE FI_NPO_TRACE_MAX FI_NPO_ZERO_COPY)

# fi_info -e: "# NAME: TYPE", then "# npo: HELP"
vars="$(fi_info -e 2>&1 | tr -d '\000' || true)"
listed="$(grep -aoE '^# FI_NPO_[A-Z_]+:' <<<"${vars}" | sed 's/^# //; s/:$//' | sort)"
echo "fi_info -e lists: $(tr '\n' ' ' <<<"${listed}")"
want="$(printf '%s\n' "${expected[@]}" | sort)"
[[ "${listed}" == "${want}" ]] || fail "fi_info -e lists $(wc -l <<<"${listed}") FI_NPO_* variables, not the ${#expected[@]} expected: ${listed}"
for v in "${expected[@]}"; do
  help="$(grep -a -A1 "^# ${v}: " <<<"${vars}" | sed -n 2p)"
  [[ "${help}" == "# npo: "*"(default: "* ]] || fail "${v}: no help line with its default in fi_info -e: '${help}'"
  grep -q "^\.B ${v}\$" "${man}" || fail "${v} is not a parameter entry (.B ${v}) of ${man}"
  grep -q "| \`${v}\` |" "${md}" || fail "${v} is not in the table of ${md}"
done
# every parameter the man page or the docs table list is one the provider defines
for v in $(grep -oE '^\.B FI_NPO_[A-Z_]+$' "${man}" | sed 's/^\.B //'); do
  grep -qx "${v}" <<<"${listed}" || fail "${man} lists ${v}, which the provider does not define"
done
for v in $(grep -oE '^\| `(FI_NPO|NPO_FI)_[A-Z_]+` \|' "${md}" | grep -oE '(FI_NPO|NPO_FI)_[A-Z_]+'); do
  grep -qx "${v}" <<<"${listed}" || fail "${md} lists ${v}, which the provider does not define"
done
# the man page renders without warnings
warnings="$(groff -man -Tutf8 -ww -z "${man}" 2>&1)"
[[ -z "${warnings}" ]] || fail "groff warns on ${man}: ${warnings}"

# count_domains OUTPUT: the domain lines of fi_info
count_domains() { grep -ac 'domain: npo' <<<"$1" || true; }
notice="npo: NPO_FI_BACKEND is deprecated; use FI_NPO_BACKEND"
# the old name alone: works (8 cards of the in-process mesh8), the notice once
out="$(NPO_FI_BACKEND=emu:mesh8 fi_info -p npo -t FI_EP_RDM 2>&1 || true)"
[[ "$(count_domains "${out}")" -eq 8 ]] || fail "NPO_FI_BACKEND=emu:mesh8 alone: $(count_domains "${out}") domains, not 8"
[[ "$(grep -acF "${notice}" <<<"${out}" || true)" -eq 1 ]] || fail "NPO_FI_BACKEND alone: the deprecation notice not exactly once"
# a bad value under the old name: reported under the name that holds it, once
out="$(NPO_FI_LAYERING=maybe fi_info -p 'npo;ofi_rxd' 2>&1 || true)"
[[ "$(grep -acF "npo: NPO_FI_LAYERING='maybe' is not valid (accepted: 1, on, yes, true or 0, off, no, false); using the default off" <<<"${out}" || true)" -eq 1 ]] ||
  fail "NPO_FI_LAYERING=maybe not reported once"
[[ "$(grep -acF "npo: NPO_FI_LAYERING is deprecated; use FI_NPO_LAYERING" <<<"${out}" || true)" -eq 1 ]] ||
  fail "NPO_FI_LAYERING: the deprecation notice not exactly once"
# the new name wins: with a good new value and a bad old one, 8 cards and no notice ...
set +e
out="$(FI_NPO_BACKEND=emu:mesh8 NPO_FI_BACKEND="emu-remote:/nonexistent/npo-old" fi_info -p npo -t FI_EP_RDM 2>&1)"
set -e
[[ "$(count_domains "${out}")" -eq 8 ]] || fail "FI_NPO_BACKEND=emu:mesh8 over a bad NPO_FI_BACKEND: $(count_domains "${out}") domains, not 8"
grep -qF "${notice}" <<<"${out}" && fail "the deprecation notice with FI_NPO_BACKEND set"
# ... and with a bad new value and a good old one, no cards, the new value named
set +e
out="$(FI_NPO_BACKEND="emu-remote:/nonexistent/npo-new" NPO_FI_BACKEND=emu:mesh8 fi_info -p npo -t FI_EP_RDM 2>&1)"
rc=$?
set -e
echo "new bad, old good: rc=${rc}: ${out}"
[[ ${rc} -eq 61 ]] || fail "a bad FI_NPO_BACKEND over a good NPO_FI_BACKEND: rc ${rc}, not 61"
grep -qF "npo: no cards: FI_NPO_BACKEND=emu-remote:/nonexistent/npo-new: no directory" <<<"${out}" ||
  fail "the no-cards line does not name FI_NPO_BACKEND's value"
[[ ${fails} -eq 0 ]] || { echo "${fails} failure(s)"; exit 1; }
echo "PASSED: ${#expected[@]} parameters listed by fi_info -e, in fi_npo(7) and docs; aliases"
