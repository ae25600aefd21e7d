// SPDX-License-Identifier: Apache-2.0
// The registry of open LogicalUnits, so that EXTENDED COPY can resolve an
// identification CSCD (0xE4, NAA type 6) to a LogicalUnit.
//
// LogicalUnit::Create registers each LU; its destructor unregisters it. The
// plugin uses the process-wide Global() directory; tests make their own.
//
// Access rule (TCMU carries no initiator identity, so the copy manager cannot
// check ACLs; see CVE-2020-28374 and CVE-2021-3139): an LU always reaches
// itself; it reaches a different LU only if both have the same non-empty
// copy group. Everything else is "not reachable" (0x0D/0x02), exactly like a
// NAA nobody has. A NAA registered by more than one LU (a clone that kept
// its serial) is ambiguous and also not reachable, except that an LU still
// reaches itself.
//
// Thread safety: all methods are safe for concurrent use.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "handler/scsi/naa.h"

namespace cowstore::scsi {

class LogicalUnit;

class LunDirectory {
 public:
  LunDirectory() = default;
  LunDirectory(const LunDirectory&) = delete;
  LunDirectory& operator=(const LunDirectory&) = delete;

  // The directory the plugin uses (one per process).
  static LunDirectory& Global();

  void Register(const std::shared_ptr<LogicalUnit>& lu);
  void Unregister(const LogicalUnit* lu);

  // The LU `requester` may use as copy source/destination for `naa`, or null
  // when none is reachable under the access rule above. The returned
  // shared_ptr keeps the LU alive for the duration of the copy.
  std::shared_ptr<LogicalUnit> Resolve(const Naa& naa, const LogicalUnit& requester) const;

  size_t size() const;

 private:
  struct Entry {
    const LogicalUnit* key;
    Naa naa;
    std::weak_ptr<LogicalUnit> lu;
  };
  mutable std::mutex mu_;
  std::vector<Entry> entries_;  // guarded by mu_
};

}  // namespace cowstore::scsi
