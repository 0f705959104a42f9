#!/usr/bin/env bash
# Fuzzes the viewer's trace loader: builds tests/viewer/fuzz_trace_loader.cpp with clang++ and libFuzzer
# (-fsanitize=fuzzer,address,undefined) against viewer/trace_model.cpp and viewer/loader/, then
# runs it on a seed corpus (small traces cut from traces/, tests/data/, hostile files) for
# FUZZ_SECONDS (45).
#
#   tests/viewer/run_fuzz.sh                      as ctest runs it ("viewer: fuzz the trace loader")
#   FUZZ_SECONDS=600 tests/viewer/run_fuzz.sh     a longer hunt
#   FUZZ_WORK=/tmp/fz tests/viewer/run_fuzz.sh    keep the build, corpus and any crash-* files there
#
# Exits 77 (ctest: skipped) when clang++ with libFuzzer is not installed (Debian: clang-14 and
# libclang-rt-14-dev, in .ci/setup). A finding fails the run; its input is saved as
# $FUZZ_WORK/crash-<sha1> (replay it: $FUZZ_WORK/fuzz_trace_loader crash-<sha1>).
set -euo pipefail

src=$(cd "$(dirname "$0")/../.." && pwd)
seconds=${FUZZ_SECONDS:-45}
work=${FUZZ_WORK:-}
if [ -z "$work" ]; then
  work=$(mktemp -d "${TMPDIR:-/tmp}/shardlab_fuzz.XXXXXX")
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work"

# A clang++ whose -fsanitize=fuzzer links.
cxx=""
for c in ${FUZZ_CXX:-} clang++ clang++-14 clang++-15 clang++-16; do
  command -v "$c" > /dev/null 2>&1 || continue
  printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' > "$work/probe.cpp"
  if "$c" -fsanitize=fuzzer "$work/probe.cpp" -o "$work/probe" > /dev/null 2>&1; then
    cxx=$c
    break
  fi
done
if [ -z "$cxx" ]; then
  echo "skipped: clang++ with libFuzzer not found (Debian: clang-14 libclang-rt-14-dev; see .ci/setup)"
  exit 77
fi
simdjson_flags=$(pkg-config --cflags --libs simdjson 2> /dev/null || echo "-lsimdjson")

echo "run_fuzz: building with $cxx"
# shellcheck disable=SC2086  # the pkg-config flags are several words
# Chunks of 256 bytes (not 2 MiB): small inputs too are cut into many parts, parsed on several
# threads and merged, so the fuzzer reaches that code.
"$cxx" -std=c++20 -O1 -g -fno-omit-frame-pointer \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -DSHARDLAB_TRACE_CHUNK_BYTES=256 \
  -I"$src/viewer" -I"$src/common" \
  "$src/tests/viewer/fuzz_trace_loader.cpp" "$src/viewer/trace_model.cpp" "$src/viewer/loader/event_splitter.cpp" \
  "$src/viewer/loader/chunk_parser.cpp" "$src/viewer/loader/skeleton.cpp" "$src/viewer/loader/trace_builder.cpp" \
  "$src/common/trace/metrics.cpp" "$src/common/trace/file_output.cpp" "$src/common/run/run_directory.cpp" \
  $simdjson_flags -lz -pthread -o "$work/fuzz_trace_loader"

# Seeds: small valid traces (the head of each reference trace, the committed Kineto traces),
# and the shapes of broken files the unit tests use.
corpus="$work/corpus"
mkdir -p "$corpus"
if command -v python3 > /dev/null 2>&1; then
  python3 - "$src" "$corpus" << 'EOF'
import glob, gzip, json, os, sys
src, corpus = sys.argv[1], sys.argv[2]
paths = sorted(glob.glob(os.path.join(src, "traces", "*", "rank0.json")))
paths += sorted(glob.glob(os.path.join(src, "tests", "data", "*.json*")))
for i, p in enumerate(paths):
    opener = gzip.open if p.endswith(".gz") else open
    with opener(p, "rt") as f:
        trace = json.load(f)
    events = trace.get("traceEvents", [])
    for n in (8, 40):
        small = dict(trace)
        small["traceEvents"] = events[:n]
        with open(os.path.join(corpus, f"seed{i}_{n}.json"), "w") as f:
            json.dump(small, f, indent=1 if n == 8 else None)
    with gzip.open(os.path.join(corpus, f"seed{i}_8.json.gz"), "wt") as f:
        json.dump(dict(trace, traceEvents=events[:8]), f)
