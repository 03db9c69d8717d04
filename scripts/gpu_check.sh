#!/usr/bin/env bash
# Self-check of allreduce-bench on a machine with one or more GPUs, in under 7 minutes:
#   1. environment facts: GPUs, driver, CUDA, NCCL, torch, `nvidia-smi topo -m` (environment.txt);
#   2. `run` with NCCL: every algorithm (--algos all: the hand-written ones and NCCL's pinned
#      variants; a variant NCCL has no kernel for here, e.g. NVLS without NVSwitch, is skipped
#      in one line) at the largest world size the GPUs allow (world size 1 on one GPU: init,
#      device binding, CUDA-event timing, device-side alignment, the check);
#   3. with >= 2 GPUs, `run` on sub-worlds: world sizes 1, 2, 4, ... up to the GPU count, each
#      made of the first ranks while the others wait, with NCCL's variants pinned (native:ring,
#      native:tree:LL, native:nvls) beside ring: the groups every rank must create together
#      (into sub-worlds/);
#   4. on one GPU, `run` at world sizes 2 and 4 with the ranks sharing that GPU (gloo with CUDA
#      tensors: NCCL refuses two ranks on one device), so CUDA-event timing, device-side
#      alignment and the check run with more than one rank (into shared-gpu/);
#   5. `ddp` at the largest world size of step 2;
# into results/example-<gpu model>-<n>gpu/ (results.csv, meta.json, plots/ with report.md;
# sub-worlds/, shared-gpu/ and ddp/ likewise; environment.txt, summary.txt), ready to commit,
# and a short summary.
#
#   scripts/gpu_check.sh [--out DIR] [--force] [--no-install] [--budget SECONDS]
#   scripts/gpu_check.sh --name "NVIDIA H100 80GB HBM3" 8   # prints the output directory only
#
# Installs nothing from the network: only `pip install -e .` of this checkout, without
# dependencies (torch with CUDA must already be there); --no-install skips that and runs this
# checkout through PYTHONPATH instead. --budget: seconds for steps 2-5 (default 360, so the
# whole check with its start-up fits a 600-s call with a margin). Writes only under results/.
# Exit codes: 0 all good; 1 a step failed or a result was wrong; 2 no GPU here, or bad usage.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
BUDGET_S=${BUDGET_S:-360}  # 6 minutes for the steps; the rest is start-up and the summary

usage() { echo "gpu_check.sh: error: $1; usage: scripts/gpu_check.sh [--out DIR] [--force] [--no-install] [--budget SECONDS] | --name MODEL COUNT" >&2; exit 2; }

# results/example-<model>-<n>gpu: the model in lower case, without the vendor, one dash between
# words: "NVIDIA H100 80GB HBM3", 8 -> results/example-h100-80gb-hbm3-8gpu
out_dir_for() {
  local model
  model=$(tr '[:upper:]' '[:lower:]' <<< "$1" | sed -e 's/nvidia//g' -e 's/geforce//g' \
          -e 's/[^a-z0-9]\{1,\}/-/g' -e 's/^-//' -e 's/-$//')
  echo "results/example-${model:-gpu}-${2}gpu"
}

