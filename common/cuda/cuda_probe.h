// cuda_probe.h: is there a GPU? Answered by the CUDA runtime when the build has CUDA, else 0.
#pragma once

#include <string>

namespace shardlab {

// Number of CUDA devices visible to this process; 0 without CUDA or without a driver.
int cuda_device_count();
// Why there are none ("built without CUDA", the runtime's error string, ...); empty when some.
std::string cuda_unavailable_reason();

}  // namespace shardlab
