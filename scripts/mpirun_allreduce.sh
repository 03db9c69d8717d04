#!/usr/bin/env bash
# AllReduce under mpirun: the suite reads OMPI_COMM_WORLD_* (Open MPI) or
# PMI_RANK/PMI_SIZE/MPI_LOCALRANKID/MPI_LOCALNRANKS (MPICH, Intel MPI) and meets the other ranks
# at MASTER_ADDR:MASTER_PORT (the first host). With GPUs (one rank per GPU), two runs, then one
# plot of both: NCCL as it chooses (tagged nvlink), and NCCL kept off NVLink and shared memory
# inside each node (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NVLS_ENABLE=0, tagged ib). On CPUs
# (RANKS_PER_NODE without GPUS_PER_NODE), one gloo run tagged cpu, and its plot.
#
#   HOSTS=node01,node02 GPUS_PER_NODE=8 scripts/mpirun_allreduce.sh [run options]
#   MPI=mpich HOSTS=node01,node02 GPUS_PER_NODE=8 scripts/mpirun_allreduce.sh
#   HOSTS=node01,node02 RANKS_PER_NODE=4 scripts/mpirun_allreduce.sh --quick      # CPUs
#
# Environment: HOSTS (comma-separated, the first one hosts rank 0), GPUS_PER_NODE or
#   RANKS_PER_NODE, MPI (openmpi or mpich), MPIRUN (Open MPI's launcher: mpirun.openmpi where
#   MPICH sits beside it, else mpirun), MPIEXEC (mpiexec.mpich, else mpiexec), MASTER_PORT
#   (29500), PYTHON (python), OUT_ROOT (results/mpirun-<date>), DRY_RUN=1 prints the commands
#   instead of running them.
set -euo pipefail

: "${HOSTS:?set HOSTS=node01,node02,... (the first one runs rank 0)}"
RANKS_PER_NODE=${RANKS_PER_NODE:-${GPUS_PER_NODE:-}}
: "${RANKS_PER_NODE:?set GPUS_PER_NODE (one rank per GPU) or RANKS_PER_NODE (CPU ranks)}"
if [[ -n ${GPUS_PER_NODE:-} ]]; then RUNS=(nvlink ib); else RUNS=(cpu); fi
# Debian installs both MPIs side by side; the plain names point at whichever was chosen.
MPIRUN=${MPIRUN:-$(command -v mpirun.openmpi || echo mpirun)}
MPIEXEC=${MPIEXEC:-$(command -v mpiexec.mpich || echo mpiexec)}
PYTHON=${PYTHON:-python}
MPI=${MPI:-openmpi}
IFS=, read -r -a hosts <<< "$HOSTS"
NP=$(( ${#hosts[@]} * RANKS_PER_NODE ))
HOST_SLOTS=""  # node01:8,node02:8 for Open MPI
for host in "${hosts[@]}"; do HOST_SLOTS+="${HOST_SLOTS:+,}$host:$RANKS_PER_NODE"; done
export MASTER_ADDR=${MASTER_ADDR:-${hosts[0]}} MASTER_PORT=${MASTER_PORT:-29500}
OUT_ROOT=${OUT_ROOT:-results/mpirun-$(date -u +%Y%m%dT%H%M%SZ)}

run() { if [[ ${DRY_RUN:-0} == 1 ]]; then echo "$*"; else "$@"; fi; }
launch() {  # launch "NAME=VALUE ..." [run options]
  local extra=$1; shift
  case $MPI in
    openmpi)
      local pass=(-x MASTER_ADDR -x MASTER_PORT -x PATH -x LD_LIBRARY_PATH)
      for kv in $extra; do pass+=(-x "$kv"); done
      run "$MPIRUN" -np "$NP" --host "$HOST_SLOTS" --map-by "ppr:$RANKS_PER_NODE:node" --bind-to none "${pass[@]}" \
        "$PYTHON" -m allreduce_bench run "$@" ;;
    mpich)
      local pass=(-genv MASTER_ADDR "$MASTER_ADDR" -genv MASTER_PORT "$MASTER_PORT")
      for kv in $extra; do pass+=(-genv "${kv%%=*}" "${kv#*=}"); done
      run "$MPIEXEC" -n "$NP" -ppn "$RANKS_PER_NODE" -hosts "$HOSTS" "${pass[@]}" \
        "$PYTHON" -m allreduce_bench run "$@" ;;
    *) echo "MPI must be openmpi or mpich, not '$MPI'" >&2; exit 2 ;;
  esac
}

IB_ONLY="NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NVLS_ENABLE=0"
for tag in "${RUNS[@]}"; do
  launch "$([[ $tag == ib ]] && echo "$IB_ONLY")" --tag "$tag" --out "$OUT_ROOT/$tag" "$@"
done
run "$PYTHON" -m allreduce_bench plot "${RUNS[@]/#/$OUT_ROOT/}" --out-dir "$OUT_ROOT/plots"
