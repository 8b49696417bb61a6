#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# libnpo-fi.so must export exactly one symbol, fi_prov_ini (libfabric's external-provider
# entry point): nothing of npo-hal, spdlog, fmt, yaml-cpp or the C++ runtime.
set -euo pipefail
lib="$1"
syms="$(nm -D --defined-only "${lib}" | awk '{print $3}' | sort -u)"
echo "exported: ${syms}"
if [[ "${syms}" != "fi_prov_ini" ]]; then
  echo "FAIL: ${lib} exports more than fi_prov_ini"; exit 1
fi
echo PASS
