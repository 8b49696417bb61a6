#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Slurm Prolog (slurm.conf Prolog=/usr/share/npo-hal/slurm/prolog.sh): creates the optical
# partition "job$SLURM_JOB_ID" for the job through the npo-fabric daemon (docs/partitions.md
# "Operating npo-fabric"). The shape, first found:
#   NPO_FABRIC_SHAPE   e.g. torus2d:4x4, ring:8, mesh:4 (placed on the lowest free healthy cards)
#   NPO_FABRIC_CARDS   a card count N: ring:N
#   the job comment    "npo-shape=SHAPE" (sbatch --comment), read with scontrol
# Where the daemon is: NPO_FABRIC_SOCKET, else NPO_EMUD_DIR/npo-fabric.sock (default
# /run/npo-emud). A nonzero exit makes Slurm drain the node and requeue the job (slurm.conf(5)
# Prolog): a failed partition is never run on.
set -u
tag=npo-fabric-prolog
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
shape=${NPO_FABRIC_SHAPE:-}
if [ -z "$shape" ] && [ -n "${NPO_FABRIC_CARDS:-}" ]; then shape="ring:$NPO_FABRIC_CARDS"; fi
if [ -z "$shape" ] && command -v scontrol >/dev/null 2>&1; then
  shape=$(scontrol show job "$SLURM_JOB_ID" 2>/dev/null | sed -n 's/.*Comment=[^ ]*npo-shape=\([^ ,]*\).*/\1/p' | head -n 1)
fi
if [ -z "$shape" ]; then
  log "job $SLURM_JOB_ID: no shape (set NPO_FABRIC_SHAPE, NPO_FABRIC_CARDS or the comment npo-shape=SHAPE)"
  exit 1
fi
if out=$("$fabric" create "job$SLURM_JOB_ID" --shape "$shape" --socket "$sock" 2>&1); then
  log "job $SLURM_JOB_ID: partition job$SLURM_JOB_ID $shape created: $(echo "$out" | tail -n 2 | tr '\n' ' ')"
  exit 0
fi
log "job $SLURM_JOB_ID: creating partition job$SLURM_JOB_ID $shape failed: $out"
exit 1
