#!/bin/bash
# tests/device/verify.sh: every check of shardlab's CUDA device and NCCL communicator that needs
# a GPU, in one command, on a lent GPU machine (see tests/device/README.md).
#
#   tests/device/pack.sh                                  # here: builds build-device/, packs .device/
#   device run: bash tests/device/verify.sh [STAGE...]    # there, carrying .device
#
# Stages (default: all, in this order, each under its own time limit; a stage that would start
# after the overall budget is listed as not run):
#   kernels   every CUDA kernel against its CPU op (relative errors printed)
#   chapters  the GPU entries of ctest: chapters 00-11 at world 1 on NCCL and at worlds 2-4 on
#             --comm mpi sharing the GPU, each chapter's own checks and the trace schema
#   steps     every training chapter (02-11) at world 1 on gpt2-small: measured step time
#             beside the sim's
#   torch     the same gpt2-small step in PyTorch eager fp32 (tests/tools/torch_gpt2_step.py), and a
#             Kineto trace of one such step (a current PyTorch's GPU trace, for the viewer)
#   bench     cuBLAS at gpt2-small shapes against the measured peak; every op of a gpt2-small
#             step against the sim's prediction for h100-8; a profile measured from this GPU
#   sanitize  compute-sanitizer memcheck and racecheck over the kernel tests
# What comes back under $OUT: verify.log (everything printed), measured-profile.json (bench),
# results.tar.gz (each stage's log, the chapters' summaries and the gpt2-small GPU traces,
# PyTorch's included).
set -u
all_stages="kernels chapters steps torch bench sanitize"
stages=("$@")
[ ${#stages[@]} -eq 0 ] && read -ra stages <<< "$all_stages"
for s in "${stages[@]}"; do
  [[ " $all_stages " == *" $s "* ]] || { echo "verify.sh: unknown stage '$s'; allowed: $all_stages" >&2; exit 2; }
done
root=$PWD
out=${OUT:-$root/device-out}
work=/tmp/shardlab-verify
budget_s=${VERIFY_BUDGET_S:-540}
mkdir -p "$out" && rm -rf "$work" && mkdir -p "$work/logs" "$work/runs"
exec > >(tee "$out/verify.log") 2>&1
start=$(date +%s)
say() { printf '\n== %s (%ds)\n' "$*" $(( $(date +%s) - start )); }

# -- The machine, and the environment the carried build needs there.
say "machine"
if nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv; then gpu=yes
else gpu=no; echo "no GPU visible (nvidia-smi failed): every stage will be reported as skipped"; fi
nvcc --version 2>/dev/null | tail -1
[ -f .device/build-device.tar.xz ] && [ -d .device/debs ] || { echo "verify.sh: .device/ is incomplete: run tests/device/pack.sh here and carry .device"; exit 1; }
tar -xJf .device/build-device.tar.xz  # build-device/: the programs and ctest's lists, as pack.sh built them

# Open MPI from the carried packages, in a folder of its own. libnuma and libudev only where the
# machine has none (a second copy would shadow the machine's own).
mpi=/opt/shardlab-mpi
rm -rf "$mpi" && mkdir -p "$mpi"
for deb in .device/debs/*.deb; do
  case $(basename "$deb") in
    libnuma1_*) ldconfig -p | grep -q 'libnuma.so.1 ' && continue ;;
    libudev1_*) ldconfig -p | grep -q 'libudev.so.1 ' && continue ;;
  esac
  dpkg-deb -x "$deb" "$mpi"
done
ln -s orterun "$mpi/usr/bin/mpirun"  # Debian names it through its alternatives system
triplet=x86_64-linux-gnu
export OPAL_PREFIX=$mpi/usr OPAL_SYSCONFDIR=$mpi/etc/openmpi OPAL_PKGLIBDIR=$mpi/usr/lib/$triplet/openmpi/lib/openmpi3
export PATH=$mpi/usr/bin:$PATH
export LD_LIBRARY_PATH=$mpi/usr/lib/$triplet:$mpi/usr/lib/$triplet/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PYTHONUNBUFFERED=1  # a stage killed at its limit still shows what its Python printed
# Shared memory between the ranks of one machine, nothing else; no noise from the network
# components whose libraries this machine lacks.
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_mca_base_component_show_load_errors=0 PMIX_MCA_mca_base_component_show_load_errors=0
export PMIX_MCA_pcompress_base_silence_warning=1  # the carried PMIx finds no zlib: ten lines a job, nothing lost

# CUDA's and NCCL's libraries: wherever this machine keeps them (the toolkit, or PyTorch's wheels).
# cuBLAS is opened at run time (common/cuda/cublas_library.h), so ldd does not list it; its
# soname carries the toolkit's major version, as cudart's does, and its directory goes on
# LD_LIBRARY_PATH like the others.
cublas=libcublas.so.$(ldd build-device/chapters/shardlab_ch02 | grep -o 'libcudart\.so\.[0-9]*' | head -1 | sed 's/.*\.//')
for lib in $(ldd build-device/chapters/shardlab_ch02 | awk '/not found/ {print $1}') $cublas; do
  found=$(find /usr/local /usr/lib /opt -name "$lib" 2>/dev/null | head -1)
  if [ -z "$found" ]; then echo "verify.sh: $lib (needed by the chapters) is nowhere on this machine"; exit 1; fi
  echo "using $found"
  export LD_LIBRARY_PATH=$(dirname "$found"):$LD_LIBRARY_PATH
done
ldd build-device/chapters/shardlab_ch02 | grep 'not found' && { echo "verify.sh: libraries still missing"; exit 1; }

# ctest and the chapters name files by the absolute paths of the machine that built them: the
# source folder and the Python of that machine. Point those paths here.
built_at=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' build-device/CMakeCache.txt)
if [ "$built_at" != "$root" ]; then
  if [ -e "$built_at" ] && [ ! -L "$built_at" ]; then echo "verify.sh: $built_at exists here; cannot link it to $root"; exit 1; fi
  mkdir -p "$(dirname "$built_at")" && ln -sfn "$root" "$built_at"
fi
built_python=$(grep -o '[^ "]*python3[^ "]* [^ ]*validate_trace.py' build-device/tests/CTestTestfile.cmake | head -1 | cut -d' ' -f1)
if [ -n "$built_python" ] && [ ! -x "$built_python" ]; then
  mkdir -p "$(dirname "$built_python")" && ln -sfn "$(command -v python3)" "$built_python"
fi
mpirun --version | head -1
mpirun -np 2 hostname || { echo "verify.sh: the carried Open MPI does not start"; exit 1; }

# -- Stages.
failed=() skipped=() not_run=()
# stage NAME LIMIT_S: runs the function NAME (below) in a shell of its own under a time limit,
# its output also in logs/NAME.log. Exit 77 is a skip (no GPU visible), as in ctest.
stage() {
  local name=$1 limit=$2
  local left=$(( budget_s - ($(date +%s) - start) ))
  if [ "$left" -lt 30 ]; then not_run+=("$name"); say "$name: not run (time budget spent)"; return; fi
  if [ "$gpu" = no ]; then skipped+=("$name"); say "$name: skipped: no GPU visible"; return; fi
  [ "$limit" -gt "$left" ] && limit=$left
  say "$name (limit ${limit}s)"
  timeout --kill-after=10 "$limit" bash -c "$name" 2>&1 | tee "$work/logs/$name.log"
  local rc=${PIPESTATUS[0]}
  echo "-- $name: exit $rc"
  case $rc in
    0) ;;
    77) skipped+=("$name") ;;
    124|137) failed+=("$name (over its ${limit}s)") ;;
    *) failed+=("$name (exit $rc)") ;;
  esac
}

kernels() {
  build-device/tests/shardlab_cuda_tests
}

chapters() {
  local rc
  # The GPU tests share the one GPU; on the H200's 16 cores 12 at once took 30 s.
  local jobs=$(( $(nproc) < 12 ? $(nproc) : 12 ))
  ctest --test-dir build-device -R "on the GPU|^cuda:" --output-on-failure -j "$jobs" --timeout 300 2>&1 | tee "$work/ctest.txt"
  rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 0 ] && grep -q '(Skipped)' "$work/ctest.txt"; then return 77; fi
  return "$rc"
}

sanitize() {
  local rc=0 tool
  for tool in memcheck racecheck; do
    compute-sanitizer --tool $tool --error-exitcode 99 build-device/tests/shardlab_cuda_tests
    case $? in 0) ;; 77) return 77 ;; *) rc=1 ;; esac
  done
  return $rc
}

bench() {
  local rc=0 name
  build-device/tests/bench_cuda_matmul
  case $? in 0) ;; 77) return 77 ;; *) rc=1 ;; esac
  # "NVIDIA H100 80GB HBM3" -> h100-measured
  name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | awk '{print tolower($2)}')
  build-device/tests/bench_cuda_ops --profile h100-8 --batch 8 --seq-len 1024 || rc=1
  build-device/tests/measure_profile --base h100-8 --name "${name}-measured" --out "$out/measured-profile.json" || rc=1
  [ -f "$out/measured-profile.json" ] && cp "$out/measured-profile.json" common/device/profiles/measured.json &&
    build-device/tests/bench_cuda_ops --profile measured --batch 8 --seq-len 1024 || rc=1
  return $rc
}

steps() {
  local rc=0 ch device
  local shape=(--model gpt2-small --global-batch 8 --seq-len 1024 --steps 10)
  for ch in $training_chapters; do
    mpirun -np 1 build-device/chapters/shardlab_ch$ch --device cuda "${shape[@]}" --skip-reference \
      --trace-dir "$work/runs" --run-name ch${ch}_gpt2_cuda || rc=1
    mpirun -np 1 build-device/chapters/shardlab_ch$ch --device sim --compute skip --profile h100-8 "${shape[@]}" \
      --trace-dir "$work/runs" --run-name ch${ch}_gpt2_sim > /dev/null || rc=1
    mpirun -np 1 build-device/chapters/shardlab_ch$ch --device sim --compute skip --profile h200-measured "${shape[@]}" \
      --trace-dir "$work/runs" --run-name ch${ch}_gpt2_h200 > /dev/null || rc=1
    if [ -f common/device/profiles/measured.json ]; then
      mpirun -np 1 build-device/chapters/shardlab_ch$ch --device sim --compute skip --profile measured "${shape[@]}" \
        --trace-dir "$work/runs" --run-name ch${ch}_gpt2_measured > /dev/null || rc=1
    fi
  done
  python3 - "$work/runs" <<'EOF' || rc=1
import json, os, statistics, sys
runs = sys.argv[1]
def step_ms(run):
    path = os.path.join(runs, run, "summary.json")
    if not os.path.exists(path):
        return "-"
    steps = json.load(open(path))["ranks"][0]["steps"][1:]  # step 0 warms up the allocator
    return "%.2f" % (statistics.median(s["step_us"] for s in steps) / 1e3)
print("\ngpt2-small, world 1, global batch 8 x 1024 tokens: median step time (ms), steps 1-9")
print("%-8s %10s %16s %18s %16s" % ("chapter", "measured", "sim h100-8", "sim h200-measured", "sim measured"))
for ch in os.environ["training_chapters"].split():
    print("%-8s %10s %16s %18s %16s" % (ch, step_ms(f"ch{ch}_gpt2_cuda"), step_ms(f"ch{ch}_gpt2_sim"),
                                        step_ms(f"ch{ch}_gpt2_h200"), step_ms(f"ch{ch}_gpt2_measured")))
EOF
  return $rc
}

torch() {
  python3 tests/tools/torch_gpt2_step.py --batch 8 --seq-len 1024 --trace "$work/runs/torch_gpt2_step.pt.trace.json.gz"
}
export -f kernels chapters sanitize bench steps torch
export out work
export training_chapters="02 03 04 05 06 07 08 09 10 11"

for s in "${stages[@]}"; do
  case $s in
    kernels)  stage kernels 120 ;;
    chapters) stage chapters 360 ;;
    steps)    stage steps 300 ;;
    torch)    stage torch 180 ;;
    bench)    stage bench 240 ;;
    sanitize) stage sanitize 240 ;;
  esac
done

say "results"
cp -r build-device/Testing/Temporary "$work/ctest" 2>/dev/null
(cd "$work" && find runs -name '*.json' -size +12M -delete; tar czf "$out/results.tar.gz" logs runs ctest 2>/dev/null)
ls -la "$out"
[ ${#not_run[@]} -gt 0 ] && echo "not run (budget): ${not_run[*]}"
[ ${#skipped[@]} -gt 0 ] && echo "skipped (no GPU visible): ${skipped[*]}"
if [ ${#failed[@]} -gt 0 ]; then echo "FAILED: ${failed[*]}"; exit 1; fi
if [ ${#skipped[@]} -gt 0 ]; then echo "nothing failed, but stages were skipped"; exit 77; fi
echo "all stages run passed"
