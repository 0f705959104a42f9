// mismatch_check.cpp: debug mode's header exchange (see mismatch_check.h).
#include "comm/mismatch_check.h"

#include "comm/watchdog.h"

#include <stdexcept>
#include <string_view>
#include <tuple>
#include <utility>

namespace shardlab {
namespace {

// The MPI tag of the headers. MpiComm's own point-to-point messages use other tags on the same
// MPI communicator, and collective calls never match point-to-point ones.
constexpr int kHeaderTag = 1;

enum class HeaderOp : int64_t { all_reduce, reduce_scatter, all_gather, broadcast, send, recv };

HeaderOp header_op(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::all_reduce: return HeaderOp::all_reduce;
    case CollectiveKind::reduce_scatter: return HeaderOp::reduce_scatter;
    case CollectiveKind::all_gather: return HeaderOp::all_gather;
    case CollectiveKind::broadcast: return HeaderOp::broadcast;
  }
  throw std::logic_error("header_op: unknown collective");
}

// What a member is about to do. All int64, so it travels as 6 x MPI_INT64_T.
struct Header {
  int64_t op = 0;      // HeaderOp
  int64_t reduce = 0;  // ReduceOp, for reductions
  int64_t dtype = 0;   // DType
  int64_t count = 0;   // elements per rank
  int64_t root = -1;   // broadcast
  int64_t seq = 0;     // collectives: the communicator's call number; send/recv: the sender's sendrecv number

  bool operator==(const Header&) const = default;

  // "all_reduce(count=100, f32, sum)", "broadcast(count=100, f32, root=0)", "send(count=5, f32)".
  std::string describe() const {
    static constexpr std::string_view kNames[] = {"all_reduce", "reduce_scatter", "all_gather",
                                                  "broadcast",  "send",           "recv"};
    const auto kind = static_cast<HeaderOp>(op);
    std::string s = std::string(kNames[op]) + "(count=" + std::to_string(count) + ", " +
                    std::string(dtype_name(static_cast<DType>(dtype)));
    if (kind == HeaderOp::all_reduce || kind == HeaderOp::reduce_scatter)
      s += ", " + std::string(reduce_op_name(static_cast<ReduceOp>(reduce)));
    if (kind == HeaderOp::broadcast) s += ", root=" + std::to_string(root);
    return s + ")";
  }
};
constexpr int kHeaderWords = sizeof(Header) / sizeof(int64_t);

}  // namespace

MismatchCheck::MismatchCheck(MPI_Comm mpi, std::string comm_name, std::vector<int> world_ranks)
    : mpi_(mpi), name_(std::move(comm_name)), world_ranks_(std::move(world_ranks)) {
  MPI_Comm_rank(mpi_, &rank_);
}

void MismatchCheck::require_usable() const {
  if (!broken_.empty())
    throw CollectiveMismatch("communicator " + name_ + " is unusable after a collective mismatch (" + broken_ + ")");
}

void MismatchCheck::collective(CollectiveKind kind, ReduceOp op, DType dtype, int64_t count, int root) {
  // Everyone sends its header to everyone and receives all of them before comparing, so every
  // member sees every difference and all of them throw (none is left waiting for data).
  require_usable();
  const int64_t seq = ++collectives_;
  const Header mine{.op = static_cast<int64_t>(header_op(kind)),
                    .reduce = static_cast<int64_t>(op),
                    .dtype = static_cast<int64_t>(dtype),
                    .count = count,
                    .root = root,
                    .seq = seq};
  const int n = static_cast<int>(world_ranks_.size());
  std::vector<Header> all(static_cast<size_t>(n));
  all[rank_] = mine;
  std::vector<MPI_Request> requests;
  for (int r = 0; r < n; ++r) {
    if (r == rank_) continue;
    MPI_Request recv_request, send_request;
    MPI_Irecv(&all[r], kHeaderWords, MPI_INT64_T, r, kHeaderTag, mpi_, &recv_request);
    MPI_Isend(&mine, kHeaderWords, MPI_INT64_T, r, kHeaderTag, mpi_, &send_request);
    requests.insert(requests.end(), {recv_request, send_request});
  }
  Watchdog::get().wait(requests.data(), static_cast<int>(requests.size()),
                       "--debug-collectives header exchange of call #" + std::to_string(seq) + " on " + name_);

  std::string differences;
  for (int r = 0; r < n; ++r) {
    if (all[r] == mine) continue;
    differences += ", " + who(r) + " issued " + all[r].describe();
    if (all[r].seq != seq) differences += " as its call #" + std::to_string(all[r].seq);
  }
  if (!differences.empty())
    mismatch("collective mismatch on communicator " + name_ + ", call #" + std::to_string(seq) + ": " + who(rank_) +
             " issued " + mine.describe() + differences);
}

