// SPDX-License-Identifier: Apache-2.0
#include "handler/scsi/lun_directory.h"

#include <algorithm>

#include "handler/scsi/logical_unit.h"

namespace cowstore::scsi {

LunDirectory& LunDirectory::Global() {
  static LunDirectory* directory = new LunDirectory();  // never destroyed: outlives every LU
  return *directory;
}

void LunDirectory::Register(const std::shared_ptr<LogicalUnit>& lu) {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.push_back(Entry{lu.get(), lu->naa(), lu});
}

void LunDirectory::Unregister(const LogicalUnit* lu) {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(entries_, [lu](const Entry& e) { return e.key == lu; });
}

std::shared_ptr<LogicalUnit> LunDirectory::Resolve(const Naa& naa,
                                                   const LogicalUnit& requester) const {
  std::shared_ptr<LogicalUnit> self;
  std::shared_ptr<LogicalUnit> match;
  size_t matches = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Entry& e : entries_) {
      if (e.naa != naa) continue;
      std::shared_ptr<LogicalUnit> lu = e.lu.lock();
      if (!lu) continue;  // being destroyed
      ++matches;
      if (e.key == &requester) {
        self = std::move(lu);
      } else {
        match = std::move(lu);
      }
    }
  }
  // Unknown or ambiguous: with two LUs behind one NAA (a clone that kept its
  // serial) the initiator's intent cannot be known, not even "itself".
  if (matches != 1) return nullptr;
  if (self) return self;  // an LU always reaches itself
  const std::string& group = requester.config().copy_group;
  if (group.empty() || match->config().copy_group != group) return nullptr;
  return match;
}

size_t LunDirectory::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

}  // namespace cowstore::scsi
