// SPDX-License-Identifier: Apache-2.0
// Ctrl-C (SIGINT) and SIGTERM during a long copy (lun import, lun export):
// the first one asks the copy to stop, so that it rolls back (an import
// deletes its partial LUN, an export removes its temporary file) and cowctl
// says so; a second one ends cowctl at once (the default action, restored
// by SA_RESETHAND). Copies done by the handler are stopped by shutting down
// the sending side of the control connection (control::Client::Call).
#pragma once

namespace cowstore::cowctl {

class Interruptible {
 public:
  Interruptible();  // installs the handlers (without SA_RESTART: reads return EINTR)
  ~Interruptible();  // restores the previous ones
  Interruptible(const Interruptible&) = delete;
  Interruptible& operator=(const Interruptible&) = delete;

  // A signal arrived since the (last) Interruptible was made.
  static bool interrupted();
};

}  // namespace cowstore::cowctl
