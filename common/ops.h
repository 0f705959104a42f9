// ops.h: device ops, each a Kernel (name, FLOPs, bytes, what it reads and writes) plus its math.
//
// Every op is launched through Device::launch, so the sim charges it with the cost model and
// the race check sees its accesses; under --compute skip the math is not run. The CPU bodies
// are plain loops the compiler vectorizes.
#pragma once

#include "device.h"

namespace shardlab::ops {

// t[i] = value
void fill(Device& dev, Stream& s, const Tensor& t, float value);
// dst[i] += src[i]  (the reduction step of a hand-written all-reduce)
void add_(Device& dev, Stream& s, const Tensor& dst, const Tensor& src);
// t[i] *= factor
void scale_(Device& dev, Stream& s, const Tensor& t, float factor);

}  // namespace shardlab::ops
