// Copies for data that will not be read again soon by this core.
#pragma once

#include <cstddef>

namespace ring {

// memcpy that writes large blocks with non-temporal (streaming) stores:
// the destination's cache lines are not read first and do not displace the
// cache, which saves a third of the memory traffic of a plain copy into a
// buffer that is not cached. Copies under kMinStreamBytes are plain
// memcpy. Ends with a store fence, so the bytes are visible to other
// threads afterwards.
constexpr size_t kMinStreamBytes = 16 << 10;
void stream_copy(void* dst, const void* src, size_t len);

// The streaming stores of stream_copy whatever the length, without the
// fence: for one copy made of many pieces (a buffer in parts), the caller
// decides by the whole copy's length and calls stream_fence() once after
// the last piece.
void stream_store(void* dst, const void* src, size_t len);
void stream_fence();

}  // namespace ring
