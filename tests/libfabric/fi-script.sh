# SPDX-License-Identifier: Apache-2.0
# Sourced by the fi_pingpong scripts (run-pingpong.sh, run-fault.sh, run-diagnostics.sh).
#
# fi_workdir NAME: a fresh directory /tmp/NAME.XXXXXX in $dir and an empty $pids; when the
# script exits, every pid in $pids is killed and reaped and the directory removed.
fi_workdir() {
  dir="$(mktemp -d "/tmp/$1.XXXXXX")"
  pids=()
  trap fi_cleanup EXIT
}
fi_cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "${dir}"
}

# wait_listen PORT PID [SECONDS] waits until a TCP socket
# listens on PORT (fi_pingpong's out-of-band connection; read from /proc/net/tcp and tcp6) or
# process PID has ended, at most SECONDS (default 30). A fixed sleep before starting the client
# lost the race on a loaded runner ("failed to connect: Connection refused").
wait_listen() {
  local port_hex deadline
  port_hex=$(printf '%04X' "$1")
  deadline=$((SECONDS + ${3:-30}))
  while ((SECONDS < deadline)); do
    # local_address is HEXIP:HEXPORT, st 0A is LISTEN
    if awk -v p=":${port_hex}" '$2 ~ p"$" && $4 == "0A" { found = 1 } END { exit !found }' \
        /proc/net/tcp /proc/net/tcp6 2>/dev/null; then
      return 0
    fi
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.02
  done
  return 1
}
