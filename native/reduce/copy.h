// Copies for data that will not be read again soon by this core.
#pragma once

#include <cstddef>

namespace ring {

// memcpy that writes large blocks with non-temporal (streaming) stores:
// the destination's cache lines are not read first and do not displace the
// cache, which saves a third of the memory traffic of a plain copy into a
// buffer that is not cached. Small copies are plain memcpy. Ends with a
// store fence, so the bytes are visible to other threads afterwards.
void stream_copy(void* dst, const void* src, size_t len);

}  // namespace ring
