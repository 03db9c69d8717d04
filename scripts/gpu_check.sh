#!/usr/bin/env bash
# Self-check of allreduce-bench on a machine with one or more GPUs; on one GPU about 2 minutes
# by the estimate it prints first (doc/testing.md, "The GPU check"):
#   1. environment facts: GPUs, driver, CUDA, NCCL, torch, `nvidia-smi topo -m` (environment.txt);
#   2. `run` with NCCL: every algorithm (--algos all: the hand-written ones and NCCL's pinned
#      variants; a variant NCCL has no kernel for here, e.g. NVLS without NVSwitch, is skipped
#      in one line) at the largest world size the GPUs allow, 1K to 256M (world size 1 on one
#      GPU: init, device binding, CUDA-event timing, device-side alignment, the check, on the
#      backend's own calls: the hand-written algorithms have no steps with one rank);
#   3. with >= 2 GPUs, `run` on sub-worlds: world sizes 1, 2, 4, ... up to the GPU count, each
#      made of the first ranks while the others wait, with NCCL's variants pinned (native:ring,
#      native:tree:LL, native:nvls) beside ring: the groups every rank must create together
#      (into sub-worlds/);
#   4. on one GPU, `run` at world sizes 2 and 4 with the ranks sharing that GPU (gloo with CUDA
#      tensors: NCCL refuses two ranks on one device), so CUDA-event timing, device-side
#      alignment and the check run with more than one rank (into shared-gpu/);
#   5. the spin: 1K at --loops 100 and at --loops 5000 (into spin/): the device-side spin is
#      sized by a clock rate measured once, so a spin that ends before the host has queued a
#      sample's 5000 calls shows as a longer time per call there;
#   6. `ddp` at the largest world size of step 2;
# into results/example-<gpu model>-<n>gpu/ (results.csv, meta.json, plots/ with report.md;
# sub-worlds/, shared-gpu/, spin/ and ddp/ likewise; environment.txt, summary.txt), ready to
# commit, and a short summary.
#
#   scripts/gpu_check.sh [--out DIR] [--force] [--no-install] [--budget SECONDS]
#   scripts/gpu_check.sh --dry-run [--gpus N]          # the plan and its estimate only
#   scripts/gpu_check.sh --name "NVIDIA H100 80GB HBM3" 8   # prints the output directory only
#
# Installs nothing from the network: only `pip install -e .` of this checkout, without
# dependencies (torch with CUDA must already be there); --no-install skips that and runs this
# checkout through PYTHONPATH instead. Each step runs under a limit of twice its estimate (and
# a little), so the whole check fits twice in 15 minutes of a lent machine; --budget: seconds
# for all the steps (default: their limits added up). GPU_CHECK_DRY=1 is --dry-run. Writes
# only under results/. Exit codes: 0 all good; 1 a step failed or a result was wrong; 2 no
# GPU here, or bad usage.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}

usage() { echo "gpu_check.sh: error: $1; usage: scripts/gpu_check.sh [--out DIR] [--force] [--no-install] [--budget SECONDS] [--dry-run [--gpus N]] | --name MODEL COUNT" >&2; exit 2; }

# results/example-<model>-<n>gpu: the model in lower case, without the vendor, one dash between
# words: "NVIDIA H100 80GB HBM3", 8 -> results/example-h100-80gb-hbm3-8gpu
out_dir_for() {
  local model
  model=$(tr '[:upper:]' '[:lower:]' <<< "$1" | sed -e 's/nvidia//g' -e 's/geforce//g' \
          -e 's/[^a-z0-9]\{1,\}/-/g' -e 's/^-//' -e 's/-$//')
  echo "results/example-${model:-gpu}-${2}gpu"
}