OUT="" FORCE=0 INSTALL=1
while (( $# )); do
  case $1 in
    --name)
      (( $# == 3 )) || usage "--name needs a GPU model and a GPU count"
      [[ $3 =~ ^[1-9][0-9]*$ ]] || usage "the GPU count must be a positive integer, not '$3'"
      out_dir_for "$2" "$3"; exit 0 ;;
    --out) (( $# >= 2 )) || usage "--out needs a directory"; OUT=$2; shift 2 ;;
    --force) FORCE=1; shift ;;
    --no-install) INSTALL=0; shift ;;
    --budget)
      (( $# >= 2 )) && [[ $2 =~ ^[1-9][0-9]*$ ]] || usage "--budget needs a whole number of seconds"
      BUDGET_S=$2; shift 2 ;;
    *) usage "unknown argument '$1'" ;;
  esac
done
if [[ -n $OUT && ( $OUT != results/* || $OUT == *..* ) ]]; then
  usage "--out must be under results/ (this script writes only there), not '$OUT'"
fi

(( INSTALL )) || export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # this checkout, as is

# ---- a GPU, or one line and exit 2 --------------------------------------------------------
# Options that may be empty are plain words, expanded unquoted: an empty array's "${A[@]}"
# is an unbound variable under set -u before bash 4.4.
BACKEND=nccl QUICK="" SWEEP="--budget 0.1"  # a short budget: step 2 measures every algorithm
PINNED=native:ring,native:tree:LL,native:nvls,ring  # step 3's algorithms
SHARED_DEVICE=cuda  # where step 4's ranks put their tensors
if [[ -n ${GPU_CHECK_CPU_RANKS:-} ]]; then
  # development only: walk through every step with gloo on N CPU ranks and tiny sweeps
  GPUS=$GPU_CHECK_CPU_RANKS BACKEND=gloo QUICK=--quick SWEEP=--quick MODEL="cpu test"
  SHARED_DEVICE=cpu PINNED=native,ring  # gloo has no NCCL variants
else
  GPUS=$("$PYTHON" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)' 2>/dev/null)
fi
if [[ ! $GPUS =~ ^[0-9]+$ || $GPUS == 0 ]]; then
  why="torch sees no CUDA device"
  [[ $GPUS =~ ^[0-9]+$ ]] || why="torch cannot be imported"
  command -v nvidia-smi >/dev/null || why+=", and nvidia-smi is not installed"
  echo "gpu_check.sh: no GPU on this machine ($why); run it on a machine with one or more GPUs" >&2
  exit 2
fi

START=$(date +%s)
left() { echo $(( BUDGET_S - ($(date +%s) - START) )); }
if (( INSTALL )); then
  # this checkout, editable; nothing else: no dependencies, no build isolation (no downloads)
  if ! "$PYTHON" -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1; then
    echo "gpu_check.sh: pip install -e . failed; rerun with --no-install and PYTHONPATH=$PWD" >&2
    exit 1
  fi
fi
MISSING=$("$PYTHON" - <<'EOF'
import importlib.util
print(" ".join(m for m in ("torch", "pandas", "matplotlib", "click", "tqdm")
               if importlib.util.find_spec(m) is None))
EOF
)
[[ -z $MISSING ]] || { echo "gpu_check.sh: missing Python packages: $MISSING" >&2; exit 1; }

MODEL=${MODEL:-$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)}
[[ -n $MODEL ]] || MODEL=$("$PYTHON" -c 'import torch; print(torch.cuda.get_device_name(0))')
OUT=${OUT:-$(out_dir_for "$MODEL" "$GPUS")}
if [[ -e $OUT ]]; then
  (( FORCE )) || usage "$OUT exists; remove it or give --force to replace it"
  rm -rf -- "$OUT"
fi
# `run` starts its own directory: the log and the facts wait beside it until the end
SIDE=$(dirname "$OUT")/.gpu_check-$$
mkdir -p "$SIDE"
trap 'mkdir -p "$OUT" && mv -f "$SIDE"/* "$OUT"/ 2>/dev/null; rmdir "$SIDE" 2>/dev/null' EXIT
LOG=$SIDE/gpu_check.log  # everything the steps print; the terminal gets the summary
echo "gpu_check.sh: $GPUS x $MODEL -> $OUT (log: $OUT/gpu_check.log)"

# ---- 1. environment -------------------------------------------------------------------------
{
  echo "## date"; date -u +%Y-%m-%dT%H:%M:%SZ
  echo "## host"; hostname
  echo "## GPUs (nvidia-smi)"
  nvidia-smi --query-gpu=index,name,memory.total,driver_version,pci.bus_id --format=csv 2>&1
  echo "## torch, CUDA, NCCL"
  "$PYTHON" - <<'EOF'
import torch
print("torch", torch.__version__, "| CUDA", torch.version.cuda, "| cuDNN",
      torch.backends.cudnn.version(), "| NCCL",
      ".".join(map(str, torch.cuda.nccl.version())) if torch.distributed.is_nccl_available() else "none")
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    print(f"cuda:{i} {p.name} {p.total_memory / 2**30:.1f} GiB, compute capability {p.major}.{p.minor}, {p.multi_processor_count} SMs")
EOF
  echo "## nvidia-smi topo -m"; nvidia-smi topo -m 2>&1
  echo "## NCCL_* environment"; env | grep '^NCCL_' || echo "(none)"
} > "$SIDE/environment.txt" 2>&1
grep -A1 '^## torch' "$SIDE/environment.txt" | sed -n 2p

# ---- 2. run, 3. run on sub-worlds, 4. run sharing one GPU, 5. ddp ---------------------------
FAILED=()
step() {  # step NAME SECONDS command...: run it under a time limit, log it, note a failure
  local name=$1 limit=$2; shift 2
  (( limit > 20 )) || { FAILED+=("$name (no time left)"); return; }
  local t0=$SECONDS rc
  timeout --signal=INT --kill-after=15 "$limit" "$@" >> "$LOG" 2>&1; rc=$?
  echo "  $name: exit $rc in $(( SECONDS - t0 )) s"
  (( rc == 0 )) || FAILED+=("$name (exit $rc)")
}
step "run ($BACKEND, every algorithm, world size $GPUS)" $(( $(left) / 2 )) \
  "$PYTHON" -m allreduce_bench run --backend "$BACKEND" --world-sizes "$GPUS" --algos all $SWEEP \
  --timeout 60 --tag "gpu-check" --out "$OUT"
if (( GPUS >= 2 )); then
  SUB=1 k=2  # 1, 2, 4, ... and the GPU count: every world but the last is a sub-world
  while (( k < GPUS )); do SUB+=,$k; k=$(( k * 2 )); done
  step "run ($BACKEND, sub-worlds $SUB,$GPUS, $PINNED)" $(( $(left) / 2 )) \
    "$PYTHON" -m allreduce_bench run --backend "$BACKEND" --world-sizes "$SUB,$GPUS" \
    --algos "$PINNED" --sizes 4K,1M,64M --budget 0.1 $QUICK --timeout 60 \
    --tag "gpu-check-sub-worlds" --out "$OUT/sub-worlds"
fi
if (( GPUS == 1 )); then
  # four sizes, native AllReduce (gloo moves CUDA tensors in its own collectives only), a short
  # budget: the staging through host memory makes each call slow, and this step checks the
  # machinery with several ranks rather than measuring the GPU
  step "run (gloo, world sizes 2,4 sharing one GPU)" $(( $(left) / 2 )) \
    "$PYTHON" -m allreduce_bench run --backend gloo --device "$SHARED_DEVICE" --world-sizes 2,4 \
    --algos native --sizes 4K,64K,1M,16M --budget 0.2 $QUICK --timeout 60 \
    --tag "gpu-check-shared" --out "$OUT/shared-gpu"
fi
step "ddp (world size $GPUS)" $(( $(left) - 10 )) \
  "$PYTHON" -m allreduce_bench ddp --world-sizes "$GPUS" --backend "$BACKEND" --timeout 60 \
  ${QUICK:+--params 1M --iters 2 --warmup 1} --out "$OUT/ddp"

# ---- summary --------------------------------------------------------------------------------
"$PYTHON" - "$OUT" <<'EOF' | tee "$SIDE/summary.txt"
import sys
from pathlib import Path

import pandas as pd

out = Path(sys.argv[1])
for name, path in (("run", out / "results.csv"), ("run on sub-worlds", out / "sub-worlds" / "results.csv"),
                   ("run sharing one GPU", out / "shared-gpu" / "results.csv"),
                   ("ddp", out / "ddp" / "results.csv")):
    if name in ("run on sub-worlds", "run sharing one GPU") and not path.parent.exists():
        continue  # not a step of this machine's GPU count
    if not path.exists():
        print(f"{name}: no results")
        continue
    rows = pd.read_csv(path)
    print(f"{name}: {len(rows)} rows, world sizes {sorted(rows['world_size'].unique().tolist())}, "
          f"backend {','.join(rows['backend'].unique())}, #wrong {int(rows['wrong'].sum())}")
    if name.startswith("run"):
        peak = rows.pivot_table(index="algorithm", columns="world_size", values="busbw_GBps",
                                aggfunc="max")
        largest = rows["world_size"].max()
        if largest == 1:  # busbw is 0 at N=1: show algbw
            peak = rows.pivot_table(index="algorithm", columns="world_size", values="algbw_GBps",
                                    aggfunc="max")
            print("peak algbw (GB/s; busbw is 0 with one rank):")
        else:
            print("peak busbw (GB/s) per algorithm and world size:")
        print(peak.round(1).to_string())
EOF
ELAPSED=$(( $(date +%s) - START ))
echo "gpu_check.sh: $ELAPSED s; figures and report in $OUT/plots, $OUT/ddp/plots and $OUT/$( (( GPUS == 1 )) && echo shared-gpu || echo sub-worlds)/plots"
if grep -q '#wrong [1-9]' "$SIDE/summary.txt" || (( ${#FAILED[@]} )); then
  echo "gpu_check.sh: FAILED: ${FAILED[*]:-wrong results}; see $OUT/gpu_check.log" >&2
  exit 1
fi
echo "gpu_check.sh: all good; commit $OUT"