void MismatchCheck::sendrecv(DType dtype, int to, int64_t send_count, int from, int64_t recv_count) {
  // Tell the receiver what we send and the sender what we expect, so both ends of a
  // mismatched transfer throw.
  require_usable();
  const int64_t seq = ++sendrecvs_;
  const Header sending{.op = static_cast<int64_t>(HeaderOp::send), .dtype = static_cast<int64_t>(dtype),
                       .count = send_count, .seq = seq};
  const Header expecting{.op = static_cast<int64_t>(HeaderOp::recv), .dtype = static_cast<int64_t>(dtype),
                         .count = recv_count, .seq = seq};
  std::vector<MPI_Request> sends;
  for (const auto& [peer, header] : {std::pair{to, &sending}, std::pair{from, &expecting}}) {
    if (peer < 0) continue;
    sends.emplace_back();
    MPI_Isend(header, kHeaderWords, MPI_INT64_T, peer, kHeaderTag, mpi_, &sends.back());
  }

  // From `from`, what it sends; from `to`, what it expects. A peer that issued a collective
  // sends one header, so stop at the first difference rather than wait for a second.
  std::string difference;
  for (const auto& [peer, expected, direction] :
       {std::tuple{from, HeaderOp::send, "from"}, std::tuple{to, HeaderOp::recv, "to"}}) {
    if (peer < 0) continue;
    Header theirs;
    MPI_Request request;
    MPI_Irecv(&theirs, kHeaderWords, MPI_INT64_T, peer, kHeaderTag, mpi_, &request);
    Watchdog::get().wait(request, "--debug-collectives header of sendrecv #" + std::to_string(seq) + " " +
                                      direction + " " + who(peer) + " on " + name_);
    const Header& mine = expected == HeaderOp::send ? expecting : sending;
    if (theirs.op == static_cast<int64_t>(expected) && theirs.dtype == mine.dtype && theirs.count == mine.count)
      continue;
    // The peer's side: "send(count=5, f32) to rank 1", or a collective with its call number.
    std::string theirs_text = theirs.describe();
    if (theirs.op == static_cast<int64_t>(HeaderOp::send))
      theirs_text += " to " + who(rank_);
    else if (theirs.op == static_cast<int64_t>(HeaderOp::recv))
      theirs_text += " from " + who(rank_);
    else
      theirs_text += " as its call #" + std::to_string(theirs.seq);
    difference = who(rank_) + " issued " + mine.describe() + " " + direction + " " + who(peer) + ", " + who(peer) +
                 " issued " + theirs_text;
    break;
  }
  // Headers are a few bytes, sent eagerly: these complete even when the peer never receives.
  Watchdog::get().wait(sends.data(), static_cast<int>(sends.size()), "--debug-collectives headers sent on " + name_);
  if (!difference.empty())
    mismatch("collective mismatch on communicator " + name_ + ", sendrecv #" + std::to_string(seq) + ": " +
             difference);
}

void MismatchCheck::mismatch(const std::string& message) {
  broken_ = message;
  throw CollectiveMismatch(message);
}

std::string MismatchCheck::who(int comm_rank) const {
  std::string s = "rank " + std::to_string(comm_rank);
  if (world_ranks_[comm_rank] != comm_rank) s += " (world rank " + std::to_string(world_ranks_[comm_rank]) + ")";
  return s;
}

}  // namespace shardlab
