#!/usr/bin/env bash
# AllReduce across nodes with torchrun and a c10d rendezvous: run this same script on every node
# (by hand, pdsh, or `srun --ntasks-per-node=1`). With GPUs, two runs, then one plot of both (on
# the first node): NCCL as it chooses (tagged nvlink), and NCCL kept off NVLink and shared memory
# inside each node (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NVLS_ENABLE=0, tagged ib). Without
# GPUs, one gloo run (tagged cpu) and its plot.
#
#   NNODES=2 RDZV_HOST=node01 RDZV_ID=b1 scripts/torchrun_multinode.sh [run options]   # GPUs
#   NNODES=2 NPROC_PER_NODE=4 RDZV_HOST=node01 RDZV_ID=b1 scripts/torchrun_multinode.sh  # CPUs
#
# Environment (inside a Slurm job the first three default from SLURM_JOB_NUM_NODES, the job's
# GPUs and the first host of SLURM_JOB_NODELIST):
#   NNODES, NPROC_PER_NODE (ranks per node; default one per GPU: SLURM_GPUS_ON_NODE, else the
#   entries of CUDA_VISIBLE_DEVICES, else `nvidia-smi -L`), RDZV_HOST (a host every node reaches),
#   RDZV_PORT (29400), RDZV_ID (same on every node; default from the Slurm job id),
#   NODE_RANK (0 on the node that plots; default SLURM_NODEID or 0), PYTHON (python),
#   OUT_ROOT (results/torchrun-<RDZV_ID>), DRY_RUN=1 prints the commands instead of running them.
set -euo pipefail

PYTHON=${PYTHON:-python}
NNODES=${NNODES:-${SLURM_JOB_NUM_NODES:-}}
gpu_count() {  # this node's GPUs, as the job or the driver sees them; 0 without any
  if [[ -n ${SLURM_GPUS_ON_NODE:-} ]]; then echo "$SLURM_GPUS_ON_NODE"; return; fi
  if [[ -n ${CUDA_VISIBLE_DEVICES+set} ]]; then  # set, even empty: what the job may use
    local visible; IFS=, read -r -a visible <<< "${CUDA_VISIBLE_DEVICES/NoDevFiles/}"
    echo "${#visible[@]}"; return
  fi
  if command -v nvidia-smi >/dev/null; then nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true; return; fi
  echo 0
}
GPUS=$(gpu_count)
if (( GPUS > 0 )); then RUNS=(nvlink ib); else RUNS=(cpu); fi
if (( GPUS > 0 )); then NPROC_PER_NODE=${NPROC_PER_NODE:-$GPUS}; fi
if [[ -z ${RDZV_HOST:-} && -n ${SLURM_JOB_NODELIST:-} ]]; then
  RDZV_HOST=$("$PYTHON" -m allreduce_bench.core.launch first-host "$SLURM_JOB_NODELIST")
fi
RDZV_ID=${RDZV_ID:-${SLURM_JOB_ID:+slurm-$SLURM_JOB_ID}}
NODE_RANK=${NODE_RANK:-${SLURM_NODEID:-0}}
missing=()
for name in NNODES NPROC_PER_NODE RDZV_HOST RDZV_ID; do
  [[ -n ${!name:-} ]] || missing+=("$name")
done
if (( ${#missing[@]} )); then
  echo "torchrun_multinode.sh: set ${missing[*]} (the same on every node), e.g." \
       "NNODES=2 NPROC_PER_NODE=8 RDZV_HOST=node01 RDZV_ID=bench1 $0" >&2
  exit 2
fi
OUT_ROOT=${OUT_ROOT:-results/torchrun-$RDZV_ID}

run() { if [[ ${DRY_RUN:-0} == 1 ]]; then echo "$*"; else "$@"; fi; }
launch() {  # launch TAG [run options]: a fresh rendezvous for each run
  local tag=$1; shift
  run "$PYTHON" -m torch.distributed.run --nnodes="$NNODES" --nproc-per-node="$NPROC_PER_NODE" \
    --rdzv-backend=c10d --rdzv-endpoint="$RDZV_HOST:${RDZV_PORT:-29400}" \
    --rdzv-id="$RDZV_ID-$tag" -m allreduce_bench run --tag "$tag" --out "$OUT_ROOT/$tag" "$@"
}

for tag in "${RUNS[@]}"; do
  [[ $tag == ib ]] && run export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NVLS_ENABLE=0
  launch "$tag" "$@"
done
if [[ $NODE_RANK == 0 ]]; then
  run "$PYTHON" -m allreduce_bench plot "${RUNS[@]/#/$OUT_ROOT/}" --out-dir "$OUT_ROOT/plots"
fi
