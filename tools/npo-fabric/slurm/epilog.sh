#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Slurm Epilog (slurm.conf Epilog=/usr/share/npo-hal/slurm/epilog.sh): destroys the optical
# partition "job$SLURM_JOB_ID" that prolog.sh created; its cards go back to the free pool with
# partition ID 0. A partition that does not exist (the prolog failed) is not an error. A nonzero
# exit makes Slurm drain the node. Same environment as prolog.sh.
set -u
tag=npo-fabric-epilog
log() {
  echo "$tag: $*" >&2
  command -v logger >/dev/null 2>&1 && logger -t "$tag" -- "$*"
  return 0
}
if [ -z "${SLURM_JOB_ID:-}" ]; then
  log "SLURM_JOB_ID is not set"
  exit 1
fi
fabric=${NPO_FABRIC:-npo-fabric}
sock=${NPO_FABRIC_SOCKET:-${NPO_EMUD_DIR:-/run/npo-emud}/npo-fabric.sock}
if out=$("$fabric" destroy "job$SLURM_JOB_ID" --socket "$sock" 2>&1); then
  log "job $SLURM_JOB_ID: partition job$SLURM_JOB_ID destroyed: $(echo "$out" | tail -n 2 | tr '\n' ' ')"
  exit 0
fi
case "$out" in
  *not_found*) log "job $SLURM_JOB_ID: no partition job$SLURM_JOB_ID (nothing to destroy)"; exit 0 ;;
esac
log "job $SLURM_JOB_ID: destroying partition job$SLURM_JOB_ID failed: $out"
exit 1
