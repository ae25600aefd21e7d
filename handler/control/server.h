// SPDX-License-Identifier: Apache-2.0
// The control socket a handler process serves for each pool it holds open,
// so that cowctl can create, clone, snapshot, resize and delete LUNs, read
// space and counters, and run the checker while tcmu-runner serves other
// LUNs of the pool (the pool's flock keeps cowctl from opening it itself).
//
// The plugin starts one Server when it opens the first LUN of a pool and
// destroys it before closing the pool. Protocol: protocol.h and
// docs/design/cowctl.md.
//
// Thread safety: a background thread accepts connections and serves each on
// its own thread, at most kMaxConnections at once; a connection beyond that
// gets an immediate `error code=Busy` reply and is closed (the accept loop
// never blocks on a client). So a long request (an import, an export, a
// check) or an idle client does not hold up the other cowctl commands
// against the pool. Requests of different connections run concurrently
// against the (thread-safe) Pool and call ServerOptions::counters
// concurrently; each connection's requests are answered in order. No
// exception leaves the server; SIGPIPE is never raised (MSG_NOSIGNAL).
// Progress lines are sent with MSG_DONTWAIT from the store's progress
// callback (under a per-request mutex, whatever thread calls it), so a client
// that does not read cannot stall the pool; the final reply is sent with a
// send timeout (kSendTimeoutMs) after the work is done.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "handler/control/image.h"
#include "handler/store/pool.h"

namespace cowstore::control {

// Per-LUN counters the handler keeps (names are free-form; cowctl's top
// knows: commands, read_bytes, write_bytes, ats, ats_miscompares, xcopy,
// clone_blocks, copy_blocks, write_same_blocks, unmap_blocks; vaai status
// shows every one).
struct LunCounters {
  std::string lun;
  std::vector<std::pair<std::string, uint64_t>> counters;
};
// Called on connection threads, possibly several at once; must be
// thread-safe and must not throw.
using CountersFn = std::function<std::vector<LunCounters>()>;
// Rolls `lun` back to `snapshot` in the handler: for a LUN it serves, the
// SCSI layer drains the LU, swaps and raises the unit attentions
// (scsi::LogicalUnit::Rollback); otherwise the pool's RollbackLun. Called on
// connection threads; must be thread-safe and must not throw.
using RollbackFn = std::function<store::Status(const std::string& lun, const std::string& snapshot)>;

struct ServerOptions {
  std::string run_dir = "/run/cowstore";  // env COWSTORE_RUN_DIR overrides the default
  std::string pool_name;                  // names the socket: <run_dir>/<pool_name>.sock
  // The pool's file or device: import and export refuse it as an image
  // (a stat() at Start; empty in tests that have no such guard to test).
  std::string pool_path;
  CountersFn counters;                    // may be empty
  RollbackFn rollback;                    // empty: Pool::RollbackLun (no LU to tell)
};

// How many connections are served at once, each on its own thread. Bounded
// because the server runs inside the handler process next to its SCSI
// workers: a client looping on connect (or many stuck ones) must not make it
// spawn threads without limit. 8 leaves room for a long import or check, a
// `cowctl top` and a few scripts at the same time.
inline constexpr int kMaxConnections = 8;

class Server {
 public:
  // Binds the socket (replacing a stale one) and starts serving. `pool` must
  // outlive the server.
  static store::Result<std::unique_ptr<Server>> Start(store::Pool& pool, ServerOptions options);
  // Stops accepting, wakes every connection waiting for its next request
  // (they are closed), waits for every connection thread and removes the
  // socket file. A request already running (an import, an export, a check)
  // is waited for until it completes (or, for an import or export, until
  // its client hangs up), and its reply is still sent (bounded by
  // kSendTimeoutMs): so never destroy a Server while holding a lock that
  // other work needs.
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  const std::string& path() const { return path_; }

  // One request line -> the whole reply (exposed for tests). A request with
  // progress=1 to lun-import, lun-export, check or scrub gets "progress done= total="
  // lines before its status line: Serve() sends them while the work runs
  // (never blocking: a line the socket cannot take at once is dropped);
  // without a socket (fd < 0, tests) they are collected at the front of the
  // returned reply. An import or export stops (and leaves nothing) when the
  // peer of `progress_fd` closes or shuts down its end of the connection:
  // that is how cowctl's Ctrl-C reaches the handler.
  std::string Handle(const std::string& line, int progress_fd = -1);

 private:
  Server(store::Pool& pool, ServerOptions options, std::string path, int listen_fd, int stop_fd[2]);
  void Run();
  void Accepted(int fd);
  void Serve(int fd);

  struct Impl;
  store::Pool& pool_;
  ServerOptions options_;
  std::string path_;
  int listen_fd_;
  int stop_rd_, stop_wr_;
  PoolFile pool_file_;
  std::unique_ptr<Impl> impl_;
};

// Default run dir honouring COWSTORE_RUN_DIR.
std::string DefaultRunDir();

}  // namespace cowstore::control
