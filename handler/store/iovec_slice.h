// SPDX-License-Identifier: Apache-2.0
// Cutting a byte range out of a scatter/gather list, without copying: used by
// the store (per-extent pieces of a caller's buffers) and by the SCSI layer
// (the data of one command out of the transport's iovecs).
#pragma once

#include <sys/uio.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace cowstore::store {

// Sets *out to the parts of `iov` covering bytes [offset, offset + len) of
// the whole list (fewer when the list is shorter); empty parts are left out.
inline void SliceIovec(std::span<const iovec> iov, uint64_t offset, uint64_t len, std::vector<iovec>* out) {
  out->clear();
  uint64_t pos = 0;
  for (const iovec& v : iov) {
    if (len == 0) break;
    const uint64_t end = pos + v.iov_len;
    if (end > offset) {
      const uint64_t skip = offset > pos ? offset - pos : 0;
      const uint64_t n = std::min<uint64_t>(v.iov_len - skip, len);
      if (n > 0) out->push_back(iovec{static_cast<char*>(v.iov_base) + skip, n});
      offset += n;
      len -= n;
    }
    pos = end;
  }
}

}  // namespace cowstore::store
