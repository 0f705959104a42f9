// failure.h: a rank failing (Job::fail, in failure.cpp): every rank writes its flight record and
// its trace so far, rank 0 gathers their reports, names the collective some ranks never issued
// when the job timed out, writes summary.json and ends the job with status 1.
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace shardlab {

// From the flight records of the ranks that reported (rank -> record): the operation some ranks
// issued and others never did, and who. A group's collectives are numbered alike on all its
// members (#1, #2, ...), so the highest number any member issued is the one the others have
// not reached; a step's closing loss all-reduce is numbered by the step. Send/recvs are
// numbered per rank, and the chapters issue them only in rings, where every member issues as
// many: a member with fewer than those held in one is the one they wait for. A collective that
// only ranks past such a holding point issued is its consequence and is left out. "" when
// nothing is stuck that way (every rank timed out somewhere else, say).
std::string diagnose_hang(const std::map<int, nlohmann::json>& records);

}  // namespace shardlab
