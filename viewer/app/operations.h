// operations.h: a run's slices grouped by operation, for the Compare tab's table of operations
// (as Holistic Trace Analysis's trace_diff compares two traces op by op, but clickable).
//
// An operation is what a reader would call one thing across steps and ranks: a compute kernel's
// name family ("ampere_sgemm_64x32_sliced1x4_nn", "cutlass::Kernel2": template arguments and
// parameter lists dropped), a collective by kind and size ("allreduce 256.00 KiB"), a CPU op,
// runtime call or annotation by name. Per step (every step window of every rank, averaged): how
// many times it ran, its time (clipped to the step) and, for communication, its exposed time:
// the part no compute kernel overlapped, from the metrics library (common/trace/metrics.h), so
// the communication rows add up to the Steps tab's exposed comm.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "trace_model.h"

namespace shardlab::viewer::app {

struct Run;
struct AppState;

// Where a slice is within its run.
struct SlicePlace {
  int rank = -1, lane = -1;
  uint32_t slice = 0;
};

struct Operation {
  std::string key;   // "collective allreduce 256.00 KiB", "kernel gemm": kind and label, unique
  std::string kind;  // "kernel", "collective", "comm wait", "memcpy", "cpu op", "runtime", "annotation", ...
  std::string label; // what the table shows
  bool communication = false;  // comm and comm wait: exposed time is defined
  // Per step window, averaged over every step of every rank.
  double count = 0, time_us = 0, exposed_us = 0;
  SlicePlace first;  // its earliest slice in a step (where a click fits the view)
  double first_start_us = 0;
};

struct RunOperations {
  std::vector<Operation> ops;
  std::vector<std::vector<std::vector<uint32_t>>> of_slice;  // [rank][lane][slice] -> ops index (kNone: no operation)
  std::unordered_map<std::string, uint32_t> by_key;
  static constexpr uint32_t kNone = UINT32_MAX;
};

// Groups a loaded run's slices by operation (make_run calls it once its other indices are built).
RunOperations index_operations(const Run& run);

// One row of the table: the operation in the run and in the compared run (absent: zeros).
struct OperationRow {
  std::string key, kind, label;
  bool communication = false;
  double count[2] = {0, 0}, time_us[2] = {0, 0}, exposed_us[2] = {0, 0};
  double difference_us() const { return time_us[1] - time_us[0]; }
};
// Every operation of either run, the largest |time difference| first.
std::vector<OperationRow> operation_rows(const AppState& app);

}  // namespace shardlab::viewer::app
