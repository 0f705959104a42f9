#!/bin/bash
# tests/device/pack.sh: prepares, on this machine, what a lent GPU machine needs to run
# tests/device/verify.sh (see tests/device/README.md).
#
#   tests/device/pack.sh        # then carry [".device"] in the device call
#
# The GPU machine has nvcc, CMake and PyTorch but no Open MPI and no network. So the GPU programs
# are built here (the `device` preset: Release, CUDA on, sm_90 only, no viewer, `mpirun` taken
# from PATH), and Open MPI's runtime travels as Debian packages that verify.sh unpacks there
# into a folder of its own (never over the machine's /).
set -euo pipefail
cd "$(dirname "$0")/../.."

# Open MPI's runtime and what it loads, as Debian 12 names them (the packages .ci/setup installs
# through libopenmpi-dev). libnuma1 and libudev1 are unpacked there only if the machine lacks them.
packages=(openmpi-bin openmpi-common libopenmpi3 libpmix2 libhwloc15 libevent-core-2.1-7
          libevent-pthreads-2.1-7 libnuma1 libudev1)

echo "== building the GPU programs (preset device: build-device/)"
cmake --preset device > /dev/null
cmake --build --preset device

# What verify.sh needs of the build (the programs, ctest's lists, CMakeCache.txt) travels as one
# xz archive: about 3 MB, where build-device/ with its objects is over 60 MB and the working
# tree, with the committed traces, already takes three quarters of the 64 MiB a device call moves.
echo "== packing the programs and ctest's lists into .device/build-device.tar.xz"
mkdir -p .device
find build-device -path '*/CMakeFiles' -prune -o -type f -print \
  | grep -v -E '(Makefile|cmake_install\.cmake|\.a|compile_commands\.json)$' \
  | tar -cJf .device/build-device.tar.xz -T -

echo "== downloading Open MPI's runtime packages into .device/debs"
rm -rf .device/debs && mkdir -p .device/debs
(cd .device/debs && apt-get download "${packages[@]}" 2>&1 | grep -v "^W: Download is performed unsandboxed" || true)
for p in "${packages[@]}"; do
  ls .device/debs/"${p}"_*.deb > /dev/null 2>&1 || { echo "pack.sh: package $p was not downloaded" >&2; exit 1; }
done

# The device tool moves at most 64 MiB: the repository's files plus what is carried.
tree_kib=$(git ls-files -z --cached --others --exclude-standard | du -c -k --files0-from=- | tail -1 | cut -f1)
carry_kib=$(du -s -k .device | cut -f1)
total_mib=$(( (tree_kib + carry_kib) / 1024 ))
echo "== ready: working tree $((tree_kib / 1024)) MiB + carried $((carry_kib / 1024)) MiB = ${total_mib} MiB (the tool's limit: 64)"
if [ "$total_mib" -ge 64 ]; then
  echo "pack.sh: too large to travel; remove untracked files or build artefacts from the tree" >&2
  exit 1
fi
echo 'device call: command "bash tests/device/verify.sh", carry [".device"]'