EOF
fi
good='{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 1.0, "dur": 2.0, "args": {"correlation": 3}}'
head='{"distributedInfo": {"rank": 0}, "traceEvents": ['
printf '%s' "$head$good]}" > "$corpus/good.json"
printf '%s' "$head$good, {\"ph\": \"B\", \"pid\": \"Spans\", \"tid\": \"t\", \"ts\": 1}, {\"ph\": \"E\", \"pid\": \"Spans\", \"tid\": \"t\", \"ts\": 2}]}" > "$corpus/be.json"
printf '%s' "$head$good, {\"ph\": \"s\", \"id\": 3, \"pid\": 0, \"tid\": 1, \"ts\": 1}, {\"ph\": \"f\", \"bp\": \"e\", \"id\": 3, \"pid\": 0, \"tid\": 7, \"ts\": 1}]}" > "$corpus/flow.json"
printf '%s' "$head{\"ph\": \"C\", \"name\": \"GPU memory\", \"ts\": 1, \"args\": {\"allocated\": 1, \"reserved\": 2}}, {\"ph\": \"i\", \"name\": \"[memory]\", \"ts\": 2, \"args\": {\"Device Type\": 1, \"Total Allocated\": 5}}]}" > "$corpus/counter.json"
printf '%s' "$head{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"nccl:wait\", \"ts\": 1, \"dur\": 1}, {\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"ncclAllReduce\", \"ts\": 2, \"dur\": 1, \"args\": {\"Collective name\": \"allreduce\", \"In msg nelems\": 4, \"dtype\": \"Half\"}}]}" > "$corpus/nccl.json"
printf '%s' "$head{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": 0, \"tid\": 7, \"args\": {\"name\": \"s\"}}, {\"ph\": \"M\", \"name\": \"thread_sort_index\", \"pid\": 0, \"tid\": 7, \"args\": {\"sort_index\": 2}}]}" > "$corpus/meta.json"
printf '%s' "$head$good, 5]}" > "$corpus/event_number.json"
printf '%s' "{\"trace\\u0045vents\": [$good], \"a\": [\"]\", {\"b\": \"\\\\\"}]}" > "$corpus/escapes.json"
printf '%s' "$head" > "$corpus/truncated.json"
printf '%s' "$head$good,
$good,
{\"ph\": \"X\", \"name\": \"cut" > "$corpus/cut_in_event.json"
printf '%s' "$head{\"ph\": \"X\", \"name\": \"a\", \"pid\": 0, \"tid\": 1, \"ts\": 1, \"dur\": 9}, {\"ph\": \"X\", \"name\": \"b\", \"pid\": 0, \"tid\": 1, \"ts\": 2, \"dur\": 9}, {\"ph\": \"X\", \"name\": \"c\", \"pid\": 0, \"tid\": 1, \"ts\": 3, \"dur\": 1}]}" > "$corpus/overlap.json"
printf '[]' > "$corpus/array.json"

# The tokens a trace is made of, so mutations make plausible events.
cat > "$work/trace.dict" << 'EOF'
"\"traceEvents\""
"\"distributedInfo\""
"\"rank\""
"\"ph\""
"\"X\""
"\"B\""
"\"E\""
"\"i\""
"\"C\""
"\"s\""
"\"f\""
"\"M\""
"\"bp\""
"\"e\""
"\"id\""
"\"name\""
"\"cat\""
"\"kernel\""
"\"gpu_memset\""
"\"cuda_runtime\""
"\"user_annotation\""
"\"pid\""
"\"tid\""
"\"ts\""
"\"dur\""
"\"args\""
"\"correlation\""
"\"Collective name\""
"\"In msg nelems\""
"\"Group size\""
"\"dtype\""
"\"sort_index\""
"\"thread_name\""
"\"process_name\""
"\"ProfilerStep#1\""
"\"[memory]\""
"\"Device Type\""
"\"Total Allocated\""
"\"nccl:wait\""
"\"ncclKernel\""
"\"Spans\""
"\\u0000"
"\\\""
"1e999"
"-0"
"18446744073709551616"
"null"
"true"
"],"
"},"
"[{"
EOF

echo "run_fuzz: fuzzing for ${seconds} s (corpus $corpus)"
status=0
"$work/fuzz_trace_loader" "$corpus" -dict="$work/trace.dict" -max_total_time="$seconds" -max_len=16384 \
  -timeout=20 -rss_limit_mb=4096 -artifact_prefix="$work/" -print_final_stats=1 2>&1 | tail -n 25 || status=$?
if [ "$status" -ne 0 ] || ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-* > /dev/null 2>&1; then
  echo "run_fuzz: FAILED: findings under $work (set FUZZ_WORK to keep them); the inputs:"
  for f in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
    [ -e "$f" ] || continue
    echo "--- $(basename "$f") ($(wc -c < "$f") bytes)"
    od -An -c "$f" | head -n 40
  done
  exit 1
fi
echo "run_fuzz: passed: no crash, sanitizer report or broken model in ${seconds} s"