OUT="" FORCE=0 INSTALL=1 BUDGET_S="" DRY=${GPU_CHECK_DRY:-0} PLAN_GPUS=""
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
    --dry-run) DRY=1; shift ;;
    --gpus)
      (( $# >= 2 )) && [[ $2 =~ ^[1-9][0-9]*$ ]] || usage "--gpus needs a positive whole number"
      PLAN_GPUS=$2; shift 2 ;;
    *) usage "unknown argument '$1'" ;;
  esac
done
if [[ -n $OUT && ( $OUT != results/* || $OUT == *..* ) ]]; then
  usage "--out must be under results/ (this script writes only there), not '$OUT'"
fi
[[ -z $PLAN_GPUS || $DRY == 1 ]] || usage "--gpus plans a machine: it goes with --dry-run"

(( INSTALL )) || export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # this checkout, as is

# ---- a GPU, or one line and exit 2 --------------------------------------------------------
# Options that may be empty are plain words, expanded unquoted: an empty array's "${A[@]}"
# is an unbound variable under set -u before bash 4.4.
BACKEND=nccl QUICK="" SWEEP="--max-bytes 256M --factor 4 --budget 0.1" SIZES=10 ROUNDS=4
START_S=10 PLOT_S=8  # the plan's model (below)
PINNED=native:ring,native:tree:LL,native:nvls,ring  # step 3's algorithms
SHARED_DEVICE=cuda  # where step 4's ranks put their tensors
if [[ -n ${GPU_CHECK_CPU_RANKS:-} ]]; then
  # development only: walk through every step with gloo on N CPU ranks and tiny sweeps
  GPUS=$GPU_CHECK_CPU_RANKS BACKEND=gloo QUICK=--quick SWEEP=--quick MODEL="cpu test" SIZES=2 ROUNDS=1
  START_S=40 PLOT_S=20  # a loaded 2-core VM starts a command in 20-40 s
  SHARED_DEVICE=cpu PINNED=native,ring  # gloo has no NCCL variants
elif [[ -n $PLAN_GPUS ]]; then
  GPUS=$PLAN_GPUS
else
  GPUS=$("$PYTHON" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)' 2>/dev/null)
fi
if [[ ! $GPUS =~ ^[0-9]+$ || $GPUS == 0 ]]; then
  why="torch sees no CUDA device"
  [[ $GPUS =~ ^[0-9]+$ ]] || why="torch cannot be imported"
  command -v nvidia-smi >/dev/null || why+=", and nvidia-smi is not installed"
  echo "gpu_check.sh: no GPU on this machine ($why); run it on a machine with one or more GPUs (or plan one: --dry-run --gpus N)" >&2
  exit 2
fi

# ---- the plan: each step's estimate on this machine, printed before anything runs -----------
# A model, not a measurement (doc/testing.md, "The GPU check"): a command's start (Python,
# torch, CUDA, the local world's ranks, NCCL's communicators) START_S, its figures and report
# PLOT_S, and per measurement and round its budget's share plus CALL_S of calibration, check
# and gathers; --extra-budget's 4 s once per run. Each step prints its own time beside it.
CALL_S=0.03 EXTRA_S=4
read -r ALGOS ALGOS_N1 <<< "$(PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" - "$BACKEND" <<'EOF'
import sys
from allreduce_bench.core.algorithms import names_for
names = names_for(sys.argv[1])
print(len(names), sum(n == "native" or n.startswith("native:") for n in names))  # N=1: the backend's own
EOF
)"
[[ $ALGOS =~ ^[0-9]+$ ]] || { echo "gpu_check.sh: allreduce_bench cannot be imported from $PWD" >&2; exit 1; }
WORLDS=1 k=2; while (( k < GPUS )); do WORLDS=$(( WORLDS + 1 )); k=$(( k * 2 )); done; (( GPUS > 1 )) && WORLDS=$(( WORLDS + 1 ))
run_estimate() {  # run_estimate MEASUREMENTS BUDGET STARTS: seconds of one `run`
  awk -v m="$1" -v b="$2" -v s="$3" -v r="$ROUNDS" -v st="$START_S" -v p="$PLOT_S" -v c="$CALL_S" -v e="$EXTRA_S" \
    'BEGIN { printf "%d", s * st + p + m * r * (b / r + c) + e + 0.5 }'
}
PLAN=() ESTIMATES=()
plan() { PLAN+=("$1"); ESTIMATES+=("$2"); }
(( INSTALL )) && plan install 10
plan environment 5
plan "run" "$(run_estimate $(( (GPUS == 1 ? ALGOS_N1 : ALGOS) * SIZES )) 0.1 1)"
(( GPUS >= 2 )) && plan sub-worlds "$(run_estimate $(( 4 * 3 * WORLDS )) 0.1 1)"
(( GPUS == 1 )) && plan shared-gpu "$(run_estimate 4 0.2 2)"
plan spin $(( 2 * (START_S + 2) ))
plan ddp $(( START_S + PLOT_S + 7 ))
TOTAL=0 LIMITS=0 LIMIT=()
for i in "${!PLAN[@]}"; do
  TOTAL=$(( TOTAL + ESTIMATES[i] )); LIMIT[i]=$(( 2 * ESTIMATES[i] + 10 )); LIMITS=$(( LIMITS + LIMIT[i] ))
done
BUDGET_S=${BUDGET_S:-$LIMITS}
limit_of() { local i; for i in "${!PLAN[@]}"; do [[ ${PLAN[i]} == "$1" ]] && echo "${LIMIT[i]}"; done; }
echo "gpu_check.sh: plan for $GPUS GPU(s): $(for i in "${!PLAN[@]}"; do printf '%s ~%ss, ' "${PLAN[i]}" "${ESTIMATES[i]}"; done)estimate ${TOTAL} s (each step limited to twice its estimate + 10 s: ${LIMITS} s in all; --budget ${BUDGET_S} s)"
(( DRY )) && exit 0

START=$(date +%s)
left() { echo $(( BUDGET_S - ($(date +%s) - START) )); }
if (( INSTALL )); then
  # this checkout, editable; nothing else: no dependencies, no build isolation (no downloads)
  if ! "$PYTHON" -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1; then
    echo "gpu_check.sh: pip install -e . failed; rerun with --no-install and PYTHONPATH=$PWD" >&2
    exit 1
  fi
fi
# scipy: imported mid-run, by the rounds' significance (core/measure/rounds.py)
MISSING=$("$PYTHON" - <<'EOF'
import importlib.util
print(" ".join(m for m in ("torch", "pandas", "matplotlib", "click", "tqdm", "scipy")
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

# ---- 2. run, 3. sub-worlds, 4. sharing one GPU, 5. the spin, 6. ddp ---------------------------
FAILED=()
step() {  # step NAME PLAN command...: run it within its plan's limit and what is left, log it
  local name=$1 limit left_s; limit=$(limit_of "$2"); left_s=$(left); shift 2
  (( left_s < limit )) && limit=$left_s
  (( limit > 20 )) || { FAILED+=("$name (no time left)"); return; }
  local t0=$SECONDS rc
  timeout --signal=INT --kill-after=15 "$limit" "$@" >> "$LOG" 2>&1; rc=$?
  echo "  $name: exit $rc in $(( SECONDS - t0 )) s (limit $limit s)"
  (( rc == 0 )) || FAILED+=("$name (exit $rc)")
}
step "run ($BACKEND, every algorithm, world size $GPUS)" run \
  "$PYTHON" -m allreduce_bench run --backend "$BACKEND" --world-sizes "$GPUS" --algos all $SWEEP \
  --timeout 60 --tag "gpu-check" --out "$OUT"
if (( GPUS >= 2 )); then
  SUB=1 k=2  # 1, 2, 4, ... and the GPU count: every world but the last is a sub-world
  while (( k < GPUS )); do SUB+=,$k; k=$(( k * 2 )); done
  step "run ($BACKEND, sub-worlds $SUB,$GPUS, $PINNED)" sub-worlds \
    "$PYTHON" -m allreduce_bench run --backend "$BACKEND" --world-sizes "$SUB,$GPUS" \
    --algos "$PINNED" --sizes 4K,1M,64M --budget 0.1 $QUICK --timeout 60 \
    --tag "gpu-check-sub-worlds" --out "$OUT/sub-worlds"
fi
if (( GPUS == 1 )); then
  # two sizes, native AllReduce (gloo moves CUDA tensors in its own collectives only), a short
  # budget: the staging through host memory makes each call slow, and this step checks the
  # machinery with several ranks rather than measuring the GPU
  step "run (gloo, world sizes 2,4 sharing one GPU)" shared-gpu \
    "$PYTHON" -m allreduce_bench run --backend gloo --device "$SHARED_DEVICE" --world-sizes 2,4 \
    --algos native --sizes 4K,1M --budget 0.2 $QUICK --timeout 60 \
    --tag "gpu-check-shared" --out "$OUT/shared-gpu"
fi
for loops in 100 5000; do  # the spin's clock rate (cycles_per_ms) is measured once per rank
  step "run (1K at --loops $loops)" spin \
    "$PYTHON" -m allreduce_bench run --backend "$BACKEND" --world-sizes "$GPUS" --algos native --sizes 1K \
    --loops "$loops" --samples 10 --rounds 1 --extra-budget 0 --no-plot --timeout 60 \
    --tag "gpu-check-spin" --out "$OUT/spin/loops-$loops"
done
step "ddp (world size $GPUS)" ddp \
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
    if not name.startswith("run"):
        continue
    many, one = rows[rows["world_size"] > 1], rows[rows["world_size"] == 1]
    if len(many):
        print("peak busbw (GB/s) per algorithm and world size:")
        print(many.pivot_table(index="algorithm", columns="world_size", values="busbw_GBps",
                               aggfunc="max").round(1).to_string())
    if len(one):  # one rank moves nothing: busbw is 0 by definition, the time is the call's
        print("world size 1, time per call (us) at the smallest and largest size (the backend's own "
              "call with no peer; busbw is 0 by definition):")
        ends = one[one["size_bytes"].isin([one["size_bytes"].min(), one["size_bytes"].max()])]
        print(ends.pivot_table(index="algorithm", columns="size_bytes", values="time_us_median",
                               aggfunc="median").round(2).to_string())
spin = {}
for loops in (100, 5000):
    path = out / "spin" / f"loops-{loops}" / "results.csv"
    if path.exists():
        spin[loops] = float(pd.read_csv(path)["time_us_median"].iloc[0])
if len(spin) == 2:
    fast, slow = spin[100], spin[5000]
    verdict = ("the same within 20%: the spin covers the host's queueing" if slow <= 1.2 * fast + 0.1 else
               "longer at 5000: the spin ended before the host had queued the sample (its clock rate "
               "is measured once; doc/methodology.md)")
    print(f"spin: 1K at --loops 100: {fast:.2f} us a call, at --loops 5000: {slow:.2f} us; {verdict}")
EOF
ELAPSED=$(( $(date +%s) - START ))
echo "gpu_check.sh: $ELAPSED s (estimate $TOTAL s); figures and report in $OUT/plots, $OUT/ddp/plots and $OUT/$( (( GPUS == 1 )) && echo shared-gpu || echo sub-worlds)/plots"
if grep -q '#wrong [1-9]' "$SIDE/summary.txt" || (( ${#FAILED[@]} )); then
  echo "gpu_check.sh: FAILED: ${FAILED[*]:-wrong results}; see $OUT/gpu_check.log" >&2
  exit 1
fi
echo "gpu_check.sh: all good; commit $OUT"
