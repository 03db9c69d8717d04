#!/usr/bin/env bash
# AllReduce under mpirun, one rank per GPU: the suite reads OMPI_COMM_WORLD_* (Open MPI) or
# PMI_RANK/PMI_SIZE/MPI_LOCALRANKID/MPI_LOCALNRANKS (MPICH, Intel MPI) and meets the other ranks
# at MASTER_ADDR:MASTER_PORT (the first host). Two runs, then one plot of both: NCCL as it
# chooses (tagged nvlink), and NCCL kept off NVLink and shared memory inside each node
# (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NVLS_ENABLE=0, tagged ib).
#
#   HOSTS=node01,node02 GPUS_PER_NODE=8 scripts/mpirun_allreduce.sh [run options]
#   MPI=mpich HOSTS=node01,node02 GPUS_PER_NODE=8 scripts/mpirun_allreduce.sh
#
# Environment: HOSTS (comma-separated, the first one hosts rank 0), GPUS_PER_NODE, MPI (openmpi
#   or mpich), MASTER_PORT (29500), PYTHON (python), OUT_ROOT (results/mpirun-<date>),
#   DRY_RUN=1 prints the commands instead of running them.
set -euo pipefail

: "${HOSTS:?set HOSTS=node01,node02,... (the first one runs rank 0)}"
: "${GPUS_PER_NODE:?set GPUS_PER_NODE (one rank per GPU)}"
PYTHON=${PYTHON:-python}
MPI=${MPI:-openmpi}
IFS=, read -r -a hosts <<< "$HOSTS"
NP=$(( ${#hosts[@]} * GPUS_PER_NODE ))
HOST_SLOTS=""  # node01:8,node02:8 for Open MPI
for host in "${hosts[@]}"; do HOST_SLOTS+="${HOST_SLOTS:+,}$host:$GPUS_PER_NODE"; done
export MASTER_ADDR=${MASTER_ADDR:-${hosts[0]}} MASTER_PORT=${MASTER_PORT:-29500}
OUT_ROOT=${OUT_ROOT:-results/mpirun-$(date -u +%Y%m%dT%H%M%SZ)}

run() { if [[ ${DRY_RUN:-0} == 1 ]]; then echo "$*"; else "$@"; fi; }
launch() {  # launch "NAME=VALUE ..." [run options]
  local extra=$1; shift
  case $MPI in
    openmpi)
      local pass=(-x MASTER_ADDR -x MASTER_PORT -x PATH -x LD_LIBRARY_PATH)
      for kv in $extra; do pass+=(-x "$kv"); done
      run mpirun -np "$NP" --host "$HOST_SLOTS" --map-by "ppr:$GPUS_PER_NODE:node" --bind-to none "${pass[@]}" \
        "$PYTHON" -m allreduce_bench run "$@" ;;
    mpich)
      local pass=(-genv MASTER_ADDR "$MASTER_ADDR" -genv MASTER_PORT "$MASTER_PORT")
      for kv in $extra; do pass+=(-genv "${kv%%=*}" "${kv#*=}"); done
      run mpiexec -n "$NP" -ppn "$GPUS_PER_NODE" -hosts "$HOSTS" "${pass[@]}" \
        "$PYTHON" -m allreduce_bench run "$@" ;;
    *) echo "MPI must be openmpi or mpich, not '$MPI'" >&2; exit 2 ;;
  esac
}

launch "" --tag nvlink --out "$OUT_ROOT/nvlink" "$@"
launch "NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NVLS_ENABLE=0" --tag ib --out "$OUT_ROOT/ib" "$@"
run "$PYTHON" -m allreduce_bench plot "$OUT_ROOT/nvlink" "$OUT_ROOT/ib" --out-dir "$OUT_ROOT/plots"
