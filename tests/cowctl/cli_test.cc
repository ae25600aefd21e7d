// SPDX-License-Identifier: Apache-2.0
// Drives the real cowctl binary against temporary pools, a fake configfs
// tree and a fake /proc, the way an administrator would.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>
#include <utility>

#include "handler/control/client.h"
#include "handler/control/protocol.h"
#include "handler/control/server.h"
#include "handler/store/env.h"
#include "handler/store/pool.h"
#include "handler/store/superblock_v3.h"
#include "tests/control/served_pool.h"
#include "tests/cowctl/fake_tree.h"
#include "tests/cowctl/prometheus_check.h"
#include "tests/cowctl/superblock_patch.h"
#include "tools/cowctl/cmd_common.h"
#include "tools/cowctl/commands.h"
#include "tools/cowctl/lio.h"
#include "tools/cowctl/util.h"

namespace cowstore::cowctl {
namespace {

using testing::Exists;
using testing::FakeHost;
using testing::ReadText;
using testing::WriteText;

struct CmdResult {
  int rc;
  std::string out, err;
};

class Cli : public ::testing::Test {
 protected:
  FakeHost host;
  std::string pools = host.dir.path() + "/pools";
  std::string run = host.dir.path() + "/run";

  CmdResult Cowctl(const std::string& args) {
    std::string o = host.dir.path() + "/out", e = host.dir.path() + "/err";
    std::string cmd = std::string("COWSTORE_POOL_DIR=") + pools + " COWSTORE_RUN_DIR=" + run + " " + COWCTL_BINARY +
                      " --configfs-root " + host.configfs + " --proc-root " + host.proc + " " + args + " >" + o +
                      " 2>" + e + " </dev/null";
    int st = std::system(cmd.c_str());
    return {WEXITSTATUS(st), ReadText(o), ReadText(e)};
  }
  // The same, run by sh after `before` (e.g. "timeout 30", or limits to set).
  CmdResult Cowctl(const std::string& args, const std::string& before) {
    std::string o = host.dir.path() + "/out", e = host.dir.path() + "/err";
    std::string cmd = before + " env COWSTORE_POOL_DIR=" + pools + " COWSTORE_RUN_DIR=" + run + " " + COWCTL_BINARY +
                      " --configfs-root " + host.configfs + " --proc-root " + host.proc + " " + args + " >" + o +
                      " 2>" + e + " </dev/null";
    int st = std::system(cmd.c_str());
    return {WEXITSTATUS(st), ReadText(o), ReadText(e)};
  }
  // Starts cowctl in the background (its stdout and stderr to files);
  // returns its pid.
  pid_t Spawn(const std::string& args, std::string* out_file, std::string* err_file) {
    *out_file = host.dir.path() + "/bg.out";
    *err_file = host.dir.path() + "/bg.err";
    std::string cmd = "exec env COWSTORE_POOL_DIR=" + pools + " COWSTORE_RUN_DIR=" + run + " " + COWCTL_BINARY +
                      " --configfs-root " + host.configfs + " --proc-root " + host.proc + " " + args + " >" +
                      *out_file + " 2>" + *err_file + " </dev/null";
    pid_t pid = ::fork();
    if (pid == 0) {
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    return pid;
  }
  // Succeeds or fails the test with cowctl's stderr.
  std::string Ok(const std::string& args) {
    CmdResult r = Cowctl(args);
    EXPECT_EQ(r.rc, 0) << "cowctl " << args << "\n" << r.err;
    return r.out;
  }
  // Fails with a one-line error containing `want`.
  void Err(const std::string& args, const std::string& want, int rc = 1) {
    CmdResult r = Cowctl(args);
    EXPECT_EQ(r.rc, rc) << "cowctl " << args << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find(want), std::string::npos) << "cowctl " << args << "\nstderr: " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.err.rfind("cowctl: ", 0), 0u) << r.err;
  }
  // pool create's defaults: format 3, a 64 KiB AU, a 4 KiB grain.
  void Pool(const std::string& name = "tank", const std::string& size = "1G") {
    Ok("pool create " + name + " --size " + size);
  }
  // For what is about format 2's layout or its AU-sized units: asked for.
  void Format2Pool(const std::string& name = "tank", const std::string& size = "1G") {
    Ok("pool create " + name + " --size " + size + " --allocation-unit 64K --grain 64K");
  }
  // The naa.6001405... identifier of backstore `name`, from its unit serial.
  std::string NaaOf(const std::string& name) {
    for (const auto& hba : std::filesystem::directory_iterator(host.T("core"))) {
      std::string serial = hba.path().string() + "/" + name + "/wwn/vpd_unit_serial";
      if (Exists(serial)) return NaaName(ReadText(serial));
    }
    ADD_FAILURE() << "no backstore " << name;
    return "";
  }
  std::string Bs(const std::string& name = "tank-vm1", int hba = 0) {
    return host.T("core/user_" + std::to_string(hba) + "/" + name);
  }
};

// ---------------------------------------------------------------- usage

TEST_F(Cli, HelpOnEverySubcommand) {
  for (const char* sub : {"", "pool", "pool create", "pool list", "pool show", "pool check", "pool grow",
                          "pool delete", "pool upgrade", "lun", "lun create", "lun list", "lun show", "lun resize",
                          "lun delete", "lun clone", "lun snapshot", "lun import", "lun export", "backstore create",
                          "backstore list", "backstore delete", "export iscsi", "export loop", "export list",
                          "unexport", "vaai status", "top", "metrics", "save", "restore", "ls"}) {
    CmdResult r = Cowctl(std::string(sub) + " --help");
    EXPECT_EQ(r.rc, 0) << sub;
    EXPECT_NE(r.out.find("Usage:"), std::string::npos) << sub;
  }
}

TEST_F(Cli, BadUsageIsOneLineAndExit2) {
  Err("", "A subcommand is required", 2);
  Err("frobnicate", "", 2);
  Err("lun create tank/vm1", "--size is required", 2);
  Err("lun create tank/vm1 --size 1G --block-size x", "block-size", 2);
}

TEST_F(Cli, AnUnknownCommandIsNamedAsUnknown) {
  Err("frobnicate", "unknown command 'frobnicate' (one of: pool, lun, backstore, export, unexport, vaai, top, metrics, "
                    "save, restore, ls; see 'cowctl --help')", 2);
  Err("--json --pool-dir " + pools + " pool frob tank",
      "unknown subcommand 'frob' of 'cowctl pool' (one of: create, list, show, check, scrub, grow, delete, upgrade; "
      "see 'cowctl pool --help')", 2);
  Err("lun resiz tank/vm1 --size 2G", "unknown subcommand 'resiz' of 'cowctl lun'", 2);
  Err("export nfs tank/vm1", "unknown subcommand 'nfs' of 'cowctl export' (one of: iscsi, loop, list;", 2);
  // A missing subcommand and extra arguments keep CLI11's words.
  Err("pool", "A subcommand is required", 2);
  Err("lun show tank/vm1 extra", "extra", 2);
}

// As a non-root user (nobody): what fails for want of root says so, not
// "not found" or "I/O error: check the device and dmesg".
TEST_F(Cli, PermissionDeniedSaysRunAsRoot) {
  Pool();
  Ok("lun create tank/vm1 --size 8M");
  std::filesystem::permissions(host.dir.path(), std::filesystem::perms(0755));
  auto as_nobody = [&](const std::string& args) {
    std::string e = host.dir.path() + "/nobody.err";
    std::string cmd = "COWSTORE_POOL_DIR=" + pools + " COWSTORE_RUN_DIR=" + run +
                      " setpriv --reuid=65534 --regid=65534 --clear-groups " + COWCTL_BINARY + " --configfs-root " +
                      host.configfs + " --proc-root " + host.proc + " " + args + " >/dev/null 2>" + e + " </dev/null";
    int st = std::system(cmd.c_str());
    return std::make_pair(WEXITSTATUS(st), ReadText(e));
  };
  for (const char* args : {"pool show tank", "lun create tank/vm2 --size 8M", "pool create other --size 1G",
                           "lun show tank/vm1", "pool upgrade tank --yes", "save " }) {
    std::string a = args;
    if (a == "save ") a += host.dir.path() + "/c.yaml";
    auto [rc, err] = as_nobody(a);
    EXPECT_EQ(rc, 1) << a << ": " << err;
    EXPECT_NE(err.find("(run cowctl as root)"), std::string::npos) << a << ": " << err;
    EXPECT_EQ(err.find("dmesg"), std::string::npos) << a << ": " << err;
  }
  EXPECT_FALSE(Exists(pools + "/other"));
}

// ---------------------------------------------------------------- pools

TEST_F(Cli, PoolLifecycle) {
  Pool();
  EXPECT_NE(Ok("pool list").find("tank"), std::string::npos);
  std::string j = Ok("pool show tank --json");
  EXPECT_NE(j.find("\"size\": 1073741824"), std::string::npos) << j;
  EXPECT_NE(j.find("\"allocation_unit\": 65536"), std::string::npos) << j;
  EXPECT_NE(j.find("\"saved_by_clones\""), std::string::npos);
  EXPECT_NE(Ok("pool check tank").find("clean"), std::string::npos);
  Ok("pool delete tank");
  EXPECT_FALSE(Exists(pools + "/tank"));
  EXPECT_NE(Ok("pool list").find("no pools"), std::string::npos);
}

TEST_F(Cli, PoolCreateErrors) {
  Pool();
  Err("pool create tank --size 1G", "already exists");
  Err("pool create .x --size 1G", "invalid pool name");
  Err("pool create p2", "needs --size");
  Err("pool create p2 --size 1G --allocation-unit 3M", "power of two");
  Err("pool create p2 --size 1G --allocation-unit 2M", "power of two");
  Err("pool create p2 --size 1G --soft-threshold 120", "percentage");
  Err("pool create p2 --size lots", "invalid size 'lots'");
  Err("pool create p2 --device /dev/does-not-exist", "does not exist");
  WriteText(host.dir.path() + "/plain", "x");
  Err("pool create p2 --device " + host.dir.path() + "/plain", "not a block device");
  Err("pool create p2 --size 1G --file relative.pool", "absolute path");
  EXPECT_FALSE(Exists(pools + "/p2"));
}

TEST_F(Cli, FailedPoolCreateLeavesNothing) {
  Err("pool create tiny --size 1K", "pool too small");
  EXPECT_FALSE(Exists(pools));  // not even the pool directory it would have made
  std::string f = host.dir.path() + "/tiny.pool";
  Err("pool create tiny --size 1K --file " + f, "pool too small");
  EXPECT_FALSE(Exists(pools + "/tiny"));
  EXPECT_FALSE(Exists(f));
  EXPECT_FALSE(Exists(pools));
  WriteText(f, "precious");
  Err("pool create tiny --size 1G --file " + f, "already exists");
  EXPECT_EQ(ReadText(f), "precious");
}

// The format a pool's first superblock slot says it has (0: none), read
// through the envelope every format shares.
uint32_t FormatOf(const std::string& path) {
  std::string slot(store::kSuperblockSlot, '\0');  // only it: a pool file is large
  std::ifstream in(path, std::ios::binary);
  in.read(slot.data(), static_cast<std::streamsize>(slot.size()));
  slot.resize(static_cast<size_t>(in.gcount()));
  return store::SuperblockEnvelopeVersion(slot.data(), slot.size());
}

TEST_F(Cli, AGrainBelowTheAllocationUnitMakesAFormat3Pool) {
  std::string made = Ok("pool create g --size 256M --allocation-unit 64K --grain 4K");
  EXPECT_NE(made.find("(256 MiB, allocation unit 64.0 KiB, sharing unit 4.00 KiB, format 3)"), std::string::npos)
      << made;
  EXPECT_EQ(FormatOf(pools + "/g"), 3u);
  std::string j = Ok("pool show g --json");
  EXPECT_NE(j.find("\"allocation_unit\": 65536,\n  \"grain\": 4096,\n"), std::string::npos) << j;
  EXPECT_NE(j.find("\"format\": 3,"), std::string::npos) << j;
  EXPECT_NE(Ok("pool show g").find("\nsharing unit:    4.00 KiB (format 3)\n"), std::string::npos);
  EXPECT_NE(Ok("pool list --json").find("\"grain\": 4096,"), std::string::npos);
  EXPECT_NE(Ok("pool create g2 --size 256M --allocation-unit 64K --grain 4K --json").find("\"grain\": 4096"),
            std::string::npos);
  Ok("lun create g/vm1 --size 8M --block-size 4096");
  Ok("lun clone g/vm1 vm2");
  EXPECT_NE(Ok("pool check g").find("clean"), std::string::npos);
}

// Without --allocation-unit or --grain: a 64 KiB AU and a 4 KiB grain, a
// format 3 pool. An --allocation-unit alone keeps the 4 KiB grain.
TEST_F(Cli, ANewPoolIsFormat3WithA64KAllocationUnitAndA4KGrainByDefault) {
  std::string made = Ok("pool create d --size 256M");
  EXPECT_NE(made.find("(256 MiB, allocation unit 64.0 KiB, sharing unit 4.00 KiB, format 3) at "), std::string::npos)
      << made;
  EXPECT_EQ(FormatOf(pools + "/d"), 3u);
  EXPECT_NE(Ok("pool show d --json").find("\"allocation_unit\": 65536,\n  \"grain\": 4096,\n"), std::string::npos);
  made = Ok("pool create e --size 256M --allocation-unit 1M");
  EXPECT_NE(made.find("(256 MiB, allocation unit 1.00 MiB, sharing unit 4.00 KiB, format 3) at "), std::string::npos)
      << made;
  EXPECT_EQ(FormatOf(pools + "/e"), 3u);
  // --help says the defaults, and that the grain at the AU is format 2.
  std::string help = Ok("pool create --help");
  EXPECT_NE(help.find("--allocation-unit TEXT=64K"), std::string::npos) << help;
  EXPECT_NE(help.find("--grain TEXT=4K"), std::string::npos) << help;
  EXPECT_NE(help.find("--allocation-unit 1M --grain 1M"), std::string::npos) << help;
}

// A grain equal to the allocation unit is THE way to make a format 2 pool
// (what every pool was before format 3, and what an older cowstore reads):
// the AU its sharing unit.
TEST_F(Cli, AGrainEqualToTheAllocationUnitMakesAFormat2Pool) {
  for (auto [au, text, bytes] : {std::tuple<const char*, const char*, const char*>{"64K", "64.0 KiB", "65536"},
                                 {"1M", "1.00 MiB", "1048576"}}) {
    SCOPED_TRACE(au);
    std::string made = Ok(std::string("pool create p --size 256M --allocation-unit ") + au + " --grain " + au);
    EXPECT_NE(made.find(std::string("(256 MiB, allocation unit ") + text + ", sharing unit " + text + ") at "),
              std::string::npos)
        << made;
    EXPECT_EQ(FormatOf(pools + "/p"), 2u);
    EXPECT_NE(Ok("pool show p --json")
                  .find(std::string("\"allocation_unit\": ") + bytes + ",\n  \"grain\": " + bytes + ",\n"),
              std::string::npos);
    EXPECT_NE(Ok("pool show p").find(std::string("\nsharing unit:    ") + text +
                                     " (the allocation unit, format 2: 'cowctl pool upgrade p' shares at 4.00 KiB)\n"),
              std::string::npos);
    EXPECT_NE(Ok("pool show p --json").find("\"format\": 2,"), std::string::npos);
    Ok("pool delete p");
  }
}

// Too small for the format asked: the minimum, in bytes, and (format 3)
// what format 2 at the same AU would need; nothing made. The minimum
// itself works.
TEST_F(Cli, ATooSmallPoolIsRefusedWithItsMinimumAndLeavesNothing) {
  std::string f = host.dir.path() + "/small.pool";
  Err("pool create s --size 16M",
      "pool too small: --size 16M is 16.0 MiB (16777216 bytes); a format 3 pool with an allocation unit of 64.0 KiB "
      "needs at least 16.6 MiB (17432576 bytes: its metadata, a 16 MiB journal and 8 allocation units of data); a "
      "format 2 pool (--grain 64.0 KiB, the allocation unit) needs 16.6 MiB (17367040 bytes)");
  Err("pool create s --size 17432575 --file " + f, "needs at least 16.6 MiB (17432576 bytes");
  Err("pool create s --size 20M --allocation-unit 1M --grain 1M",
      "pool too small: --size 20M is 20.0 MiB (20971520 bytes); a format 2 pool with an allocation unit of 1.00 MiB "
      "needs at least 25.0 MiB (26214400 bytes: its metadata, a 16 MiB journal and 8 allocation units of data)");
  EXPECT_FALSE(Exists(pools));
  EXPECT_FALSE(Exists(f));
  // One AU less works at format 2, the minimum at format 3.
  Ok("pool create s2 --size 17367040 --grain 64K");
  EXPECT_EQ(FormatOf(pools + "/s2"), 2u);
  Ok("pool create s3 --size 17432576 --file " + f);
  EXPECT_EQ(FormatOf(f), 3u);
  EXPECT_NE(Ok("pool check s3").find("clean"), std::string::npos);
}

// The cell of a rendered Table (output.h: left-aligned columns, two spaces
// apart) in the row whose first cell is `row`, under `header`.
std::string Cell(const std::string& table, const std::string& row, const std::string& header) {
  std::istringstream in(table);
  std::string head, line;
  std::getline(in, head);
  const size_t from = head.find(header);
  if (from == std::string::npos) return "no column " + header;
  const size_t to = head.find_first_not_of(' ', from + header.size());  // where the next column starts
  while (std::getline(in, line)) {
    if (line.rfind(row + " ", 0) != 0) continue;
    std::string cell = line.substr(std::min(from, line.size()), to == std::string::npos ? std::string::npos : to - from);
    return cell.substr(0, cell.find_last_not_of(' ') + 1);
  }
  return "no row " + row;
}

// The table says what the JSON's "grain" says: the grain at format 3, the
// AU (what a format 2 pool shares at) at format 2; "?" for a pool it cannot
// open, with every other cell still under its own header.
TEST_F(Cli, PoolListShowsEachPoolsSharingUnit) {
  Ok("pool create fine --size 256M --allocation-unit 64K --grain 4K");
  Ok("pool create coarse --size 256M --allocation-unit 64K --grain 64K");
  ::symlink("/nonexistent/device", (pools + "/gone").c_str());
  std::string list = Ok("pool list");
  const std::string head = list.substr(0, list.find('\n'));
  EXPECT_LT(head.find("SIZE"), head.find("SHARING UNIT")) << head;  // next to the size, as in pool show
  EXPECT_LT(head.find("SHARING UNIT"), head.find("ALLOCATED")) << head;
  EXPECT_EQ(Cell(list, "fine", "SHARING UNIT"), "4.00 KiB") << list;
  EXPECT_EQ(Cell(list, "coarse", "SHARING UNIT"), "64.0 KiB") << list;
  EXPECT_EQ(Cell(list, "gone", "SHARING UNIT"), "?") << list;
  EXPECT_EQ(Cell(list, "gone", "LUNS"), "?") << list;
  EXPECT_EQ(Cell(list, "gone", "OPEN BY").rfind("error: pool 'gone' points at a missing device", 0), 0u) << list;
}

TEST_F(Cli, AnInvalidGrainIsRefusedWithTheRuleAndMakesNothing) {
  std::string f = host.dir.path() + "/g.pool";
  Err("pool create g --size 1G --grain 3K", "invalid --grain 3K for an allocation unit of 64.0 KiB: "
                                             "grain of 3072 bytes is not a power of two");
  Err("pool create g --size 1G --grain 256 --file " + f,
      "grain of 256 bytes is below the smallest LUN block size (512)");
  Err("pool create g --size 1G --allocation-unit 1M --grain 2M", "grain of 2097152 bytes is larger than the allocation unit");
  Err("pool create g --size 1G --allocation-unit 64K --grain 128K", "is larger than the allocation unit");
  Err("pool create g --size 1G --grain fine", "invalid grain 'fine'");
  // Refused before the pool directory, its entry or the file is made.
  EXPECT_FALSE(Exists(pools));
  EXPECT_FALSE(Exists(f));
}

// Format 3's point: after a 4 KiB write, a clone owns 4 KiB, where at
// format 2 it owns the whole AU it wrote into. The data goes in through
// cowctl (import) and comes out through it (export); cowctl writes into no
// LUN, so the store writes the clone's 4 KiB.
TEST_F(Cli, AFormat3ClonePaysForTheGrainsWrittenNotAWholeAllocationUnit) {
  std::string img = host.dir.path() + "/disk.img";
  WriteText(img, std::string(256 << 10, 'A'));  // 4 AUs of 64 KiB
  for (auto [grain, owned] : {std::pair<const char*, const char*>{"4K", "4096"}, {"64K", "65536"}}) {
    SCOPED_TRACE(grain);
    std::filesystem::remove_all(pools);
    Ok(std::string("pool create g --size 256M --allocation-unit 64K --grain ") + grain);
    Ok("lun import g/src --from " + img);
    Ok("lun clone g/src c");
    {
      auto p = store::Pool::Open(store::DefaultEnv(), pools + "/g");
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      auto l = (*p)->OpenLun("c").value();
      std::string b(4096, 'b');
      ASSERT_TRUE(l->Write(8, 8, b.data(), store::Durability::kDurable).ok());  // bytes 4K..8K
      l.reset();
      ASSERT_TRUE((*p)->Close().ok());
    }
    std::string c = Ok("lun show g/c --json");
    EXPECT_NE(c.find("\"exclusive\": " + std::string(owned) + ",\n"), std::string::npos) << c;
    std::string back = host.dir.path() + "/c.img";
    Ok("lun export g/c --to " + back + " --force");
    EXPECT_EQ(ReadText(back), std::string(4096, 'A') + std::string(4096, 'b') + std::string((256 << 10) - 8192, 'A'));
    Ok("lun export g/src --to " + back + " --force");
    EXPECT_EQ(ReadText(back), std::string(256 << 10, 'A'));
    EXPECT_NE(Ok("pool check g").find("clean"), std::string::npos);
  }
}

TEST_F(Cli, PoolOnAnotherFileIsLinked) {
  std::string f = host.dir.path() + "/elsewhere.pool";
  Ok("pool create far --size 256M --file " + f);
  EXPECT_TRUE(Exists(f));
  EXPECT_NE(Ok("pool show far").find("256 MiB"), std::string::npos);
  Ok("pool delete far");
  EXPECT_FALSE(Exists(f));
}

TEST_F(Cli, PoolErrors) {
  Err("pool show nope", "pool 'nope' not found");
  Err("pool check nope", "not found");
  Pool();
  Err("pool grow tank --size 512M", "only grows");
  Ok("lun create tank/vm1 --size 10M");
  Err("pool delete tank", "still holds 1 LUNs");
  Ok("pool delete tank --force");
  ::symlink("/nonexistent/device", (pools + "/ghost").c_str());
  Err("pool show ghost", "missing device");
}

TEST_F(Cli, PoolGrow) {
  Pool();
  EXPECT_NE(Ok("pool grow tank --size 2G").find("from 1.00 GiB to 2.00 GiB"), std::string::npos);
}

TEST_F(Cli, PoolCheckRepairDropsOnlyWhatItListsAndOnlyWhenTold) {
  Format2Pool();  // its journal at 64 KiB, in records this test knows
  Ok("lun create tank/vm1 --size 10M");
  Ok("lun create tank/vm2 --size 10M");
  {
    // Flip a bit in the first journal record's CRC (the journal starts at 64 KiB).
    int fd = ::open((pools + "/tank").c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    char b;
    ASSERT_EQ(::pread(fd, &b, 1, 65539), 1);
    b ^= 0x20;
    ASSERT_EQ(::pwrite(fd, &b, 1, 65539), 1);
    ::close(fd);
  }
  CmdResult r = Cowctl("pool check tank");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("journal record"), std::string::npos) << r.out;
  // No terminal and no --yes: nothing is dropped.
  Err("pool check tank --repair", "confirm with --yes");
  EXPECT_EQ(Cowctl("pool check tank").rc, 1);
  std::string out = Ok("pool check tank --repair --yes");
  // Each cowctl run checkpoints at open, so the journal held only vm2's
  // creation (and the clean-close mark vouching for it).
  EXPECT_NE(out.find("gives up these 1 committed operation(s)"), std::string::npos) << out;
  EXPECT_NE(out.find("damaged, contents unknown"), std::string::npos) << out;
  EXPECT_NE(out.find("clean"), std::string::npos) << out;
  std::string luns = Ok("lun list tank");
  EXPECT_NE(luns.find("vm1"), std::string::npos) << luns;
  EXPECT_EQ(luns.find("vm2"), std::string::npos) << luns;
  std::string again = Ok("pool check tank --repair");  // clean: nothing to repair
  EXPECT_NE(again.find("clean"), std::string::npos) << again;
  EXPECT_EQ(again.find("repaired"), std::string::npos) << again;
}

// ---------------------------------------------------------------- pool upgrade

// Writes `data` into LUN `lun` of the pool at `path` at block `lba` through
// the store (cowctl writes into no LUN), as a guest would.
void WriteLun(const std::string& path, const std::string& lun, uint64_t lba, const std::string& data) {
  auto p = store::Pool::Open(store::DefaultEnv(), path);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto l = (*p)->OpenLun(lun);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  ASSERT_TRUE((*l)->Write(lba, data.size() / 512, data.data(), store::Durability::kDurable).ok());
  l.value().reset();
  ASSERT_TRUE((*p)->Close().ok());
}

// A format 2 pool at 1 MiB, as every cowctl made before format 3, with
// data, a clone that diverged and a snapshot: `pool upgrade` makes it
// format 3 sharing at 4 KiB, every LUN reads back as it did, and the pool
// then shares as format 3 does (a new clone owns the 4 KiB written into it,
// not 1 MiB).
TEST_F(Cli, PoolUpgradeMakesAFormat2PoolFormat3AndKeepsEveryLunsData) {
  Ok("pool create tank --size 128M --allocation-unit 1M --grain 1M");
  std::string img = host.dir.path() + "/disk.img", data;
  for (int i = 0; i < 4; ++i) data += std::string(1 << 20, static_cast<char>('a' + i));
  data += std::string(1 << 20, '\0');  // stays unmapped
  WriteText(img, data);
  Ok("lun import tank/vm1 --from " + img);
  Ok("lun clone tank/vm1 vm2");
  Ok("lun snapshot tank/vm1 snap");
  WriteLun(pools + "/tank", "vm2", 8, std::string(4096, 'B'));
  WriteLun(pools + "/tank", "vm1", 4096, std::string(8192, 'C'));  // into the 3rd MiB, after the snapshot
  const std::vector<std::string> luns = {"vm1", "vm2", "snap"};
  auto contents = [&] {
    std::vector<std::string> out;
    for (const auto& l : luns) {
      std::string f = host.dir.path() + "/" + l + ".img";
      Ok("lun export tank/" + l + " --to " + f + " --force");
      out.push_back(ReadText(f));
    }
    return out;
  };
  const std::vector<std::string> before = contents();
  ASSERT_EQ(before[0].substr(4096 * 512, 8192), std::string(8192, 'C'));
  ASSERT_EQ(before[2], data);

  CmdResult r = Cowctl("pool upgrade tank --yes");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out.rfind("pool tank: upgraded from format 2 (1.00 MiB sharing) to format 3 (4.00 KiB sharing): 3 LUNs, ",
                        0),
            0u)
      << r.out;
  EXPECT_NE(r.out.find(" extents; journal 16.0 MiB, checkpoint "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n  cowstore versions older than format 3 no longer open it\n"), std::string::npos) << r.out;
  EXPECT_EQ(FormatOf(pools + "/tank"), 3u);

  std::string show = Ok("pool show tank");
  EXPECT_NE(show.find("\nallocation unit: 1.00 MiB\nsharing unit:    4.00 KiB (format 3)\n"), std::string::npos)
      << show;
  std::string j = Ok("pool show tank --json");
  EXPECT_NE(j.find("\"format\": 3,"), std::string::npos) << j;
  EXPECT_NE(j.find("\"allocation_unit\": 1048576,\n  \"grain\": 4096,\n"), std::string::npos) << j;
  EXPECT_EQ(contents(), before);
  EXPECT_NE(Ok("lun show tank/snap --json").find("\"read_only\": true"), std::string::npos);
  EXPECT_NE(Ok("pool check tank").find("metadata clean"), std::string::npos);
  // Read through the store as well: the LUN cowctl exported is the LUN.
  {
    auto p = store::Pool::Open(store::DefaultEnv(), pools + "/tank", store::OpenOptions{.read_only = true});
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    auto l = (*p)->OpenLun("vm2");
    ASSERT_TRUE(l.ok());
    std::string got(before[1].size(), '\0');
    ASSERT_TRUE((*l)->Read(0, got.size() / 512, got.data()).ok());
    EXPECT_TRUE(got == before[1]);
  }

  // Format 3 from now on: a new clone owns the 4 KiB written into it.
  Ok("lun clone tank/vm1 vm3");
  WriteLun(pools + "/tank", "vm3", 16, std::string(4096, 'D'));
  std::string c = Ok("lun show tank/vm3 --json");
  EXPECT_NE(c.find("\"exclusive\": 4096,\n"), std::string::npos) << c;
  EXPECT_NE(Ok("pool check tank").find("metadata clean"), std::string::npos);
}

// A LUN's size need not be a multiple of the allocation unit (here an
// imported image of 1 MiB and 4 KiB, in a pool of 1 MiB units): its last
// unit is mapped whole at format 2, and the upgrade keeps the LUN, its data
// and the pool.
TEST_F(Cli, PoolUpgradeKeepsALunWhoseSizeIsNoMultipleOfTheAllocationUnit) {
  Ok("pool create tank --size 64M --allocation-unit 1M --grain 1M");
  std::string img = host.dir.path() + "/disk.img";
  const std::string data = std::string(1 << 20, 'a') + std::string(4096, 'z');
  WriteText(img, data);
  Ok("lun import tank/vm1 --from " + img);
  Ok("lun clone tank/vm1 vm2");
  CmdResult r = Cowctl("pool upgrade tank --yes");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(FormatOf(pools + "/tank"), 3u);
  EXPECT_NE(Ok("pool check tank").find("metadata clean"), std::string::npos);
  for (const char* l : {"vm1", "vm2"}) {
    std::string back = host.dir.path() + "/" + l + ".img";
    Ok("lun export tank/" + std::string(l) + " --to " + back);
    EXPECT_TRUE(ReadText(back) == data) << l;
  }
}

// --json says the report's figures; without --yes (no terminal, or --json)
// nothing is asked or done; a second run, or a pool made format 3, has
// nothing to do and says so with status 0.
TEST_F(Cli, PoolUpgradeSaysItsFiguresAndASecondRunHasNothingToDo) {
  Format2Pool();  // a 64 KiB AU
  Ok("lun create tank/vm1 --size 8M");
  Err("--json pool upgrade tank", "confirm with --yes");
  EXPECT_EQ(FormatOf(pools + "/tank"), 2u);
  std::string j = Ok("--json pool upgrade tank --yes");
  EXPECT_NE(j.find("{\n  \"pool\": \"tank\",\n  \"upgraded\": true,\n  \"already\": false,\n  \"format\": 3,\n"
                   "  \"allocation_unit\": 65536,\n  \"grain\": 4096,\n  \"from_format\": 2,\n"
                   "  \"from_grain\": 65536,\n  \"luns\": 1,\n  \"extents\": 0,\n  \"journal_bytes\": 16777216,\n"
                   "  \"metadata_pages\": "),
            std::string::npos)
      << j;
  EXPECT_EQ(Ok("pool upgrade tank"), "pool tank is format 3 already (sharing unit 4.00 KiB); nothing to do\n");
  EXPECT_EQ(Ok("--json pool upgrade tank --yes"),
            "{\n  \"pool\": \"tank\",\n  \"upgraded\": false,\n  \"already\": true,\n  \"format\": 3,\n"
            "  \"allocation_unit\": 65536,\n  \"grain\": 4096\n}\n");
  Ok("pool create fine --size 256M --grain 8K");
  EXPECT_EQ(Ok("pool upgrade fine --grain 16K"),
            "pool fine is format 3 already (sharing unit 8.00 KiB); nothing to do (--grain 16K not applied: a format 3 "
            "pool keeps its grain)\n");
  EXPECT_EQ(Ok("pool upgrade fine"), "pool fine is format 3 already (sharing unit 8.00 KiB); nothing to do\n");
}

// Whatever cowctl refuses before the store runs leaves the pool file as it
// was, byte for byte: no --yes, a grain the pool cannot take (or its AU,
// which gains nothing), a name that is no pool.
TEST_F(Cli, ARefusedPoolUpgradeChangesNothing) {
  Ok("pool create tank --size 64M --allocation-unit 1M --grain 1M");
  Ok("lun create tank/vm1 --size 8M");
  const std::string file = pools + "/tank", bytes = ReadText(file);
  Err("pool upgrade tank",
      "pool 'tank': the upgrade to format 3 cannot be undone (cowstore versions older than format 3 will no longer "
      "open the pool); confirm with --yes (nothing changed)");
  Err("pool upgrade tank --grain 3K --yes",
      "invalid --grain 3K for pool 'tank' (allocation unit 1.00 MiB): grain of 3072 bytes is not a power of two; "
      "nothing changed");
  Err("pool upgrade tank --grain 256 --yes", "grain of 256 bytes is below the smallest LUN block size (512)");
  Err("pool upgrade tank --grain 2M --yes", "grain of 2097152 bytes is larger than the allocation unit");
  Err("pool upgrade tank --grain 1M --yes",
      "--grain 1M is the allocation unit of pool 'tank', which format 2 shares at already: give a grain below it "
      "(default 4K); nothing changed");
  Err("pool upgrade tank --grain fine --yes", "invalid grain 'fine'");
  Err("pool upgrade nope --yes", "pool 'nope' not found");
  Err("pool upgrade .x --yes", "invalid pool name");
  EXPECT_TRUE(ReadText(file) == bytes);
  EXPECT_EQ(FormatOf(file), 2u);
  EXPECT_NE(Ok("pool show tank").find("(the allocation unit, format 2: 'cowctl pool upgrade tank' shares at 4.00 KiB)"),
            std::string::npos);
}

// The format 3 journal and checkpoint go into AUs the pool has free: a pool
// without room for them is refused, says what is short and stays format 2;
// grown, it upgrades.
TEST_F(Cli, APoolWithoutRoomForTheNewMetadataIsRefusedAndStaysFormat2) {
  Ok("pool create tank --size 26214400 --allocation-unit 1M --grain 1M");  // the minimum: 8 AUs of data
  Ok("lun create tank/vm1 --size 8M");
  Err("pool upgrade tank --yes", "upgrading pool 'tank': not enough free space in the pool");
  EXPECT_EQ(FormatOf(pools + "/tank"), 2u);
  EXPECT_NE(Ok("pool check tank").find("metadata clean"), std::string::npos);
  Ok("pool grow tank --size 64M");
  EXPECT_NE(Ok("pool upgrade tank --yes").find("upgraded from format 2"), std::string::npos);
  EXPECT_EQ(FormatOf(pools + "/tank"), 3u);
  EXPECT_NE(Ok("lun list tank").find("vm1"), std::string::npos);
}

// A format 1 pool (tests/store/data/v1_pool.img, made by an early store)
// is upgraded too, and says it was format 1.
TEST_F(Cli, PoolUpgradeTakesAFormat1PoolToFormat3) {
  std::filesystem::create_directories(pools);
  std::filesystem::copy_file(COWSTORE_V1_IMAGE, pools + "/old");
  EXPECT_NE(Ok("pool show old").find("(the allocation unit, format 1: 'cowctl pool upgrade old' shares at 4.00 KiB)"),
            std::string::npos);
  std::string a = host.dir.path() + "/a.img";
  Ok("lun export old/a --to " + a);
  std::string out = Ok("pool upgrade old --yes");
  EXPECT_EQ(out.rfind("pool old: upgraded from format 1 (64.0 KiB sharing) to format 3 (4.00 KiB sharing): 2 LUNs, ",
                      0),
            0u)
      << out;
  EXPECT_EQ(FormatOf(pools + "/old"), 3u);
  std::string a2 = host.dir.path() + "/a2.img";
  Ok("lun export old/a --to " + a2);
  EXPECT_TRUE(ReadText(a) == ReadText(a2));
  EXPECT_NE(Ok("pool check old").find("metadata clean"), std::string::npos);
}

// On a terminal: what the upgrade does and that older cowstore versions
// will not open the pool, then a typed 'upgrade' (anything else cancels,
// nothing changed); the progress bar on stderr as other long commands.
TEST_F(Cli, OnATerminalPoolUpgradeAsksAndDrawsItsBar) {
  if (std::system("script --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "no script(1) for a terminal";
  Format2Pool();
  std::string log = host.dir.path() + "/tty.log";
  auto on_tty = [&](const std::string& answer) {
    std::string cmd = "echo " + answer + " | script -qec 'COWSTORE_POOL_DIR=" + pools + " COWSTORE_RUN_DIR=" + run +
                      " " + COWCTL_BINARY + " pool upgrade tank' " + log + " >/dev/null 2>&1";
    int st = std::system(cmd.c_str());
    (void)st;
    return ReadText(log);
  };
  std::string t = on_tty("yes");
  EXPECT_NE(t.find("pool tank: format 2, allocation unit 64.0 KiB, sharing unit 64.0 KiB, 0 LUNs."), std::string::npos)
      << t;
  EXPECT_NE(t.find("It cannot be undone: cowstore versions older than format 3 will no longer open"), std::string::npos)
      << t;
  EXPECT_NE(t.find("Type 'upgrade' to convert the pool: "), std::string::npos) << t;
  EXPECT_NE(t.find("upgrade of pool 'tank' cancelled: nothing changed"), std::string::npos) << t;
  EXPECT_EQ(FormatOf(pools + "/tank"), 2u);
  t = on_tty("upgrade");
  EXPECT_NE(t.find("upgrading tank [########################################] 100.0%"), std::string::npos) << t;
  EXPECT_NE(t.find("pool tank: upgraded from format 2 (64.0 KiB sharing) to format 3 (4.00 KiB sharing)"),
            std::string::npos)
      << t;
  EXPECT_EQ(FormatOf(pools + "/tank"), 3u);
}

TEST_F(Cli, PoolGrowThenReopen) {
  Pool();
  Ok("pool grow tank --size 2G");
  EXPECT_NE(Ok("pool show tank").find("2.00 GiB"), std::string::npos);
  EXPECT_NE(Ok("pool check tank").find("clean"), std::string::npos);
}

// ---------------------------------------------------------------- LUNs

TEST_F(Cli, LunLifecycle) {
  Pool();
  std::string out = Ok("lun create tank/vm1 --size 100M --json");
  EXPECT_NE(out.find("\"block_size\": 512"), std::string::npos);
  Ok("lun create tank/vm4k --size 64M --block-size 4096");
  EXPECT_NE(Ok("lun show tank/vm4k").find("block size: 4096"), std::string::npos);
  Ok("lun clone tank/vm1 vm2");
  std::string snap = Ok("lun snapshot tank/vm1");
  EXPECT_NE(snap.find("tank/vm1.snap-"), std::string::npos);
  std::string list = Ok("lun list tank");
  EXPECT_NE(list.find("tank/vm2"), std::string::npos);
  EXPECT_NE(list.find("vm1.snap-"), std::string::npos);
  // Clones get a fresh WWN.
  std::string a = Ok("lun show tank/vm1 --json"), b = Ok("lun show tank/vm2 --json");
  EXPECT_NE(a.substr(a.find("\"wwn\""), 50), b.substr(b.find("\"wwn\""), 50));
  EXPECT_NE(Ok("lun resize tank/vm1 --size 200M").find("200 MiB"), std::string::npos);
  Ok("lun resize tank/vm1 --size 50M --force");
  Ok("lun delete tank/vm2");
  EXPECT_EQ(Ok("lun list tank").find("tank/vm2 "), std::string::npos);
}

// As lvresize -L +100G and targetcli's POOL/NAME habits.
TEST_F(Cli, ResizeByAndCloneIntoPoolSlashName) {
  Pool();
  Ok("lun create tank/vm1 --size 100M");
  EXPECT_NE(Ok("lun resize tank/vm1 --size +28M").find("is now 128 MiB"), std::string::npos);
  EXPECT_NE(Ok("lun show tank/vm1 --json").find("\"size\": 134217728"), std::string::npos);
  Err("lun resize tank/vm1 --size +1000", "multiple of the block size");
  Err("lun resize tank/vm1 --size +lots", "invalid size");
  EXPECT_NE(Ok("lun clone tank/vm1 tank/vm2").find("clone tank/vm2 of tank/vm1 created"), std::string::npos);
  EXPECT_NE(Ok("lun snapshot tank/vm1 tank/s1").find("snapshot tank/s1 of tank/vm1 created"), std::string::npos);
  Pool("other");
  Err("lun clone tank/vm1 other/vm3", "a clone stays in the pool of its source");
  Err("lun clone tank/vm1 tank/a/b", "write it as POOL/LUN");
  EXPECT_EQ(Ok("lun list").find("vm3"), std::string::npos);
}

// Read-only snapshots with origin and time, rollback keeping the LUN's
// identity, and retention.
TEST_F(Cli, SnapshotsAreReadOnlyAndRollBackKeepsTheIdentity) {
  Pool();
  std::string img = host.dir.path() + "/a.img";
  WriteText(img, std::string(65536, 'a'));
  Ok("lun import tank/vm1 --from " + img);
  Ok("lun create tank/other --size 1M");
  std::string before = Ok("lun show tank/vm1 --json");
  std::string wwn = before.substr(before.find("\"wwn\""), 50);
  std::string j = Ok("lun snapshot tank/vm1 s1 --json");
  EXPECT_NE(j.find("\"read_only\": true"), std::string::npos) << j;
  EXPECT_NE(j.find("\"origin\": " + wwn.substr(7, 38)), std::string::npos) << j;
  EXPECT_EQ(j.find("\"created\": null"), std::string::npos) << j;
  std::string show = Ok("lun show tank/s1");
  EXPECT_NE(show.find("yes (a snapshot: writes get WRITE PROTECTED)"), std::string::npos) << show;
  EXPECT_NE(show.find("vm1 (WWN " + wwn.substr(8, 36) + ")"), std::string::npos) << show << wwn;
  EXPECT_NE(show.find("created:    20"), std::string::npos) << show;
  EXPECT_NE(Ok("lun show tank/vm1 --json").find("\"read_only\": false"), std::string::npos);
  std::string list = Ok("lun list tank");
  EXPECT_NE(list.find("ORIGIN"), std::string::npos);
  EXPECT_NE(list.find(" ro "), std::string::npos) << list;
  Ok("lun snapshot tank/other o1");
  Ok("lun clone tank/vm1 writable");

  // New contents, then back to the snapshot's.
  auto change = [&](char c) {
    auto p = store::Pool::Open(store::DefaultEnv(), pools + "/tank");
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    auto l = (*p)->OpenLun("vm1").value();
    std::string b(4096, c);
    ASSERT_TRUE(l->Write(0, 8, b.data(), store::Durability::kDurable).ok());
    l.reset();
    ASSERT_TRUE((*p)->Close().ok());
  };
  auto first = [&]() -> char {
    auto p = store::Pool::Open(store::DefaultEnv(), pools + "/tank", {true});
    std::string b(512, 0);
    EXPECT_TRUE((*p)->OpenLun("vm1").value()->Read(0, 1, b.data()).ok());
    return b[0];
  };
  change('b');
  ASSERT_EQ(first(), 'b');
  std::string out = Ok("lun rollback tank/vm1 tank/s1");
  EXPECT_NE(out.find("rolled back tank/vm1 to snapshot tank/s1"), std::string::npos) << out;
  EXPECT_EQ(first(), 'a');
  std::string after = Ok("lun show tank/vm1 --json");
  EXPECT_EQ(after.substr(after.find("\"wwn\""), 50), wwn);  // same identity, so the same naa
  EXPECT_NE(after.find("\"read_only\": false"), std::string::npos);

  // Refusals change nothing.
  change('c');
  Err("lun rollback tank/vm1 writable", "is not a snapshot");
  Err("lun rollback tank/vm1 o1", "is not a snapshot of tank/vm1");
  Err("lun rollback tank/s1 vm1", "is not a snapshot");
  Err("lun rollback tank/vm1 other/s1", "stays in the pool");
  Err("lun rollback tank/vm1 nope", "not found");
  EXPECT_EQ(first(), 'c');
  // --force: another LUN's snapshot, whose size it takes.
  Ok("lun rollback tank/other s1 --force");
  EXPECT_NE(Ok("lun show tank/other --json").find("\"size\": 65536"), std::string::npos);
}

TEST_F(Cli, SnapshotKeepDeletesOnlyThatLunsOldestUnexportedSnapshots) {
  Pool();
  Ok("lun create tank/vm1 --size 1M");
  Ok("lun create tank/vm2 --size 1M");
  Ok("lun snapshot tank/vm1 a1");
  Ok("lun snapshot tank/vm1 a2");
  Ok("lun snapshot tank/vm2 b1");
  Ok("lun clone tank/vm1 c1");  // a writable clone is no snapshot
  Err("lun snapshot tank/vm1 a3 --keep 0", "at least 1");
  std::string out = Ok("lun snapshot tank/vm1 a3 --keep 2");
  EXPECT_NE(out.find("snapshot tank/a3 of tank/vm1 created"), std::string::npos) << out;
  EXPECT_NE(out.find("deleted old snapshot tank/a1"), std::string::npos) << out;
  std::string list = Ok("lun list tank");
  EXPECT_EQ(list.find("tank/a1 "), std::string::npos) << list;
  for (const char* kept : {"tank/a2 ", "tank/a3 ", "tank/b1 ", "tank/c1 ", "tank/vm1 ", "tank/vm2 "}) {
    EXPECT_NE(list.find(kept), std::string::npos) << kept << "\n" << list;
  }
  // An exported snapshot is never deleted by retention.
  Ok("backstore create tank/a2");
  CmdResult r = Cowctl("lun snapshot tank/vm1 a4 --keep 1 --json");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("keeping snapshot tank/a2 beyond --keep 1: it is exported"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("\"deleted\": [\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"tank/a3\""), std::string::npos) << r.out;
  list = Ok("lun list tank");
  EXPECT_EQ(list.find("tank/a3 "), std::string::npos) << list;
  EXPECT_NE(list.find("tank/a2 "), std::string::npos) << list;
  EXPECT_NE(list.find("tank/a4 "), std::string::npos) << list;
  EXPECT_NE(list.find("tank/b1 "), std::string::npos) << list;
}

TEST_F(Cli, LunErrors) {
  Err("lun create tank/vm1 --size 1M", "pool 'tank' not found");
  Pool();
  Ok("lun create tank/vm1 --size 1M");
  Err("lun create tank/vm1 --size 1M", "the name is taken");
  Err("lun create tank --size 1M", "POOL/LUN");
  Err("lun create tank/-x --size 1M", "invalid LUN name");
  Err("lun create tank/vm2 --size 1M --block-size 1024", "512 or 4096");
  Err("lun create tank/vm2 --size 1000", "multiple of the block size");
  Err("lun create tank/vm2 --size 0", "non-zero");
  Err("lun create tank/vm2 --size 2T", "would promise 2.00 TiB, more than the pool (1.00 GiB): grow the pool or pass "
                                        "--overcommit");
  Ok("lun create tank/big --size 2G --overcommit");
  Err("lun show tank/nope", "not found");
  Err("lun delete tank/nope", "not found");
  Err("lun clone tank/nope x", "not found");
  Err("lun clone tank/vm1 big", "the name is taken");
  Err("lun resize tank/vm1 --size 512K", "pass --force");
  Err("lun resize tank/vm1 --size 1000", "multiple of the block size");
  Err("lun create tank/vm2 --size 1M --backstore --copy-group 'a b'", "invalid copy group");
  Err("lun create tank/vm2 --size 1M --wce 2", "0 or 1");
  std::string luns = Ok("lun list tank");
  EXPECT_NE(luns.find("vm1"), std::string::npos) << luns;
  EXPECT_EQ(luns.find("vm2"), std::string::npos) << luns;  // nothing half-made
}

TEST_F(Cli, ImportLeavesZeroRunsUnmappedAndExportRoundTrips) {
  Pool();
  std::string img = host.dir.path() + "/disk.img";
  {
    std::ofstream f(img, std::ios::binary);
    std::string mib(1 << 20, '\0');
    std::string data(1 << 20, 'A');
    f << data << mib << mib << data;  // 4 MiB: data, zeros, zeros, data
    f << "tail";                      // not a whole block: padded
  }
  std::string j = Ok("lun import tank/imported --from " + img + " --json");
  EXPECT_NE(j.find("\"written\": 2097664"), std::string::npos) << j;
  EXPECT_NE(j.find("\"left_unmapped\": 2097152"), std::string::npos) << j;
  EXPECT_NE(j.find("\"size\": 4194816"), std::string::npos) << j;  // rounded up to 512
  std::string back = host.dir.path() + "/back.img";
  Ok("lun export tank/imported --to " + back);
  std::string orig = ReadText(img), got = ReadText(back);
  ASSERT_EQ(got.size(), 4194816u);
  EXPECT_EQ(got.substr(0, orig.size()), orig);
  EXPECT_EQ(got.substr(orig.size()), std::string(got.size() - orig.size(), '\0'));
  struct stat st;
  ASSERT_EQ(::stat(back.c_str(), &st), 0);
  EXPECT_LT(static_cast<uint64_t>(st.st_blocks) * 512, 4194816u);  // sparse
  Err("lun export tank/imported --to " + back, "pass --force");
  Ok("lun export tank/imported --to " + back + " --force");
}

TEST_F(Cli, ImportErrorsLeaveNoLun) {
  Pool();
  Err("lun import tank/x --from /nonexistent.img", "cannot open");
  Err("lun import tank/x --from " + host.dir.path(), "neither a regular file nor a block device");
  WriteText(host.dir.path() + "/small.img", std::string(4096, 'x'));
  Err("lun import tank/x --from " + host.dir.path() + "/small.img --size 1024", "smaller than");
  Err("lun import tank/x --from " + host.dir.path() + "/small.img --block-size 1000", "512 or 4096");
  EXPECT_EQ(Ok("lun list tank").find("tank/x"), std::string::npos);
}

// ---------------------------------------------------------------- import and export as root

// Bytes `pid` has read so far (rchar of /proc/PID/io), 0 if unknown.
uint64_t BytesRead(pid_t pid) {
  std::string io = ReadText("/proc/" + std::to_string(pid) + "/io");
  size_t p = io.find("rchar: ");
  return p == std::string::npos ? 0 : std::strtoull(io.c_str() + p + 7, nullptr, 10);
}

// A sparse image whose import takes minutes (reading 256 GiB of zeros).
std::string HugeSparseImage(const std::string& dir) {
  std::string p = dir + "/huge.img";
  WriteText(p, "header");
  EXPECT_EQ(::truncate(p.c_str(), 256ll << 30), 0);
  return p;
}

// Waits for `pid` to exit (30 s at most, then kills it): its wait status.
int Reap(pid_t pid) {
  int st = 0;
  for (int i = 0; i < 3000; ++i) {
    if (::waitpid(pid, &st, WNOHANG) == pid) return st;
    ::usleep(10000);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &st, 0);
  return st;
}

TEST_F(Cli, ImportAndExportNeverFollowALink) {
  Pool();
  // A user's link to a file only root may read: not read into a LUN.
  std::string secret = host.dir.path() + "/secret";
  WriteText(secret, std::string(4096, 's'));
  ASSERT_EQ(::chmod(secret.c_str(), 0600), 0);
  std::string link = host.dir.path() + "/disk.img";
  ASSERT_EQ(::symlink(secret.c_str(), link.c_str()), 0);
  Err("lun import tank/x --from " + link, "is a symbolic link");
  EXPECT_EQ(Ok("lun list tank").find("tank/x"), std::string::npos);
  // A user's dangling link into a directory only root may write: nothing
  // is created there, with or without --force.
  Ok("lun create tank/y --size 1M");
  std::string closed = host.dir.path() + "/root-only";
  ASSERT_EQ(::mkdir(closed.c_str(), 0700), 0);
  std::string dangling = host.dir.path() + "/out.img";
  ASSERT_EQ(::symlink((closed + "/planted").c_str(), dangling.c_str()), 0);
  Err("lun export tank/y --to " + dangling, "is a symbolic link");
  Err("lun export tank/y --to " + dangling + " --force", "is a symbolic link");
  EXPECT_FALSE(Exists(closed + "/planted"));
}

TEST_F(Cli, ExportNeverOverwritesItsOwnPool) {
  Pool();
  Ok("lun create tank/y --size 1M");
  Err("lun export tank/y --to " + pools + "/tank --force", "this pool's own file");
  EXPECT_NE(Ok("pool check tank").find("clean"), std::string::npos);
  EXPECT_NE(Ok("lun list tank").find("tank/y"), std::string::npos);
}

TEST_F(Cli, ExportedImagesAreForRootUnlessAsked) {
  Pool();
  Ok("lun create tank/y --size 1M");
  std::string a = host.dir.path() + "/a.img", b = host.dir.path() + "/b.img";
  Ok("lun export tank/y --to " + a);
  Ok("lun export tank/y --to " + b + " --mode 0644");
  struct stat st;
  ASSERT_EQ(::stat(a.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);  // as `save` writes
  ASSERT_EQ(::stat(b.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  Err("lun export tank/y --to " + host.dir.path() + "/c.img --mode rw", "--mode rw: give octal permissions");
}

TEST_F(Cli, AFailedForcedExportKeepsTheFileItWouldReplace) {
  Pool();
  std::string img = host.dir.path() + "/d.img";
  WriteText(img, std::string(4 << 20, 'D'));
  Ok("lun import tank/x --from " + img);
  std::string out = host.dir.path() + "/old.img";
  WriteText(out, std::string(8 << 20, 'O'));
  // Writes past 512 KiB fail (EFBIG) as on a file system that fills up.
  CmdResult r = Cowctl("lun export tank/x --to " + out + " --force", "trap '' XFSZ; ulimit -f 1024;");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("writing " + out + " failed"), std::string::npos) << r.err;
  EXPECT_EQ(ReadText(out), std::string(8 << 20, 'O'));  // whole, not truncated
  for (const auto& e : std::filesystem::directory_iterator(host.dir.path())) {
    EXPECT_EQ(e.path().filename().string().find(".cowctl-"), std::string::npos) << e.path();
  }
  Ok("lun export tank/x --to " + out + " --force");
  EXPECT_EQ(ReadText(out), std::string(4 << 20, 'D'));
}

TEST_F(Cli, ImportFromAFifoIsRefusedAtOnce) {
  Pool();
  std::string fifo = host.dir.path() + "/img.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  CmdResult r = Cowctl("lun import tank/x --from " + fifo, "timeout 30");
  EXPECT_EQ(r.rc, 1) << "(124: it waited in open() for a writer)\n" << r.err;
  EXPECT_NE(r.err.find("is a FIFO, neither a regular file nor a block device"), std::string::npos) << r.err;
}

TEST_F(Cli, ExportToABlockDeviceNeedsForce) {
  if (::geteuid() != 0 || std::system("losetup --version >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "needs root and losetup";
  }
  Pool();
  std::string img = host.dir.path() + "/d.img";
  WriteText(img, std::string(4 << 20, 'D'));
  Ok("lun import tank/x --from " + img);
  std::string backing = host.dir.path() + "/disk";
  WriteText(backing, std::string(4 << 20, 'B'));
  std::string out = host.dir.path() + "/losetup.out";
  if (std::system(("losetup --find --show " + backing + " >" + out + " 2>&1").c_str()) != 0) {
    GTEST_SKIP() << "no loop device: " << ReadText(out);
  }
  std::string dev = ReadText(out);
  dev.erase(dev.find_last_not_of('\n') + 1);
  Err("lun export tank/x --to " + dev, "is a block device: pass --force to overwrite it");
  EXPECT_EQ(ReadText(backing), std::string(4 << 20, 'B'));
  Ok("lun export tank/x --to " + dev + " --force");
  std::system(("losetup -d " + dev).c_str());
  EXPECT_EQ(ReadText(backing), std::string(4 << 20, 'D'));
}

// docs/design/cowctl.md: a failed import deletes the LUN. Ctrl-C is one.
TEST_F(Cli, CtrlCDuringImportLeavesNoLunAndTheNameFree) {
  Pool();
  std::string img = HugeSparseImage(host.dir.path());
  std::string out, err;
  pid_t pid = Spawn("lun import tank/x --overcommit --from " + img, &out, &err);
  ASSERT_GT(pid, 0);
  // Copying: it has read 128 MiB of the image.
  for (int i = 0; i < 6000 && BytesRead(pid) < (128u << 20); ++i) ::usleep(10000);
  EXPECT_GE(BytesRead(pid), 128u << 20);
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  int st = Reap(pid);
  ASSERT_TRUE(WIFEXITED(st)) << "killed by signal " << (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  EXPECT_EQ(WEXITSTATUS(st), 1);
  std::string e = ReadText(err);
  // (After the warning that --overcommit allowed the LUNs to pass the pool.)
  EXPECT_NE(e.find("\ncowctl: interrupted: importing " + img + " into tank/x: "), std::string::npos) << e;
  EXPECT_NE(e.find("(nothing was kept)"), std::string::npos) << e;
  std::string list = Ok("lun list tank");
  EXPECT_EQ(list.find("tank/x"), std::string::npos) << list;
  std::string small = host.dir.path() + "/small.img";
  WriteText(small, std::string(4096, 'x'));
  Ok("lun import tank/x --from " + small);
}

// The rule `lun create` applies: a LUN larger than the pool only with
// --overcommit, whether the size is given or the source's.
TEST_F(Cli, ImportAppliesTheOvercommitRule) {
  Pool("tank", "64M");
  std::string img = host.dir.path() + "/big.img";
  WriteText(img, "data");
  ASSERT_EQ(::truncate(img.c_str(), 128 << 20), 0);
  Err("lun import tank/x --from " + img,
      "the LUNs of pool 'tank' would promise 128 MiB, more than the pool (64.0 MiB): grow the pool or pass --overcommit");
  std::string small = host.dir.path() + "/small.img";
  WriteText(small, "data");
  Err("lun import tank/y --size 100M --from " + small, "pass --overcommit");
  EXPECT_EQ(Ok("lun list tank").find("tank/"), std::string::npos);
  Ok("lun import tank/y --from " + small);
  Ok("lun import tank/x --overcommit --from " + img);
  // The LUNs' total counts: the pool is overcommitted now, so even a small
  // import needs --overcommit.
  Err("lun import tank/z --from " + small, "the LUNs of pool 'tank' would promise 128 MiB, more than the pool");
}

// One rule for lun create, resize and import: the LUNs' total may pass what
// the pool holds only with --overcommit.
TEST_F(Cli, ResizeAndCreateApplyTheOvercommitRuleToTheLunsTotal) {
  Pool("tank", "64M");
  Ok("lun create tank/a --size 32M");
  Err("lun create tank/b --size 40M", "the LUNs of pool 'tank' would promise 72.0 MiB, more than the pool (64.0 MiB): "
                                      "grow the pool or pass --overcommit");
  Err("lun resize tank/a --size 70M", "would promise 70.0 MiB, more than the pool (64.0 MiB)");
  Err("lun resize tank/a --size +33M", "would promise 65.0 MiB");
  EXPECT_NE(Ok("lun show tank/a").find("32.0 MiB"), std::string::npos);  // nothing changed
  Ok("lun resize tank/a --size +32M");  // exactly the pool
  CmdResult r = Cowctl("lun resize tank/a --size 80M --overcommit");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("cowctl: warning: the LUNs of pool 'tank' would promise 80.0 MiB"), std::string::npos) << r.err;
  Ok("lun resize tank/a --size 16M --force");  // shrinking promises nothing
  Ok("lun create tank/b --size 48M");
}

// Thin on thin: a pool file larger than its filesystem's free space is made
// with a warning (none with --overcommit), and pool show and list warn too.
TEST_F(Cli, APoolFileLargerThanItsFilesystemIsWarnedAbout) {
  ::mkdir(pools.c_str(), 0755);
  struct statvfs v;
  ASSERT_EQ(::statvfs(pools.c_str(), &v), 0);
  const uint64_t mib = (static_cast<uint64_t>(v.f_bavail) * v.f_frsize >> 20) + 1024;  // 1 GiB more than is free
  const std::string size = std::to_string(mib) + "M";
  CmdResult r = Cowctl("pool create big --size " + size + " --allocation-unit 1M");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("cowctl: warning: pool 'big' would promise"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("more than its filesystem ("), std::string::npos) << r.err;
  // --overcommit: the administrator knows; no warning at create.
  r = Cowctl("pool create big2 --size " + size + " --overcommit --allocation-unit 1M");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err.find("warning"), std::string::npos) << r.err;
  std::string show = Ok("pool show big");
  EXPECT_NE(show.find("WARNING:"), std::string::npos) << show;
  EXPECT_NE(show.find("writes will fail before the pool is full"), std::string::npos) << show;
  EXPECT_NE(show.find("(filesystem)"), std::string::npos) << show;
  std::string j = Ok("--json pool show big");
  EXPECT_NE(j.find("\"outgrows_backing\": true"), std::string::npos) << j;
  EXPECT_NE(j.find("\"kind\": \"filesystem\""), std::string::npos) << j;
  std::string list = Ok("pool list");
  EXPECT_NE(list.find("warning: pool big: the pool can still grow by"), std::string::npos) << list;
  // A pool that fits says nothing of the kind.
  Pool("small", "64M");
  EXPECT_EQ(Ok("pool show small").find("WARNING"), std::string::npos);
  EXPECT_NE(Ok("--json pool show small").find("\"outgrows_backing\": false"), std::string::npos);
}

TEST_F(Cli, PoolShowAndListCountProvisionedAndTheBackingStore) {
  Pool();
  Ok("lun create tank/a --size 100M");
  Ok("lun create tank/b --size 200M");
  std::string show = Ok("pool show tank");
  EXPECT_NE(show.find("provisioned:     300 MiB (0.29x of the pool)"), std::string::npos) << show;
  EXPECT_NE(show.find("backing free:"), std::string::npos) << show;
  std::string j = Ok("--json pool show tank");
  EXPECT_NE(j.find("\"provisioned\": 314572800"), std::string::npos) << j;
  EXPECT_NE(j.find("\"overcommit_ratio\": 0.293"), std::string::npos) << j;
  EXPECT_NE(j.find("\"backing_free\": "), std::string::npos) << j;
  EXPECT_NE(j.find("\"warnings\": []"), std::string::npos) << j;
  std::string list = Ok("pool list");
  EXPECT_NE(list.find("PROVISIONED"), std::string::npos) << list;
  EXPECT_NE(list.find("BACKING FREE"), std::string::npos) << list;
  EXPECT_NE(list.find("300 MiB (0.29x)"), std::string::npos) << list;
  EXPECT_NE(Ok("--json pool list").find("\"provisioned\": 314572800"), std::string::npos);
}

// 118 MiB at 1 MiB AUs leaves 101 units for data in a format 2 pool (17 MiB
// hold the superblocks and the journal): the store keeps 80 % of them as 80
// units, 79.2 % by division. pool show and save both say 80, and a pool made
// again from the file keeps 80 units.
TEST_F(Cli, PoolShowAndSaveGiveTheSoftThresholdPoolCreateGot) {
  Ok("pool create st --size 118M --allocation-unit 1M --grain 1M --soft-threshold 80");
  std::string j = Ok("pool show st --json");
  ASSERT_NE(j.find("\"soft_threshold\": 83886080,"), std::string::npos) << "80 of 101 units: " << j;
  EXPECT_NE(Ok("pool show st").find("\nsoft threshold:  80.0 MiB (80%)\n"), std::string::npos) << Ok("pool show st");
  std::string file = host.dir.path() + "/c.yaml";
  Ok("save " + file);
  EXPECT_NE(ReadText(file).find("    soft_threshold: 80\n"), std::string::npos) << ReadText(file);
  Ok("pool delete st");
  Ok("restore --create-missing " + file);
  EXPECT_NE(Ok("pool show st --json").find("\"soft_threshold\": 83886080,"), std::string::npos);
}

// `pool check` reads metadata only and says so; `pool scrub` reads the data.
TEST_F(Cli, CheckSaysItReadsMetadataOnlyAndScrubReadsTheData) {
  Format2Pool();
  std::string img = host.dir.path() + "/d.img";
  WriteText(img, std::string(2 << 20, 'x'));
  Ok("lun import tank/x --from " + img);
  std::string out = Ok("pool check tank");
  EXPECT_EQ(out.rfind("pool tank: metadata clean (", 0), 0u) << out;
  // The units counted are named: the pool's 64 KiB AU (format 2), and the
  // bytes they make.
  EXPECT_NE(out.find(" allocated units of 64.0 KiB ("), std::string::npos) << out;
  const std::string js = Ok("--json pool check tank");
  EXPECT_NE(js.find("\"unit_bytes\": 65536"), std::string::npos) << js;
  EXPECT_NE(js.find("\"allocated_bytes\": "), std::string::npos) << js;
  EXPECT_NE(out.find("\n  data not read: 'cowctl pool scrub tank' reads every mapped block\n"), std::string::npos) << out;
  EXPECT_NE(Ok("--json pool check tank").find("\"checked\": \"metadata\""), std::string::npos);
  EXPECT_EQ(Ok("pool scrub tank"), "pool tank: data readable (1 LUNs, 2.00 MiB of 2.00 MiB mapped read)\n");
  std::string j = Ok("--json pool scrub tank");
  EXPECT_NE(j.find("\"clean\": true"), std::string::npos) << j;
  EXPECT_NE(j.find("\"read_bytes\": 2097152"), std::string::npos) << j;
  EXPECT_NE(j.find("\"unreadable\": []"), std::string::npos) << j;
  Err("pool scrub nope", "not found");
}

// ---------------------------------------------------------------- LIO

TEST_F(Cli, LunCreateWithBackstore) {
  Pool();
  std::string out = Ok("lun create tank/vm1 --size 64M --copy-group esx --json");
  std::string control = ReadText(Bs() + "/control");
  EXPECT_NE(control.find("dev_config=cowstore/tank/vm1;copy_group=esx\n"), std::string::npos);
  EXPECT_NE(control.find("dev_size=67108864\n"), std::string::npos);
  EXPECT_NE(control.find("hw_max_sectors=32768\n"), std::string::npos);
  // The WWN is the LUN's identity.
  std::string wwn = ReadText(Bs() + "/wwn/vpd_unit_serial");
  EXPECT_NE(out.find("\"wwn\": \"" + wwn + "\""), std::string::npos) << out;
  EXPECT_NE(Ok("backstore list").find("cowstore/tank/vm1;copy_group=esx"), std::string::npos);
  EXPECT_NE(Ok("lun show tank/vm1").find("user:cowstore tank-vm1"), std::string::npos);
  Err("backstore create tank/vm1", "already has the backstore");
}

TEST_F(Cli, BothOptionsSurviveTheKernelsCommaSplit) {
  Pool();
  Ok("lun create tank/vm1 --size 1M --copy-group esx --wce 1");
  std::string control = ReadText(Bs() + "/control");
  EXPECT_NE(control.find("dev_config=cowstore/tank/vm1;copy_group=esx;wce=1\n"), std::string::npos) << control;
  EXPECT_EQ(control.find(','), std::string::npos);
  EXPECT_EQ(control.find("vm1:"), std::string::npos);  // rtslib refuses ':'
}

// What the backstore's cfgstring says of a LUN (copy group, write cache,
// thin on thin) comes back from a saved file as it was.
TEST_F(Cli, SaveAndRestoreKeepTheBackstoreSwitches) {
  Pool();
  Ok("lun create tank/vm1 --size 1M --copy-group esx --wce 1 --thin-on-thin 0");
  const std::string file = host.dir.path() + "/c.yaml";
  Ok("save " + file);
  EXPECT_NE(ReadText(file).find("thin_on_thin: false"), std::string::npos) << ReadText(file);
  std::filesystem::remove_all(host.configfs + "/target");  // a reboot
  std::filesystem::create_directories(host.configfs + "/target/core");
  CmdResult r = Cowctl("restore " + file);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  const std::string control = ReadText(Bs() + "/control");
  EXPECT_NE(control.find("copy_group=esx"), std::string::npos) << control;
  EXPECT_NE(control.find("wce=1"), std::string::npos) << control;
  EXPECT_NE(control.find("thin_on_thin=0"), std::string::npos) << control;
}

TEST_F(Cli, BackstoreNeedsRunnerAndModuleAndRollsBack) {
  Pool();
  std::filesystem::remove_all(host.proc + "/4242");
  Err("lun create tank/vm1 --size 1M --backstore", "tcmu-runner is not running: run 'systemctl start tcmu-runner'");
  EXPECT_EQ(Ok("lun list tank").find("vm1"), std::string::npos);
  WriteText(host.proc + "/4242/comm", "tcmu-runner\n");
  std::filesystem::remove_all(host.configfs + "/target");
  Err("lun create tank/vm1 --size 1M --backstore", "modprobe target_core_user");
  EXPECT_EQ(Ok("lun list tank").find("vm1"), std::string::npos);
  Ok("lun create tank/vm1 --size 1M");
  Err("backstore create tank/vm1", "modprobe target_core_user");
  Err("backstore create tank/nope", "not found");
  Err("export iscsi tank/vm1", "modprobe target_core_user");
}

TEST_F(Cli, IscsiExportAndDeleteProtection) {
  Pool();
  Ok("lun create tank/vm1 --size 64M");
  std::string tgt = "iqn.2024-01.io.cowstore:test.tank";
  std::string out = Ok("export iscsi tank/vm1 --target " + tgt +
                       " --portal 127.0.0.1:3260 --initiator iqn.1998-01.com.vmware:esx1"
                       " --chap-user esx --chap-password 0123456789ab");
  EXPECT_NE(out.find("LUN 0 of " + tgt), std::string::npos);
  std::string tpg = host.T("iscsi/" + tgt + "/tpgt_1");
  EXPECT_TRUE(Exists(tpg + "/np/127.0.0.1:3260"));
  EXPECT_EQ(ReadText(tpg + "/acls/iqn.1998-01.com.vmware:esx1/auth/userid"), "esx");
  EXPECT_NE(Ok("export list").find(tgt), std::string::npos);
  EXPECT_NE(Ok("lun list").find("tank-vm1"), std::string::npos);
  Err("lun delete tank/vm1", "is exported");
  Err("backstore delete tank/vm1", "unexport it first");
  Ok("lun delete tank/vm1 --force");
  EXPECT_FALSE(Exists(host.T("iscsi/" + tgt)));
  EXPECT_FALSE(Exists(host.T("core/user_0")));
  EXPECT_EQ(Ok("lun list tank").find("vm1"), std::string::npos);
}

// targetcli's ls for what cowctl manages: pools with their LUNs, backstores,
// iSCSI targets with LUNs and ACLs, loopback; --json is the same tree.
TEST_F(Cli, LsDrawsPoolsLunsBackstoresAndExports) {
  EXPECT_NE(Ok("ls").find("o- pools [" + pools + ": 0 pools]"), std::string::npos);
  Pool();
  Ok("lun create tank/vm1 --size 64M");
  Ok("lun create tank/plain --size 32M");
  std::string tgt = "iqn.2024-01.io.cowstore:test.tank";
  Ok("export iscsi tank/vm1 --target " + tgt + " --portal 127.0.0.1:3260 --initiator iqn.1998-01.com.vmware:esx1");
  Ok("lun create tank/local --size 16M");
  Ok("export loop tank/local");
  std::string out = Ok("ls");
  std::string naa = NaaOf("tank-vm1");
  for (const std::string& line : std::vector<std::string>{
           "o- / [cowstore]\n  o- pools [" + pools + ": 1 pool]\n  | o- tank [1.00 GiB, ",
           " free, 3 LUNs]\n  |   o- vm1 [64.0 MiB, backstore tank-vm1]\n"
           "  |   o- plain [32.0 MiB, not exported]\n  |   o- local [16.0 MiB, backstore tank-local]\n",
        "  o- backstores [user:cowstore, 2 backstores]\n",
        "  | o- tank-vm1 [tank/vm1, 64.0 MiB, " + naa + "]\n",
        "  o- iscsi [1 target]\n  | o- " + tgt + " [tpg1, 1 ACL, portals 127.0.0.1:3260]\n"
        "  |   o- luns [1 LUN]\n  |   | o- lun0 [tank-vm1 (tank/vm1)]\n  |   o- acls [1 ACL]\n"
        "  |     o- iqn.1998-01.com.vmware:esx1\n  |       o- mapped_lun0 [lun0]\n",
        "  o- loopback [1 target]\n    o- naa.",
        " [1 LUN]\n      o- lun0 [tank-local (tank/local)]\n"}) {
    EXPECT_NE(out.find(line), std::string::npos) << line << "\n--- in:\n" << out;
  }
  std::string json = Ok("ls --json");
  for (const char* want : {"\"name\": \"pools\"", "\"name\": \"vm1\"", "\"info\": \"tank-vm1 (tank/vm1)\"",
                           "\"name\": \"mapped_lun0\""}) {
    EXPECT_NE(json.find(want), std::string::npos) << want << "\n" << json;
  }
  // ls/rm: the aliases of every list and delete command.
  // The backing filesystem's free space moves with whatever else writes to
  // it between the two calls: compare the JSON with that one figure masked.
  auto without_backing_free = [](const std::string& j) {
    std::string s = std::regex_replace(j, std::regex(R"(("backing_free[a-z_]*": )[0-9]+)"), "$1N");
    return std::regex_replace(s, std::regex(R"(("backing": \{[^}]*"free": )[0-9]+)"), "$1N");
  };
  EXPECT_EQ(without_backing_free(Ok("--json pool ls")), without_backing_free(Ok("--json pool list")));
  EXPECT_EQ(Ok("lun ls tank"), Ok("lun list tank"));
  EXPECT_EQ(Ok("backstore ls"), Ok("backstore list"));
  EXPECT_EQ(Ok("export ls"), Ok("export list"));
  Ok("lun rm tank/plain");
  Ok("backstore rm tank/local --force");
  Ok("lun rm tank/local");
  Ok("lun rm tank/vm1 --force");
  Ok("pool rm tank");
  EXPECT_NE(Ok("ls").find("o- pools [" + pools + ": 0 pools]"), std::string::npos);
}

TEST_F(Cli, LioCommandsWithoutConfigfsSayWhatToDo) {
  std::filesystem::remove_all(host.configfs);
  for (const char* cmd : {"backstore list", "export list", "unexport tank/vm1", "backstore delete tank/vm1"}) {
    Err(cmd, "mount -t configfs");
  }
}

TEST_F(Cli, BackstoreAndUnexportErrors) {
  Pool();
  Ok("lun create tank/vm1 --size 1M");
  Err("backstore delete tank/vm1", "has no backstore");
  Err("unexport tank/vm1", "has no backstore");
  Ok("backstore create tank/vm1 --backstore-name custom");
  EXPECT_TRUE(Exists(host.T("core/user_0/custom")));
  Ok("lun create tank/vm2 --size 1M");
  Err("backstore create tank/vm2 --backstore-name custom", "already exists");
  Err("backstore create tank/vm2 --backstore-name 'bad name'", "invalid backstore name");
  Ok("backstore delete tank/vm1");
  EXPECT_FALSE(Exists(host.T("core/user_0")));
}

TEST_F(Cli, SaveToAnUnwritablePlaceFails) {
  Pool();
  Err("save " + host.dir.path() + "/no/such/dir/c.yaml", "cannot write");
}

TEST_F(Cli, ExportErrorsRollBackTheBackstoreTheyMade) {
  Pool();
  Ok("lun create tank/vm1 --size 64M");
  Err("export iscsi tank/vm1 --target bogus", "invalid target IQN");
  Err("export iscsi tank/vm1 --portal 1.2.3.4", "invalid portal");
  Err("export iscsi tank/vm1 --initiator iqn.1998-01.com.vmware:esx1 --chap-user u --chap-password short",
      "12 to 16");
  Err("export iscsi tank/vm1 --chap-user u --chap-password 0123456789ab", "name one with --initiator");
  Err("export iscsi tank/nope --demo-mode", "not found");
  // A negative number is refused by the parser, as for export loop (it used
  // to mean "lowest free" silently).
  Err("export iscsi tank/vm1 --lun -1", "--lun: Value -1 not in range", 2);
  EXPECT_FALSE(Exists(host.T("core/user_0")));
  Err("unexport tank/vm1", "has no backstore");
}

// ---------------------------------------------------------------- who may log in

TEST_F(Cli, ExportWithoutInitiatorIsRefusedAndChangesNothing) {
  Pool();
  Ok("lun create tank/vm1 --size 64M");
  Ok("lun create tank/vm2 --size 64M --backstore");
  const std::string want =
      "refusing to export tank/vm1 to every initiator: name one with --initiator IQN (repeatable), "
      "or pass --demo-mode to allow any initiator (lab use)";
  std::string before = testing::Snapshot(host.configfs);
  Err("export iscsi tank/vm1", want);
  Err("export iscsi tank/vm1 --target iqn.2024-01.io.cowstore:test.tank --portal 127.0.0.1:3260", want);
  Err("--json export iscsi tank/vm2", "refusing to export tank/vm2 to every initiator");
  EXPECT_EQ(testing::Snapshot(host.configfs), before);
  EXPECT_FALSE(Exists(host.T("iscsi")));
  // Refused before the backstore is even tried (a made-and-removed one would
  // leave the same tree): without tcmu-runner the refusal still comes first.
  std::filesystem::remove_all(host.proc + "/4242");
  Err("export iscsi tank/vm1", want);
  EXPECT_EQ(testing::Snapshot(host.configfs), before);
}

TEST_F(Cli, DemoModeIsAskedForAndWarnedAbout) {
  Pool();
  Ok("lun create tank/vm1 --size 64M");
  std::string tgt = "iqn.2024-01.io.cowstore:test.tank";
  CmdResult r = Cowctl("--json export iscsi tank/vm1 --demo-mode --target " + tgt);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("\"demo_mode\": true"), std::string::npos) << r.out;
  EXPECT_EQ(r.err, "cowctl: warning: demo mode: any initiator can log in to " + tgt +
                       " and write to tank/vm1 (no ACLs)\n");
  std::string tpg = host.T("iscsi/" + tgt + "/tpgt_1");
  EXPECT_EQ(ReadText(tpg + "/attrib/generate_node_acls"), "1");
  EXPECT_EQ(ReadText(tpg + "/attrib/cache_dynamic_acls"), "1");
  EXPECT_EQ(ReadText(tpg + "/attrib/demo_mode_write_protect"), "0");
  EXPECT_EQ(ReadText(tpg + "/attrib/authentication"), "0");
  EXPECT_EQ(ReadText(tpg + "/enable"), "1");
  EXPECT_TRUE(Exists(tpg + "/np/0.0.0.0:3260"));
  EXPECT_FALSE(Exists(tpg + "/acls"));
  // Named initiators: no demo mode, and JSON says so.
  Ok("lun create tank/vm2 --size 64M");
  r = Cowctl("--json export iscsi tank/vm2 -i iqn.1998-01.com.vmware:esx1");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("\"demo_mode\": false"), std::string::npos) << r.out;
  EXPECT_EQ(r.err, "");
  EXPECT_NE(Cowctl("export iscsi --help").out.find("--demo-mode"), std::string::npos);
}

TEST_F(Cli, DemoModeWithInitiatorIsAUsageError) {
  Pool();
  Ok("lun create tank/vm1 --size 64M");
  std::string before = testing::Snapshot(host.configfs);
  Err("export iscsi tank/vm1 --demo-mode -i iqn.1998-01.com.vmware:esx1", "--demo-mode: cannot be used with --initiator",
      2);
  Err("export iscsi tank/vm1 --initiator iqn.1998-01.com.vmware:esx1 --demo-mode", "cannot be used with --initiator", 2);
  EXPECT_EQ(testing::Snapshot(host.configfs), before);
}

TEST_F(Cli, ADemoModeTargetTakesMoreLunsOnlyWithDemoMode) {
  Pool();
  Ok("lun create tank/vm1 --size 64M");
  Ok("lun create tank/vm2 --size 64M");
  std::string tgt = "iqn.2024-01.io.cowstore:test.tank";
  Ok("export iscsi tank/vm1 --target " + tgt + " --demo-mode");
  std::string before = testing::Snapshot(host.configfs);
  Err("export iscsi tank/vm2 --target " + tgt,
      "refusing to add tank/vm2 to " + tgt + ": that target lets every initiator log in (demo mode");
  Err("export iscsi tank/vm2 --target " + tgt + " -i iqn.1998-01.com.vmware:esx1", "--initiator would keep nobody out");
  EXPECT_EQ(testing::Snapshot(host.configfs), before);
  CmdResult r = Cowctl("export iscsi tank/vm2 --target " + tgt + " --demo-mode");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("LUN 1 of " + tgt), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("warning: demo mode"), std::string::npos) << r.err;
}

// A target that was given ACLs and later put in demo mode by hand
// (targetcli: set attribute generate_node_acls=1) is a demo-mode target too.
TEST_F(Cli, DemoModeSetByTargetcliCounts) {
  Pool();
  Ok("lun create tank/vm1 --size 64M");
  Ok("lun create tank/vm2 --size 64M");
  std::string tgt = "iqn.2024-01.io.cowstore:test.tank";
  Ok("export iscsi tank/vm1 --target " + tgt + " -i iqn.1998-01.com.vmware:esx1");
  WriteText(host.T("iscsi/" + tgt + "/tpgt_1/attrib/generate_node_acls"), "1\n");
  std::string before = testing::Snapshot(host.configfs);
  Err("export iscsi tank/vm2 --target " + tgt, "lets every initiator log in (demo mode");
  Err("export iscsi tank/vm2 --target " + tgt + " -i iqn.1998-01.com.vmware:esx1", "would keep nobody out");
  EXPECT_EQ(testing::Snapshot(host.configfs), before);
}

TEST_F(Cli, AnAclTargetTakesMoreLunsWithoutInitiator) {
  Pool();
  Ok("lun create tank/vm1 --size 64M");
  Ok("lun create tank/vm2 --size 64M");
  Ok("lun create tank/vm3 --size 64M");
  std::string tgt = "iqn.2024-01.io.cowstore:test.tank", esx = "iqn.1998-01.com.vmware:esx1";
  std::string tpg = host.T("iscsi/" + tgt + "/tpgt_1");
  Ok("export iscsi tank/vm1 --target " + tgt + " -i " + esx);
  // --demo-mode does not open a target that has ACLs.
  std::string before = testing::Snapshot(host.configfs);
  Err("export iscsi tank/vm2 --target " + tgt + " --demo-mode", "admits only initiators with an ACL");
  EXPECT_EQ(testing::Snapshot(host.configfs), before);
  // Neither flag: the LUN is added and, as targetcli does, mapped into the ACLs the target has.
  CmdResult r = Cowctl("export iscsi tank/vm2 --target " + tgt);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "exported tank/vm2 as LUN 1 of " + tgt + "\nseen by " + esx + "\nESXi lists it as " +
                       NaaOf("tank-vm2") + "\n");
  EXPECT_EQ(r.err, "");
  EXPECT_FALSE(Exists(tpg + "/attrib/generate_node_acls"));
  EXPECT_TRUE(Exists(tpg + "/lun/lun_1"));
  EXPECT_TRUE(Exists(tpg + "/acls/" + esx + "/lun_1"));
  // --no-auto-map and no -i: added, seen by nobody, and cowctl says so.
  r = Cowctl("export iscsi tank/vm3 --target " + tgt + " --no-auto-map");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "exported tank/vm3 as LUN 2 of " + tgt + "\nESXi lists it as " + NaaOf("tank-vm3") + "\n");
  EXPECT_EQ(r.err, "cowctl: note: " + tgt + " admits only the initiators in its ACLs, and none maps LUN 2, so no "
                   "initiator sees it: map it with --initiator IQN\n");
  EXPECT_TRUE(Exists(tpg + "/lun/lun_2"));
  EXPECT_FALSE(Exists(tpg + "/acls/" + esx + "/lun_2"));
  // -i maps an initiator to it.
  Ok("export iscsi tank/vm3 --target " + tgt + " -i " + esx + " --no-auto-map");
  EXPECT_TRUE(Exists(tpg + "/acls/" + esx + "/lun_2"));
}

// ---------------------------------------------------------------- who sees a LUN (auto_add_mapped_luns)

std::string Mappings(const std::string& tpg) { return testing::AclMappings(tpg + "/acls"); }

class CliMap : public Cli {
 protected:
  const std::string tgt = "iqn.2024-01.io.cowstore:test.tank";
  const std::string esx1 = "iqn.1998-01.com.vmware:esx1", esx2 = "iqn.1998-01.com.vmware:esx2",
                    esx3 = "iqn.1998-01.com.vmware:esx3";
  std::string tpg = host.T("iscsi/" + tgt + "/tpgt_1");
  void SetUp() override {
    Pool();
    for (const char* l : {"vm1", "vm2", "vm3"}) Ok(std::string("lun create tank/") + l + " --size 64M");
  }
  // Every mapping, with ACL x mapping TPG LUN n as x:lun_n->lun_n.
  std::string All(const std::vector<std::string>& acls, const std::vector<int>& luns) {
    std::vector<std::string> lines;
    for (const auto& a : acls) {
      for (int n : luns) lines.push_back(a + ":lun_" + std::to_string(n) + "->lun_" + std::to_string(n));
    }
    std::sort(lines.begin(), lines.end());
    std::string out;
    for (const auto& l : lines) out += l + " ";
    return out;
  }
};

TEST_F(CliMap, ANewLunIsSeenByEveryInitiatorTheTargetAllows) {
  Ok("export iscsi tank/vm1 --target " + tgt + " -i " + esx1 + " -i " + esx2);
  // Without -i: both hosts see it.
  CmdResult r = Cowctl("--json export iscsi tank/vm2 --target " + tgt);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_NE(r.out.find("\"mapped_to\": [\n    \"" + esx1 + "\",\n    \"" + esx2 + "\"\n  ]"), std::string::npos)
      << r.out;
  EXPECT_EQ(Mappings(tpg), All({esx1, esx2}, {0, 1}));
  // With -i naming one of them: the other one sees it too.
  r = Cowctl("export iscsi tank/vm3 --target " + tgt + " -i " + esx1);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "exported tank/vm3 as LUN 2 of " + tgt + "\nseen by " + esx1 + ", " + esx2 + "\nESXi lists it as " +
                       NaaOf("tank-vm3") + "\n");
  EXPECT_EQ(Mappings(tpg), All({esx1, esx2}, {0, 1, 2}));
}

TEST_F(CliMap, ANewInitiatorSeesEveryLunOfTheTarget) {
  Ok("export iscsi tank/vm1 --target " + tgt + " -i " + esx1);
  Ok("export iscsi tank/vm2 --target " + tgt + " -i " + esx1);
  CmdResult r = Cowctl("export iscsi tank/vm3 --target " + tgt + " -i " + esx2);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "exported tank/vm3 as LUN 2 of " + tgt + "\nseen by " + esx1 + ", " + esx2 + "\nESXi lists it as " +
                       NaaOf("tank-vm3") + "\n");
  EXPECT_EQ(Mappings(tpg), All({esx1, esx2}, {0, 1, 2}));
  // Naming a new initiator on a LUN already exported gives it every LUN too.
  r = Cowctl("--json export iscsi tank/vm1 --target " + tgt + " -i " + esx3);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("\"lun_number\": 0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(esx3), std::string::npos) << r.out;
  EXPECT_EQ(Mappings(tpg), All({esx1, esx2, esx3}, {0, 1, 2}));
}

TEST_F(CliMap, NoAutoMapMapsOnlyTheNamedInitiatorsToTheNewLun) {
  EXPECT_NE(Cowctl("export iscsi --help").out.find("--no-auto-map"), std::string::npos);
  Ok("export iscsi tank/vm1 --target " + tgt + " -i " + esx1 + " -i " + esx2);
  CmdResult r = Cowctl("--json export iscsi tank/vm2 --target " + tgt + " -i " + esx3 + " --no-auto-map");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("\"mapped_to\": [\n    \"" + esx3 + "\"\n  ]"), std::string::npos) << r.out;
  EXPECT_EQ(Mappings(tpg), All({esx1, esx2}, {0}) + esx3 + ":lun_1->lun_1 ");
  r = Cowctl("--json export iscsi tank/vm3 --target " + tgt + " --no-auto-map");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("\"mapped_to\": []"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("none maps LUN 2, so no initiator sees it"), std::string::npos) << r.err;
  EXPECT_EQ(Mappings(tpg), All({esx1, esx2}, {0}) + esx3 + ":lun_1->lun_1 ");
}

TEST_F(CliMap, ADemoModeTargetHasNothingToMap) {
  Ok("export iscsi tank/vm1 --target " + tgt + " --demo-mode");
  CmdResult r = Cowctl("--json export iscsi tank/vm2 --target " + tgt + " --demo-mode");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("\"mapped_to\": []"), std::string::npos) << r.out;
  EXPECT_EQ(r.err.find("note:"), std::string::npos) << r.err;
  EXPECT_FALSE(Exists(tpg + "/acls"));
}

TEST_F(CliMap, UnexportRemovesTheLunFromEveryInitiator) {
  Ok("export iscsi tank/vm1 --target " + tgt + " -i " + esx1 + " -i " + esx2);
  Ok("export iscsi tank/vm2 --target " + tgt + " -i " + esx3);
  EXPECT_EQ(Mappings(tpg), All({esx1, esx2, esx3}, {0, 1}));
  Ok("unexport tank/vm1");
  EXPECT_FALSE(Exists(tpg + "/lun/lun_0"));
  EXPECT_EQ(Mappings(tpg), All({esx1, esx2, esx3}, {1}));  // and nothing dangles
  Ok("unexport tank/vm2 --backstore");
  EXPECT_FALSE(Exists(host.T("iscsi/" + tgt)));
}

TEST_F(CliMap, SaveAndRestoreGiveTheMappingExportMade) {
  Ok("export iscsi tank/vm1 --target " + tgt + " --portal 127.0.0.1:3260 -i " + esx1);
  Ok("export iscsi tank/vm2 --target " + tgt + " -i " + esx2);
  const std::string exported = Mappings(tpg);
  EXPECT_EQ(exported, All({esx1, esx2}, {0, 1}));
  const std::string tree = testing::Snapshot(host.T("iscsi"));
  std::string file = host.dir.path() + "/c.yaml";
  Ok("save " + file);
  // Reboot: LIO's configuration is gone.
  std::filesystem::remove_all(host.configfs + "/target");
  std::filesystem::create_directories(host.configfs + "/target/core");
  CmdResult r = Cowctl("restore " + file);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(Mappings(tpg), exported);
  EXPECT_EQ(testing::Snapshot(host.T("iscsi")), tree);
  EXPECT_NE(Ok("restore " + file).find("nothing to do"), std::string::npos);
  EXPECT_EQ(Mappings(tpg), exported);
}

// The narrowed target of the tests below: esx1 sees LUN 0 and 1, esx2 only
// LUN 0 (write-protected, as targetcli's write_protect=1 leaves it), esx3 none.
class CliNarrow : public CliMap {
 protected:
  std::string file = host.dir.path() + "/c.yaml";
  std::string narrowed;
  void SetUp() override {
    CliMap::SetUp();
    Ok("export iscsi tank/vm1 --target " + tgt + " -i " + esx1 + " -i " + esx2);
    Ok("export iscsi tank/vm2 --target " + tgt + " -i " + esx1 + " --no-auto-map");
    Ok("export iscsi tank/vm3 --target " + tgt + " -i " + esx3 + " --no-auto-map");
    Ok("unexport tank/vm3");  // esx3's ACL stays, mapping nothing
    testing::WriteText(tpg + "/acls/" + esx2 + "/lun_0/write_protect", "1");
    narrowed = Mappings(tpg);
    ASSERT_EQ(narrowed, All({esx1}, {0, 1}) + esx2 + ":lun_0->lun_0 ");
    ASSERT_TRUE(Exists(tpg + "/acls/" + esx3));
    Ok("save " + file);
  }
  // Reboot: LIO's configuration is gone.
  void Wipe() {
    std::filesystem::remove_all(host.configfs + "/target");
    std::filesystem::create_directories(host.configfs + "/target/core");
  }
  // The saved file with `from` (which must be in it) replaced by `to`; and
  // the line `from` is on.
  int Edit(const std::string& from, const std::string& to) {
    std::string t = ReadText(file);
    auto at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from << " not in\n" << t;
    if (at == std::string::npos) return 0;
    int line = 1 + static_cast<int>(std::count(t.begin(), t.begin() + static_cast<long>(at), '\n'));
    WriteText(file, t.replace(at, from.size(), to));
    return line;
  }
};

TEST_F(CliNarrow, ANarrowedMappingSurvivesSaveWipeRestore) {
  std::string yaml = ReadText(file);
  EXPECT_NE(yaml.find("version: 3\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("      - initiator: " + esx1 + "\n        mapped_luns:\n          - {lun: 0, mapped_lun: 0}\n"
                      "          - {lun: 1, mapped_lun: 1}\n"),
            std::string::npos)
      << yaml;
  EXPECT_NE(yaml.find("      - initiator: " + esx2 + "\n        mapped_luns:\n"
                      "          - {lun: 0, mapped_lun: 0, write_protect: true}\n"),
            std::string::npos)
      << yaml;
  EXPECT_NE(yaml.find("      - initiator: " + esx3 + "\n        mapped_luns: []\n"), std::string::npos) << yaml;
  const std::string tree = testing::Snapshot(host.T("iscsi"));
  Wipe();
  CmdResult r = Cowctl("restore " + file);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_NE(r.out.find("mapped LUN 1 of " + tgt + " into " + esx1 + " as LUN 1\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("mapped LUN 0 of " + tgt + " into " + esx2 + " as LUN 0 (write-protected)\n"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("into " + esx3), std::string::npos) << r.out;
  EXPECT_EQ(Mappings(tpg), narrowed);  // esx2 does not see LUN 1, esx3 sees nothing
  EXPECT_EQ(ReadText(tpg + "/acls/" + esx2 + "/lun_0/write_protect"), "1");
  EXPECT_TRUE(Exists(tpg + "/acls/" + esx3));
  EXPECT_EQ(testing::Snapshot(host.T("iscsi")), tree);
  // Again: nothing to do, nothing said, nothing changed.
  r = Cowctl("restore " + file);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "nothing to do: everything in " + file + " is in place\n");
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(testing::Snapshot(host.T("iscsi")), tree);
  std::string again = host.dir.path() + "/again.yaml";
  Ok("save " + again);
  EXPECT_EQ(ReadText(again), ReadText(file));
}

TEST_F(CliNarrow, DryRunSaysWhatItWouldMap) {
  Wipe();
  std::string out = Ok("restore " + file + " --dry-run");
  EXPECT_NE(out.find("would map LUN 1 of " + tgt + " into " + esx1 + " as LUN 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("would map LUN 0 of " + tgt + " into " + esx2 + " as LUN 0 (write-protected)\n"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("LUN 1 of " + tgt + " into " + esx2), std::string::npos) << out;
  EXPECT_FALSE(Exists(host.T("iscsi")));
}

TEST_F(CliNarrow, AFileWithoutMappedLunsMapsEveryLunAsBefore) {
  // What the previous cowctl wrote: version 1, no mapped_luns.
  std::string old, line;
  std::istringstream in(ReadText(file));
  while (std::getline(in, line)) {
    if (line.find("mapped_lun") == std::string::npos && line.find("uuid:") == std::string::npos) old += line + "\n";
  }
  old.replace(old.find("version: 3"), 10, "version: 1");
  WriteText(file, old);
  Wipe();
  CmdResult r = Cowctl("restore " + file);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(Mappings(tpg), All({esx1, esx2, esx3}, {0, 1}));
  EXPECT_NE(Ok("restore " + file).find("nothing to do"), std::string::npos);
}

TEST_F(CliNarrow, AMappedLunTheTargetLacksIsRefusedWithFileLineAndChangesNothing) {
  Wipe();
  int line = Edit("{lun: 0, mapped_lun: 0, write_protect: true}", "{lun: 4, mapped_lun: 0, write_protect: true}");
  const std::string tree = testing::Snapshot(host.configfs), lun_list = Ok("lun list");
  Err("restore " + file, file + ":" + std::to_string(line) + ": iscsi[0].acls[1].mapped_luns[0].lun: target " + tgt +
                             " has no LUN 4 (its luns: 0, 1)");
  EXPECT_EQ(testing::Snapshot(host.configfs), tree);  // not even the backstores
  EXPECT_EQ(Ok("lun list"), lun_list);
  Err("restore " + file + " --dry-run", file + ":" + std::to_string(line) + ": iscsi[0].acls[1].mapped_luns[0].lun");
}

TEST_F(CliNarrow, RestoreAddsAndWarnsAboutAMappingTheFileLacks) {
  // esx2 is given LUN 1 after the save, and its write protection is lifted.
  Ok("export iscsi tank/vm2 --target " + tgt + " -i " + esx2 + " --no-auto-map");
  testing::WriteText(tpg + "/acls/" + esx2 + "/lun_0/write_protect", "0");
  CmdResult r = Cowctl("restore " + file);
  ASSERT_EQ(r.rc, 0) << r.err;
  // The listed mapping comes back as the file says; the extra one is left, and said.
  EXPECT_EQ(r.out, "write-protected LUN 0 of " + esx2 + " on " + tgt + "\n");
  EXPECT_EQ(r.err, "cowctl: warning: " + file + ": " + esx2 + " sees LUN 1 of " + tgt +
                       " as LUN 1, which the file does not map; left as it is (restore never removes a mapping: "
                       "remove it with targetcli if it should go)\n");
  EXPECT_EQ(ReadText(tpg + "/acls/" + esx2 + "/lun_0/write_protect"), "1");
  EXPECT_EQ(Mappings(tpg), narrowed + esx2 + ":lun_1->lun_1 ");
}

TEST_F(Cli, RestoreBringsBackADemoModeTarget) {
  Pool();
  Ok("lun create tank/vm1 --size 64M");
  Ok("lun create tank/vm2 --size 64M");
  std::string tgt = "iqn.2024-01.io.cowstore:test.tank";
  std::string tpg = host.T("iscsi/" + tgt + "/tpgt_1");
  Ok("export iscsi tank/vm1 --target " + tgt + " --portal 127.0.0.1:3260 --demo-mode");
  Ok("export iscsi tank/vm2 --target " + tgt + " --demo-mode");
  std::string file = host.dir.path() + "/c.yaml";
  Ok("save " + file);
  EXPECT_NE(ReadText(file).find("acls:\n      []"), std::string::npos) << ReadText(file);  // no ACLs: demo mode
  // Reboot: LIO's configuration is gone.
  std::filesystem::remove_all(host.configfs + "/target");
  std::filesystem::create_directories(host.configfs + "/target/core");
  CmdResult r = Cowctl("restore " + file);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");  // restoring is the explicit act: no refusal, no warning
  EXPECT_NE(r.out.find("exported tank/vm1 as LUN 0 of " + tgt), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("exported tank/vm2 as LUN 1 of " + tgt), std::string::npos) << r.out;
  EXPECT_EQ(ReadText(tpg + "/attrib/generate_node_acls"), "1");
  EXPECT_EQ(ReadText(tpg + "/attrib/demo_mode_write_protect"), "0");
  EXPECT_TRUE(Exists(tpg + "/np/127.0.0.1:3260"));
  EXPECT_NE(Ok("restore " + file).find("nothing to do"), std::string::npos);
  // One LUN lost from the existing demo-mode target: restore adds it back there.
  Ok("unexport tank/vm2");
  r = Cowctl("restore " + file);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("exported tank/vm2 as LUN 1 of " + tgt), std::string::npos) << r.out;
  std::string again = host.dir.path() + "/again.yaml";
  Ok("save " + again);
  EXPECT_EQ(ReadText(again), ReadText(file));
}

TEST_F(Cli, LoopbackExportAndUnexport) {
  Pool();
  Ok("lun create tank/vm1 --size 64M --backstore");
  EXPECT_NE(Ok("export loop tank/vm1").find("naa.5001405"), std::string::npos);
  EXPECT_NE(Ok("export list --json").find("\"fabric\": \"loopback\""), std::string::npos);
  Ok("unexport tank/vm1 --backstore");
  EXPECT_FALSE(Exists(Bs()));
  EXPECT_NE(Ok("export list").find("no cowstore exports"), std::string::npos);
}

// --lun places a loopback export as restore places a saved one
// (Lio::ExportLoopback): a number another backstore holds is refused, naming
// it, and so is a number other than the one the LUN already has.
TEST_F(Cli, LoopbackExportAtAGivenLunNumber) {
  Pool();
  Ok("lun create tank/vm1 --size 8M --backstore");
  Ok("lun create tank/vm2 --size 8M --backstore");
  std::string out = Ok("export loop tank/vm1 --lun 3");
  const size_t at = out.find("over tcm_loop as ");
  ASSERT_NE(at, std::string::npos) << out;
  const size_t from = at + std::string("over tcm_loop as ").size();
  const std::string wwn = out.substr(from, out.find(' ', from) - from);  // the target cowctl chose
  const std::string tpg = host.T("loopback/" + wwn + "/tpgt_1");
  EXPECT_NE(out.find(" LUN 3 "), std::string::npos) << out;
  EXPECT_TRUE(Exists(tpg + "/lun/lun_3")) << tpg;
  EXPECT_FALSE(Exists(tpg + "/lun/lun_0"));
  EXPECT_NE(Ok("export loop tank/vm1 --lun 3").find(" LUN 3 "), std::string::npos);  // idempotent
  EXPECT_NE(Ok("--json export loop tank/vm1").find("\"lun_number\": 3"), std::string::npos);
  Err("export loop tank/vm1 --lun 4", "tank/vm1 is already LUN 3 of loopback naa.5001405");
  Err("export loop tank/vm2 --lun 65536", "LUN number must be 0..65535");
  Err("export loop tank/vm2 --lun -1", "--lun: Value -1 not in range", 2);
  // vm2 holds LUN 5 of that target (as a restore of a saved file can leave
  // it); vm1, unexported, cannot take number 5 there.
  std::string vm2;
  for (const auto& hba : std::filesystem::directory_iterator(host.T("core"))) {
    if (Exists(hba.path().string() + "/tank-vm2")) vm2 = hba.path().string() + "/tank-vm2";
  }
  ASSERT_FALSE(vm2.empty());
  std::filesystem::create_directories(tpg + "/lun/lun_5");
  std::filesystem::create_directory_symlink(vm2, tpg + "/lun/lun_5/0123456789");
  Ok("unexport tank/vm1");
  const std::string hba2 = std::filesystem::path(vm2).parent_path().filename().string();
  const std::string before = testing::Snapshot(host.configfs);
  Err("export loop tank/vm1 --lun 5", "LUN 5 of loopback " + wwn + " is taken by " + hba2 + "/tank-vm2");
  EXPECT_EQ(testing::Snapshot(host.configfs), before);
  EXPECT_NE(Ok("export loop tank/vm1").find(" LUN 0 "), std::string::npos);  // no number: lowest free
}

TEST_F(Cli, VaaiStatusAsEsxiListsIt) {
  Pool();
  Ok("lun create tank/vm1 --size 64M --copy-group esx");
  Ok("lun create tank/plain --size 64M");
  std::string out = Ok("vaai status");
  EXPECT_NE(out.find("ATS Status: supported"), std::string::npos) << out;
  EXPECT_NE(out.find("Clone Status: supported (within copy group 'esx')"), std::string::npos) << out;
  EXPECT_NE(out.find("Delete Status: supported"), std::string::npos);
  EXPECT_NE(out.find("Handler counters: unavailable"), std::string::npos);
  EXPECT_NE(Ok("vaai status tank/plain").find("unsupported (not exported)"), std::string::npos);
  Err("vaai status tank/nope", "not found");
}

// ESXi names a device by its NAA identifier (esxcli storage core device
// list, vaai status get): cowctl shows the same one wherever it names a LUN.
TEST_F(Cli, TheNaaEsxiShowsIsPrinted) {
  Pool();
  Ok("lun create tank/vm1 --size 64M");
  // Not exported yet: the identifier its backstore will have.
  std::string json = Ok("lun show tank/vm1 --json");
  std::string wwn = json.substr(json.find("\"wwn\": \"") + 8, 36);
  const std::string naa = NaaName(wwn);
  ASSERT_EQ(naa.size(), 36u);
  EXPECT_EQ(naa.substr(0, 11), "naa.6001405");
  EXPECT_NE(json.find("\"naa\": \"" + naa + "\""), std::string::npos) << json;
  EXPECT_NE(Ok("lun show tank/vm1").find("NAA:        " + naa + " (as ESXi will list it once exported)"),
            std::string::npos)
      << Ok("lun show tank/vm1");
  std::string out = Ok("export iscsi tank/vm1 --target iqn.2024-01.io.cowstore:test.tank -i iqn.1998-01.com.vmware:esx1");
  EXPECT_NE(out.find("ESXi lists it as " + naa + "\n"), std::string::npos) << out;
  EXPECT_EQ(NaaOf("tank-vm1"), naa);
  EXPECT_NE(Ok("lun show tank/vm1").find(naa + " (as ESXi lists it)"), std::string::npos);
  out = Ok("vaai status tank/vm1");
  EXPECT_EQ(out.rfind(naa + " (tank/vm1)\n   VAAI Plugin Name:", 0), 0u) << out;
  EXPECT_NE(Ok("vaai status --json").find("\"naa\": \"" + naa + "\""), std::string::npos);
  EXPECT_NE(Ok("export list").find(naa), std::string::npos);
  EXPECT_NE(Ok("export list --json").find("\"naa\": \"" + naa + "\""), std::string::npos);
  // A backstore with another serial (restored, or made by targetcli): its NAA is the one shown.
  testing::WriteText(Bs() + "/wwn/vpd_unit_serial", "0ec52bfc-a7bb-48b7-94a4-24e650d2d1ef");
  EXPECT_NE(Ok("lun show tank/vm1").find("naa.60014050ec52bfca7bb48b794a424e65 (as ESXi lists it)"), std::string::npos)
      << Ok("lun show tank/vm1");
  out = Ok("export loop tank/vm1");
  EXPECT_NE(out.find("naa.60014050ec52bfca7bb48b794a424e65)"), std::string::npos) << out;
}

TEST_F(Cli, TopDegradesGracefully) {
  Pool();
  CmdResult r = Cowctl("top --count 1 --interval 0.1");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("nothing to show"), std::string::npos) << r.out;
  Err("top --interval 0", "at least 0.1");
}

TEST_F(Cli, EveryJsonOutputParses) {
  if (std::system("python3 -c pass >/dev/null 2>&1") != 0) GTEST_SKIP() << "no python3 to parse JSON";
  Pool();
  Ok("lun create tank/vm1 --size 8M --copy-group \"esx\"");
  Ok("export iscsi tank/vm1 --initiator iqn.1998-01.com.vmware:esx1");
  std::string file = host.dir.path() + "/c.yaml";
  for (const std::string& cmd : std::vector<std::string>{"pool list", "pool show tank", "pool check tank", "pool scrub tank", "lun list", "lun show tank/vm1",
                          "backstore list", "export list", "vaai status", "top -n 1 -d 0.1",
                          "save " + file, "restore " + file, "lun snapshot tank/vm1 s1", "pool upgrade tank",
                          "lun resize tank/vm1 --size 16M"}) {
    std::string out = Ok("--json " + cmd);
    testing::WriteText(host.dir.path() + "/j.json", out);
    EXPECT_EQ(std::system(("python3 -c 'import json,sys; json.load(open(sys.argv[1]))' " + host.dir.path() +
                           "/j.json").c_str()),
              0)
        << cmd << ":\n" << out;
  }
}

// ---------------------------------------------------------------- save / restore

TEST_F(Cli, SaveClearRestoreIsIdempotent) {
  Pool();
  Ok("lun create tank/vm1 --size 64M --copy-group esx");
  Ok("lun create tank/vm2 --size 32M --block-size 4096");
  Ok("lun create tank/offline --size 8M");
  std::string tgt = "iqn.2024-01.io.cowstore:test.tank";
  Ok("export iscsi tank/vm1 --target " + tgt + " --initiator iqn.1998-01.com.vmware:esx1");
  Ok("export iscsi tank/vm2 --target " + tgt + " --initiator iqn.1998-01.com.vmware:esx1");
  Ok("export loop tank/vm2");
  std::string file = host.dir.path() + "/etc/cowstore.yaml";
  Ok("save " + file);
  std::string yaml = ReadText(file);
  EXPECT_NE(yaml.find("copy_group: esx"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find(tgt), std::string::npos);
  std::string wwn = ReadText(Bs() + "/wwn/vpd_unit_serial");
  // Reboot: LIO's configuration is gone.
  std::filesystem::remove_all(host.configfs + "/target");
  std::filesystem::create_directories(host.configfs + "/target/core");
  EXPECT_NE(Ok("restore " + file + " --dry-run").find("would create backstore tank-vm1"), std::string::npos);
  EXPECT_FALSE(Exists(Bs()));
  std::string out = Ok("restore " + file);
  EXPECT_NE(out.find("exported tank/vm1 as LUN 0 of " + tgt), std::string::npos) << out;
  EXPECT_EQ(ReadText(host.FakeHost::T("core/user_0/tank-vm1/wwn/vpd_unit_serial")), wwn);
  EXPECT_TRUE(Exists(host.T("iscsi/" + tgt + "/tpgt_1/lun/lun_1")));
  EXPECT_TRUE(Exists(host.T("iscsi/" + tgt + "/tpgt_1/acls/iqn.1998-01.com.vmware:esx1/lun_1")));
  EXPECT_NE(Ok("export list --json").find("loopback"), std::string::npos);
  EXPECT_NE(Ok("restore " + file).find("nothing to do"), std::string::npos);
  // Saving again gives the same file.
  std::string again = host.dir.path() + "/again.yaml";
  Ok("save " + again);
  EXPECT_EQ(ReadText(again), yaml);
}

TEST_F(Cli, RestoreCreatesMissingPoolsAndLunsOnlyWhenAsked) {
  std::string file = host.dir.path() + "/c.yaml";
  WriteText(file, "pools:\n  - name: fresh\n    size: 256M\n    allocation_unit: 64K\n    luns:\n"
                  "      - {name: a, size: 8M}\n");
  CmdResult r = Cowctl("restore " + file);
  EXPECT_EQ(r.rc, 3) << r.out << r.err;
  EXPECT_FALSE(Exists(pools + "/fresh"));
  EXPECT_NE(r.err.find("cowctl: pool fresh: " + pools + "/fresh is missing"), std::string::npos) << r.err;
  std::string out = Ok("restore --create-missing " + file);
  EXPECT_NE(out.find("created pool fresh (empty"), std::string::npos) << out;
  EXPECT_NE(out.find("created LUN fresh/a (empty"), std::string::npos) << out;
  EXPECT_EQ(out.find("at " + pools), std::string::npos) << out;  // no pool-create chatter
  EXPECT_NE(Ok("lun list").find("fresh/a"), std::string::npos);
  EXPECT_NE(Ok("restore " + file).find("nothing to do"), std::string::npos);
}

TEST_F(Cli, SaveAndRestoreKeepEachPoolsGrain) {
  Ok("pool create g --size 256M");  // the defaults: format 3, 64K AU, 4K grain
  Ok("pool create h --size 256M --allocation-unit 64K --grain 64K");
  std::string file = host.dir.path() + "/c.yaml";
  Ok("save " + file);
  std::string yaml = ReadText(file);
  EXPECT_NE(yaml.find("  - name: g\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("    allocation_unit: 65536\n    grain: 4096\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("    allocation_unit: 65536\n    soft_threshold:"), std::string::npos)
      << "no grain for a format 2 pool (older cowctl refuses unknown keys): " << yaml;
  // The pool's own UUID, as the store reads it from a format 3 superblock.
  {
    auto p = store::Pool::Open(store::DefaultEnv(), pools + "/g", {true});
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_NE(yaml.find("  - name: g\n    uuid: " + UuidString((*p)->uuid()) + "\n"), std::string::npos) << yaml;
    ASSERT_TRUE((*p)->Close().ok());
  }
  EXPECT_NE(Ok("restore " + file).find("nothing to do"), std::string::npos);
  std::filesystem::remove_all(pools);
  Ok("restore --create-missing " + file);
  EXPECT_EQ(FormatOf(pools + "/g"), 3u);
  EXPECT_NE(Ok("pool show g --json").find("\"allocation_unit\": 65536,\n  \"grain\": 4096,\n"), std::string::npos);
  EXPECT_EQ(FormatOf(pools + "/h"), 2u);
  EXPECT_NE(Ok("pool show h --json").find("\"allocation_unit\": 65536,\n  \"grain\": 65536,\n"), std::string::npos);
}

// A pool a newer cowstore rewrote in a format this cowctl does not know
// (its superblocks keep only the envelope in common): restore names the
// format and leaves the pool alone, and never reads a UUID out of it (a
// format 3 layout read as format 2's gives a wrong one).
TEST_F(Cli, RestoreRefusesAPoolOfAFormatItDoesNotKnow) {
  Ok("pool create g --size 256M --allocation-unit 64K --grain 4K");
  std::string file = host.dir.path() + "/c.yaml";
  Ok("save " + file);
  for (uint64_t slot : {0, 1}) testing::SetSuperblockFormat(pools + "/g", slot, 4, /*reseal=*/true);
  const std::string before = ReadText(pools + "/g").substr(0, 2 * store::kSuperblockSlot);
  for (const char* flags : {"", "--create-missing "}) {
    CmdResult r = Cowctl(std::string("restore ") + flags + file);
    EXPECT_EQ(r.rc, 3) << r.out << r.err;
    EXPECT_EQ(r.err.rfind("cowctl: pool g: " + pools + "/g has a cowstore superblock of format 4; this cowctl knows "
                          "formats 1 to 3 (made by a newer cowstore: upgrade cowctl): not restored\n", 0), 0u)
        << r.err;
    EXPECT_EQ(r.err.find("UUID"), std::string::npos) << r.err;
  }
  EXPECT_EQ(ReadText(pools + "/g").substr(0, 2 * store::kSuperblockSlot), before);
}

// A saved file keeps its meaning whatever pool create's defaults are: an
// entry without grain is format 2 at its allocation unit, and one without
// allocation_unit too is the 1 MiB format 2 pool every cowctl made before.
TEST_F(Cli, AFileWithoutGrainRestoresFormat2Pools) {
  std::string file = host.dir.path() + "/old.yaml";
  WriteText(file, "version: 3\npools:\n  - name: old\n    size: 256M\n    allocation_unit: 128K\n    luns: []\n"
                  "  - name: older\n    size: 256M\n    luns: []\n");
  Ok("restore --create-missing " + file);
  EXPECT_EQ(FormatOf(pools + "/old"), 2u);
  EXPECT_NE(Ok("pool show old --json").find("\"allocation_unit\": 131072,\n  \"grain\": 131072,\n"),
            std::string::npos);
  EXPECT_EQ(FormatOf(pools + "/older"), 2u);
  EXPECT_NE(Ok("pool show older --json").find("\"allocation_unit\": 1048576,\n  \"grain\": 1048576,\n"),
            std::string::npos);
  // And saved again, the file still says no grain (an older cowctl reads it).
  std::string again = host.dir.path() + "/again.yaml";
  Ok("save " + again);
  EXPECT_EQ(ReadText(again).find("grain"), std::string::npos) << ReadText(again);
}

TEST_F(Cli, ARestoredGrainTheStoreRefusesNamesFileLineAndField) {
  std::string file = host.dir.path() + "/bad.yaml";
  WriteText(file, "pools:\n  - name: g\n    size: 256M\n    allocation_unit: 64K\n    grain: 1M\n");
  Err("restore --create-missing " + file,
      file + ":5: pools[0].grain: grain of 1048576 bytes is larger than the allocation unit");
  EXPECT_FALSE(Exists(pools + "/g"));
}

TEST_F(Cli, RestoreErrorsNameFileLineField) {
  std::string file = host.dir.path() + "/bad.yaml";
  WriteText(file, "pools:\n  - name: tank\n    size: 1G\n    luns:\n      - name: vm1\n        size: huge\n");
  Err("restore " + file, file + ":6: pools[0].luns[0].size: invalid size 'huge'");
  Err("restore " + host.dir.path() + "/missing.yaml", "cannot read");
  EXPECT_FALSE(Exists(pools + "/tank"));
  WriteText(file, "pools:\n  - name: tank\n    size: 1G\n    luns:\n      - {name: vm1, size: 1M, backstore: t-vm1}\n");
  Pool();
  Ok("lun create tank/vm1 --size 1M");
  std::filesystem::remove_all(host.proc + "/4242");
  Err("restore " + file, "tcmu-runner is not running");
}

// ---------------------------------------------------------------- restore at boot

// A saved NAS: pool tank in the pool directory and pool nas on a file of
// another filesystem (/mnt/nas), each with a LUN exported to ESXi.
class Boot : public Cli {
 protected:
  std::string file = host.dir.path() + "/c.yaml";
  std::string mnt = host.dir.path() + "/mnt/nas";
  std::string tgt = "iqn.2024-01.io.cowstore:test.boot";
  std::string esx1 = "iqn.1998-01.com.vmware:esx1";
  void SetUp() override {
    Pool();
    std::filesystem::create_directories(mnt);
    Ok("pool create nas --size 1G --allocation-unit 64K --grain 64K --file " + mnt + "/nas.pool");  // format 2
    Ok("lun create tank/vm1 --size 8M");
    Ok("lun create nas/esxds --size 8M");
    Ok("export iscsi tank/vm1 --target " + tgt + " -i " + esx1);
    Ok("export iscsi nas/esxds --target " + tgt + " -i " + esx1);
    Ok("save " + file);
  }
  // LIO's configuration is gone, as after a reboot.
  void Reboot() {
    std::filesystem::remove_all(host.configfs + "/target");
    std::filesystem::create_directories(host.configfs + "/target/core");
  }
  // The NAS filesystem not mounted: an empty mount point.
  void Unmount() { std::filesystem::rename(mnt, mnt + ".away"), std::filesystem::create_directories(mnt); }
  void Mount() { std::filesystem::remove(mnt), std::filesystem::rename(mnt + ".away", mnt); }
  // Each entry of a pool directory or mount point: link target, or size and
  // superblocks (pool files are too large to compare whole).
  static std::string Pools(const std::string& dir) {
    std::string out;
    if (!Exists(dir)) return "(missing)\n";
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    for (const auto& n : names) {
      std::string p = dir + "/" + n;
      if (std::filesystem::is_symlink(p)) {
        out += n + " -> " + std::filesystem::read_symlink(p).string() + "\n";
        continue;
      }
      std::string head(8192, '\0');
      std::ifstream(p).read(head.data(), static_cast<std::streamsize>(head.size()));
      out += n + ": " + std::to_string(std::filesystem::file_size(p)) + " bytes, " +
             std::to_string(std::hash<std::string>{}(head)) + "\n";
    }
    return out;
  }
  std::string Tree() { return Pools(pools) + testing::Snapshot(host.configfs) + Pools(mnt); }
  std::string Backstores() { return Ok("backstore list"); }
  int Edit(const std::string& from, const std::string& to, size_t nth = 0) {
    std::string t = ReadText(file);
    size_t at = t.find(from);
    while (at != std::string::npos && nth-- > 0) at = t.find(from, at + 1);
    EXPECT_NE(at, std::string::npos) << from << " not in\n" << t;
    if (at == std::string::npos) return 0;
    int line = 1 + static_cast<int>(std::count(t.begin(), t.begin() + static_cast<long>(at), '\n'));
    WriteText(file, t.replace(at, from.size(), to));
    return line;
  }
  std::string Uuid(const std::string& path) {
    auto r = store::Pool::Open(store::DefaultEnv(), path, {true});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return "";
    std::string u = UuidString(r.value()->uuid());
    (void)r.value()->Close();
    return u;
  }
};

TEST_F(Boot, TheFileRecordsEachPoolsUuid) {
  std::string yaml = ReadText(file);
  EXPECT_NE(yaml.find("version: 3\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("  - name: nas\n    uuid: " + Uuid(mnt + "/nas.pool") + "\n    file: " + mnt + "/nas.pool\n"),
            std::string::npos)
      << yaml;
  EXPECT_NE(yaml.find("  - name: tank\n    uuid: " + Uuid(pools + "/tank") + "\n"), std::string::npos) << yaml;
}

TEST_F(Boot, AnUnmountedPoolIsReportedNotCreatedAndTheOthersComeBack) {
  Reboot();
  Unmount();
  const std::string mnt_before = Pools(mnt), pools_before = Pools(pools);
  CmdResult r = Cowctl("restore " + file);
  EXPECT_EQ(r.rc, 3) << r.out << r.err;
  // tank's datastore is back online...
  EXPECT_NE(r.out.find("exported tank/vm1 as LUN 0 of " + tgt), std::string::npos) << r.out;
  // ...and nas is neither created nor faked: no file, no LUN, no backstore.
  EXPECT_EQ(r.out.find("nas"), std::string::npos) << r.out;
  EXPECT_EQ(Pools(mnt), mnt_before);
  EXPECT_EQ(Pools(pools), pools_before);
  EXPECT_EQ(Backstores().find("nas-esxds"), std::string::npos);
  EXPECT_NE(r.err.find("cowctl: pool nas: " + pools + "/nas points at " + mnt + "/nas.pool, which is missing"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("1 item was not restored"), std::string::npos) << r.err;
  // Mounted: a second restore (the unit restarted) finishes the job.
  Mount();
  r = Cowctl("restore " + file);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "created backstore nas-esxds\nexported nas/esxds as LUN 1 of " + tgt + "\nmapped LUN 1 of " + tgt +
                       " into " + esx1 + " as LUN 1\n");
  EXPECT_NE(Ok("lun list").find("nas/esxds"), std::string::npos);
}

TEST_F(Boot, AMissingPoolIsCreatedOnlyWhenAsked) {
  Reboot();
  std::filesystem::rename(pools + "/tank", host.dir.path() + "/tank.away");  // the pool disk not mounted
  const std::string tree = Tree();
  CmdResult r = Cowctl("restore " + file);
  EXPECT_EQ(r.rc, 3) << r.out << r.err;
  EXPECT_FALSE(Exists(pools + "/tank"));
  EXPECT_EQ(r.out.find("tank"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("cowctl: pool tank: " + pools + "/tank is missing"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("exported nas/esxds"), std::string::npos) << r.out;
  Reboot();
  r = Cowctl("restore --dry-run --create-missing " + file);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("would create pool tank (empty)\nwould create LUN tank/vm1 (empty)\n"), std::string::npos)
      << r.out;
  EXPECT_EQ(Tree(), tree);
  const std::string saved_wwn = ReadText(file).substr(ReadText(file).find("wwn: ") + 5, 36);
  r = Cowctl("restore --create-missing " + file);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("created pool tank (empty"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("created LUN tank/vm1 (empty, with a new WWN"), std::string::npos) << r.out;
  // The empty LUN does not pose as the one that held the data.
  std::string wwn = ReadText(Bs("tank-vm1", 1) + "/wwn/vpd_unit_serial");
  EXPECT_EQ(wwn.size(), 36u) << wwn;
  EXPECT_NE(wwn, saved_wwn);
}

TEST_F(Boot, APoolWithAnotherUuidIsLeftAlone) {
  Reboot();
  // Another pool under the name (the disk replaced, or another NAS's disk).
  Ok("lun delete tank/vm1");
  Ok("pool delete tank");
  Pool();
  Ok("lun create tank/vm1 --size 8M");
  const std::string other = Uuid(pools + "/tank"), pools_before = Pools(pools);
  for (const char* flags : {"", "--create-missing "}) {
    CmdResult r = Cowctl(std::string("restore ") + flags + file);
    EXPECT_EQ(r.rc, 3) << r.out << r.err;
    EXPECT_NE(r.err.find("cowctl: pool tank: " + pools + "/tank holds the pool with UUID " + other +
                         ", the file saved UUID "),
              std::string::npos)
        << r.err;
    EXPECT_EQ(Backstores().find("tank-vm1"), std::string::npos);
    EXPECT_EQ(Pools(pools), pools_before);
  }
  EXPECT_NE(Backstores().find("nas-esxds"), std::string::npos);  // the healthy pool is back
}

// The file's pool (its UUID), but the file edited to another allocation
// unit or grain: that pool is refused with both values, in the pool
// directory and where a lost link would point, and nothing of it changes;
// the other pool comes back. The file as saved restores.
// The file's format 2 pool upgraded since the save (`pool upgrade`, which
// its superblock records): restore, at boot too, uses it as it is now and
// says so; once 'cowctl save' has recorded it, nothing is said.
TEST_F(Boot, APoolUpgradedSinceTheSaveIsRestoredAndSaidSo) {
  Ok("pool upgrade nas --yes");
  Reboot();
  CmdResult r = Cowctl("restore " + file);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("cowctl: warning: " + file + ": pool nas was upgraded from format 2 to format 3 (grain 4.00 "
                       "KiB) since the file was saved: restored as it is now (run 'cowctl save' to record it)\n"),
            std::string::npos)
      << r.err;
  EXPECT_NE(Backstores().find("nas-esxds"), std::string::npos);
  EXPECT_NE(Backstores().find("tank-vm1"), std::string::npos);
  Ok("save " + file);
  Reboot();
  r = Cowctl("restore " + file);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_EQ(r.err.find("upgraded"), std::string::npos) << r.err;
  EXPECT_NE(Backstores().find("nas-esxds"), std::string::npos);
}

TEST_F(Boot, ThisPoolMadeOtherwiseThanTheFileSaysIsLeftAlone) {
  Reboot();
  const std::string yaml = ReadText(file), nas = Uuid(mnt + "/nas.pool");
  const std::string left = ": not restored, left as it is (restore never reformats a pool; if the pool is right, run "
                           "'cowctl save' to record it)\n";
  auto refused = [&](const std::string& where, const std::string& mismatch) {
    const std::string tree = Pools(pools) + Pools(mnt);
    CmdResult r = Cowctl("restore " + file);
    EXPECT_EQ(r.rc, 3) << r.out << r.err;
    EXPECT_NE(r.err.find("cowctl: pool nas: " + where + " holds this pool (UUID " + nas + ") with " + mismatch + left),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.out.find("nas"), std::string::npos) << r.out;
    EXPECT_EQ(Backstores().find("nas-esxds"), std::string::npos);
    EXPECT_EQ(Pools(pools) + Pools(mnt), tree);
    EXPECT_NE(Backstores().find("tank-vm1"), std::string::npos);  // the healthy pool is back
  };
  Edit("allocation_unit: 65536", "allocation_unit: 131072");  // nas's: the first pool in the file
  refused(pools + "/nas", "allocation_unit 65536 (64.0 KiB), the file saved allocation_unit 131072 (128 KiB)");
  WriteText(file, yaml);
  Edit("allocation_unit: 65536\n", "allocation_unit: 65536\n    grain: 4096\n");
  refused(pools + "/nas", "grain 65536 (64.0 KiB, format 2), the file saved grain 4096 (4.00 KiB, format 3)");
  // The link lost too: the saved file holds this pool, but not as the file says.
  std::filesystem::remove(pools + "/nas");
  refused(mnt + "/nas.pool", "grain 65536 (64.0 KiB, format 2), the file saved grain 4096 (4.00 KiB, format 3)");
  EXPECT_FALSE(Exists(pools + "/nas"));
  WriteText(file, yaml);
  CmdResult r = Cowctl("restore " + file);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("relinked pool nas to " + mnt + "/nas.pool (its UUID matches)\n"), std::string::npos) << r.out;
  EXPECT_NE(Backstores().find("nas-esxds"), std::string::npos);
}

TEST_F(Boot, AMissingLunIsNeitherCreatedNorGivenItsSavedIdentity) {
  Reboot();
  Ok("lun delete tank/vm1");
  CmdResult r = Cowctl("restore " + file);
  EXPECT_EQ(r.rc, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("cowctl: LUN tank/vm1: missing from pool tank"), std::string::npos) << r.err;
  EXPECT_EQ(Ok("lun list").find("tank/vm1"), std::string::npos);
  EXPECT_EQ(Backstores().find("tank-vm1"), std::string::npos);
  EXPECT_NE(Backstores().find("nas-esxds"), std::string::npos);
}

TEST_F(Boot, AnOlderFileRestoresExistingPoolsAndCreatesNone) {
  std::string old, line;
  std::istringstream in(ReadText(file));
  while (std::getline(in, line)) {
    if (line.find("uuid:") == std::string::npos) old += line + "\n";
  }
  old.replace(old.find("version: 3"), 10, "version: 2");
  WriteText(file, old);
  Reboot();
  Unmount();
  std::filesystem::remove(pools + "/nas");  // and the link lost: the saved file: path is not there either
  CmdResult r = Cowctl("restore " + file);
  EXPECT_EQ(r.rc, 3) << r.out << r.err;
  EXPECT_NE(r.out.find("exported tank/vm1 as LUN 0 of " + tgt), std::string::npos) << r.out;
  EXPECT_FALSE(Exists(mnt + "/nas.pool"));
  EXPECT_FALSE(Exists(pools + "/nas"));
  EXPECT_NE(r.err.find("cowctl: pool nas: " + mnt + "/nas.pool is missing"), std::string::npos) << r.err;
  // Mounted: the file pool (at the administrator's own path) is relinked.
  Mount();
  r = Cowctl("restore " + file);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("relinked pool nas to " + mnt + "/nas.pool\n"), std::string::npos) << r.out;
}

TEST_F(Boot, EveryIdentityIsCheckedBeforeAnythingChanges) {
  Reboot();
  Unmount();  // a missing pool is not a reason to skip the checks
  const std::string yaml = ReadText(file), tree = Tree();
  const std::string wwn = yaml.substr(yaml.find("wwn: ") + 5, 36);
  // Two LUNs, one identity: a multipath initiator would take them for two paths to one disk.
  int line = Edit("wwn: ", "wwn: " + wwn + "\n        x: ", 1);
  Edit("\n        x: " + yaml.substr(yaml.find("wwn: ", yaml.find("wwn: ") + 1) + 5, 36), "");
  Err("restore " + file, file + ":" + std::to_string(line) + ": pools[1].luns[0].wwn: gives the same identifier");
  EXPECT_EQ(Tree(), tree);
  struct Bad {
    std::string from, to, error;
  } bad[] = {
      {"      - initiator: " + esx1 + "\n", "      - initiator: " + esx1 + "\n        chap_user: \"esx\\nadmin\"\n"
                                          "        chap_password: secret123456\n",
       "iscsi[0].acls[0].chap_user: may hold only printable ASCII"},
      {"      - initiator: " + esx1 + "\n", "      - initiator: " + esx1 + "\n        chap_user: esx\n"
                                          "        chap_password: \"s\u00e9cret123456\"\n",
       "iscsi[0].acls[0].chap_password: may hold only printable ASCII"},
      {"portals: [0.0.0.0:3260]", "portals: [\"[/../../../x]:3260\"]", "iscsi[0].portals[0]: expected IPv4:port"},
      {"loopback:\n  []", "loopback:\n  - wwn: naa./../../../../aa\n    luns: [{lun: 0, pool: tank, name: vm1}]",
       "loopback[0].wwn: expected naa. and 16 hex digits"},
  };
  for (const auto& b : bad) {
    WriteText(file, yaml);
    Edit(b.from, b.to);
    Err("restore " + file, b.error);
    Err("restore --dry-run " + file, b.error);
    EXPECT_EQ(Tree(), tree) << b.error;
  }
}

TEST_F(Boot, AWwnAnotherBackstoreHasIsRefusedBeforeAnythingChanges) {
  Reboot();
  // A backstore made by hand since, with nas/esxds's saved serial.
  const std::string yaml = ReadText(file);
  const std::string wwn = yaml.substr(yaml.find("wwn: ") + 5, 36);
  Ok("lun create tank/copy --size 8M --backstore");
  WriteText(Bs("tank-copy") + "/wwn/vpd_unit_serial", wwn);
  const std::string tree = Tree();
  Err("restore " + file, "LUN nas/esxds would get the identifier " + NaaName(wwn) +
                             ", which backstore user_0/tank-copy (tank/copy) has");
  EXPECT_EQ(Tree(), tree);
}

TEST_F(Boot, ARestoreThatStopsPartWaySaysWhatItDid) {
  Reboot();
  // The iSCSI fabric cannot be made (say iscsi_target_mod failed to load).
  WriteText(host.T("iscsi"), "");
  CmdResult r = Cowctl("restore " + file);
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  // What was done, then what was not.
  EXPECT_EQ(r.out.rfind("created backstore nas-esxds\ncreated backstore tank-vm1\nnot done: export tank/vm1 as LUN 0 of " +
                            tgt + "\n",
                        0),
            0u)
      << r.out;
  EXPECT_NE(r.out.find("not done: export nas/esxds as LUN 1 of " + tgt + "\n"), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("cowctl: restore stopped part-way: cannot create " + host.T("iscsi/" + tgt)), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("what it did, and did not, is listed on stdout"), std::string::npos) << r.err;
  // The cause fixed, restore finishes the job.
  std::filesystem::remove(host.T("iscsi"));
  r = Cowctl("restore " + file);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("exported tank/vm1 as LUN 0 of " + tgt), std::string::npos) << r.out;
}

// A target made with targetcli since the save (no LUN yet): restore used to
// make the backstores, then stop at the export; now nothing changes, not
// even the lost pool link it would have remade.
TEST_F(Boot, ATargetCowctlDidNotMakeChangesNothing) {
  Reboot();
  std::filesystem::remove(pools + "/nas");
  std::filesystem::create_directories(host.T("iscsi/" + tgt + "/tpgt_1"));
  const std::string tree = Tree();
  for (const char* flags : {"", "--dry-run "}) {
    Err(std::string("restore ") + flags + file,
        file + ": iscsi[0].target: iSCSI target " + tgt + " exists and was not made by cowctl");
    EXPECT_EQ(Tree(), tree) << flags;
  }
}

// Any LIO device's identity counts, not only cowstore's: an iblock disk
// carrying nas/esxds's saved serial.
TEST_F(Boot, AWwnAnyLioDeviceHasIsRefusedBeforeAnythingChanges) {
  Reboot();
  const std::string yaml = ReadText(file);
  const std::string wwn = yaml.substr(yaml.find("wwn: ") + 5, 36);
  WriteText(host.T("core/iblock_0/disk/wwn/vpd_unit_serial"), "T10 VPD Unit Serial Number: " + wwn + "\n");
  const std::string tree = Tree();
  Err("restore " + file, file + ": pools[0].luns[0].wwn: LUN nas/esxds would get the identifier " + NaaName(wwn) +
                             ", which LIO device iblock_0/disk has");
  EXPECT_EQ(Tree(), tree);
}

// Two conflicts: both named, then nothing changed.
TEST_F(Boot, EveryConflictIsNamed) {
  Reboot();
  const std::string yaml = ReadText(file);
  const std::string wwn = yaml.substr(yaml.find("wwn: ") + 5, 36);
  WriteText(host.T("core/iblock_0/disk/wwn/vpd_unit_serial"), wwn);
  std::filesystem::create_directories(host.T("iscsi/" + tgt));
  const std::string tree = Tree();
  CmdResult r = Cowctl("restore " + file);
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("cowctl: " + file + ": pools[0].luns[0].wwn: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cowctl: " + file + ": iscsi[0].target: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("2 conflicts with what LIO has (above): nothing was changed"), std::string::npos) << r.err;
  EXPECT_EQ(Tree(), tree);
}

// --dry-run prints the plan that restore then applies, change for change.
TEST_F(Boot, DryRunPrintsThePlanRestoreApplies) {
  Reboot();
  std::string plan = Ok("restore --dry-run " + file);
  std::string done = Ok("restore " + file);
  EXPECT_EQ(std::count(plan.begin(), plan.end(), '\n'), std::count(done.begin(), done.end(), '\n')) << plan << done;
  EXPECT_NE(plan.find("would export tank/vm1 as LUN 0 of " + tgt + "\n"), std::string::npos) << plan;
  EXPECT_NE(done.find("exported tank/vm1 as LUN 0 of " + tgt + "\n"), std::string::npos) << done;
  EXPECT_NE(Ok("restore --dry-run " + file).find("nothing to do"), std::string::npos);
}

// A loopback export (a local disk: its LUN number is part of its SCSI
// address, [H:C:T:L]) comes back at its saved number, not the lowest free.
TEST_F(Boot, ALoopbackExportComesBackAtItsSavedNumber) {
  const std::string wwn = "naa.5001405aabbccdd0";
  Edit("loopback:\n  []", "loopback:\n  - wwn: " + wwn + "\n    luns: [{lun: 3, pool: tank, name: vm1}]");
  Reboot();
  std::string out = Ok("restore " + file);
  EXPECT_NE(out.find("exported tank/vm1 as LUN 3 of loopback " + wwn + "\n"), std::string::npos) << out;
  EXPECT_TRUE(Exists(host.T("loopback/" + wwn + "/tpgt_1/lun/lun_3")));
  EXPECT_FALSE(Exists(host.T("loopback/" + wwn + "/tpgt_1/lun/lun_0")));
  EXPECT_NE(Ok("restore " + file).find("nothing to do"), std::string::npos);
  // save writes the number back.
  Ok("save " + file + ".2");
  std::string saved = ReadText(file + ".2");
  EXPECT_NE(saved.find("  - wwn: " + wwn + "\n    luns:\n      - {lun: 3, pool: tank, name: vm1}"), std::string::npos)
      << saved;
}

// That number held by another backstore: refused before anything changes,
// as for an iSCSI TPG.
TEST_F(Boot, ALoopbackNumberAnotherLunHasIsRefusedBeforeAnythingChanges) {
  const std::string wwn = "naa.5001405aabbccdd0";
  Edit("loopback:\n  []", "loopback:\n  - wwn: " + wwn + "\n    luns: [{lun: 3, pool: tank, name: vm1}]");
  Reboot();
  Ok("lun create tank/copy --size 8M --backstore");
  Lio lio{LioOptions{host.configfs, host.proc, nullptr}};
  auto copy = lio.FindBackstore("tank", "copy");
  ASSERT_TRUE(copy);
  lio.ExportLoopback(*copy, wwn, 3);
  const std::string tree = Tree();
  for (const char* flags : {"", "--dry-run "}) {
    Err(std::string("restore ") + flags + file, file + ": loopback[0].luns[0].lun: LUN 3 of loopback " + wwn +
                                                    " is taken by " + copy->key() + ", the file puts tank/vm1 there");
    EXPECT_EQ(Tree(), tree) << flags;
  }
}

// ESXi knows a datastore by its LUN's unit serial (the naa.6001405... name):
// a backstore serving the LUN under another serial than the saved one is
// named, and nothing changes, until the administrator picks one.
TEST_F(Boot, ABackstoreWithAnotherSerialIsRefusedBeforeAnythingChanges) {
  Reboot();
  Ok("restore " + file);
  Ok("unexport nas/esxds");  // something restore would do
  Lio lio{LioOptions{host.configfs, host.proc, nullptr}};
  auto bs = lio.FindBackstore("tank", "vm1");
  ASSERT_TRUE(bs);
  const std::string other = "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee";
  WriteText(bs->path + "/wwn/vpd_unit_serial", other);
  const std::string tree = Tree();
  for (const char* flags : {"", "--dry-run "}) {
    Err(std::string("restore ") + flags + file,
        file + ": pools[1].luns[0].wwn: LUN tank/vm1 has the backstore " + bs->key() + " with the unit serial " + other);
    EXPECT_EQ(Tree(), tree) << flags;
  }
  // The file's identity chosen: the backstore remade with it.
  Ok("backstore delete tank/vm1 --force");
  Ok("restore " + file);
  EXPECT_EQ(NaaOf("tank-vm1"), NaaName(bs->wwn));
  EXPECT_NE(Ok("restore " + file).find("nothing to do"), std::string::npos);
}

// A loop device attached over `img` (its path), or "" if none could be.
std::string AttachLoop(const std::string& img) {
  FILE* p = ::popen(("losetup -f --show " + img + " 2>/dev/null").c_str(), "r");
  char buf[256] = {};
  if (p) {
    if (!std::fgets(buf, sizeof buf, p)) buf[0] = 0;
    ::pclose(p);
  }
  return Trim(buf);
}

// A pool on a block device (a loop device over a sparse file).
class DeviceBoot : public Boot {
 protected:
  std::string img = host.dir.path() + "/disk.img", dev;
  void SetUp() override {
    Boot::SetUp();
    {
      std::ofstream(img).close();
    }
    std::filesystem::resize_file(img, 256u << 20);
    dev = AttachLoop(img);
    if (dev.empty()) GTEST_SKIP() << "no loop device (losetup -f failed): device pools untested here";
  }
  void TearDown() override {
    if (!dev.empty()) (void)std::system(("losetup -d " + dev).c_str());
  }
  // The first 64 KiB of the device.
  std::string Head() {
    std::string b(64 << 10, '\0');
    int fd = ::open(dev.c_str(), O_RDONLY);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::pread(fd, b.data(), b.size(), 0), static_cast<ssize_t>(b.size()));
    ::close(fd);
    return b;
  }
  void Put(uint64_t at, const std::string& bytes) {
    int fd = ::open(dev.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(at)), static_cast<ssize_t>(bytes.size()));
    ::fsync(fd);
    ::close(fd);
  }
};

TEST_F(DeviceBoot, RestoreNeverFormatsADevice) {
  // What the saved name may point at after a reboot: an ext4 filesystem.
  Put(1024 + 56, std::string("\x53\xef", 2));
  Put(8192, "someone's only copy");
  const std::string head = Head();
  for (std::string header : {"version: 3\npools:\n  - name: disk\n    uuid: 0ec52bfc-a7bb-48b7-94a4-24e650d2d1ef\n",
                                    "version: 2\npools:\n  - name: disk\n"}) {
    WriteText(file, header + "    device: " + dev + "\n    luns:\n      - {name: esxds, size: 8M}\n");
    for (const char* flags : {"", "--create-missing "}) {
      CmdResult r = Cowctl(std::string("restore ") + flags + file);
      EXPECT_EQ(r.rc, 3) << r.out << r.err;
      EXPECT_NE(r.err.find("cowctl: pool disk: " + dev + " holds no cowstore pool: not restored (restore never "
                           "creates a pool on a device"),
                std::string::npos)
          << r.err;
      EXPECT_EQ(r.out, "");
      EXPECT_FALSE(Exists(pools + "/disk"));
      EXPECT_TRUE(Head() == head) << "the device was written to";
    }
  }
}

TEST_F(DeviceBoot, ALostLinkIsRemadeOnlyToThePoolsOwnDevice) {
  Ok("pool create disk --device " + dev + " --allocation-unit 64K");
  Ok("lun create disk/esxds --size 8M");
  Ok("save " + file);
  const std::string saved = ReadText(file);
  EXPECT_NE(saved.find("  - name: disk\n    uuid: " + Uuid(dev) + "\n    device: " + dev + "\n"), std::string::npos)
      << saved;
  std::filesystem::remove(pools + "/disk");
  CmdResult r = Cowctl("restore " + file);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "relinked pool disk to " + dev + " (its UUID matches)\n");
  EXPECT_NE(Ok("lun list").find("disk/esxds"), std::string::npos);
  // An older file (no UUID) cannot tell this device from another: not relinked.
  std::filesystem::remove(pools + "/disk");
  Edit("    uuid: " + Uuid(dev) + "\n    device:", "    device:");
  r = Cowctl("restore " + file);
  EXPECT_EQ(r.rc, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("cowctl: pool disk: the file records no pool UUID"), std::string::npos) << r.err;
  EXPECT_FALSE(Exists(pools + "/disk"));
  // Another pool on the device now (device names moved): left alone.
  WriteText(file, saved);
  Put(0, std::string(8192, '\0'));
  Ok("pool create other --device " + dev + " --allocation-unit 64K");
  std::filesystem::remove(pools + "/other");
  const std::string head = Head();
  r = Cowctl("restore " + file);
  EXPECT_EQ(r.rc, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("cowctl: pool disk: " + dev + " holds the pool with UUID " + Uuid(dev)), std::string::npos)
      << r.err;
  EXPECT_FALSE(Exists(pools + "/disk"));
  EXPECT_TRUE(Head() == head);
}

// A device too small for a format 3 pool: the same refusal as a file's,
// with the device's size; nothing written to it, no link made.
TEST_F(DeviceBoot, ADeviceTooSmallIsRefusedWithTheMinimumAndLeftAlone) {
  (void)std::system(("losetup -d " + dev).c_str());
  std::filesystem::resize_file(img, 16u << 20);
  dev = AttachLoop(img);
  if (dev.empty()) GTEST_SKIP() << "no loop device";
  const std::string head = Head();
  Err("pool create small --device " + dev,
      "pool too small: " + dev + " is 16.0 MiB (16777216 bytes); a format 3 pool with an allocation unit of "
      "64.0 KiB needs at least 16.6 MiB (17432576 bytes");
  EXPECT_FALSE(Exists(pools + "/small"));
  EXPECT_TRUE(Head() == head);
}

// ---------------------------------------------------------------- the control socket

// Plays tcmu-runner: holds the pool open (and so its lock) and serves it.
class Served : public Cli {
 protected:
  std::unique_ptr<store::Pool> pool;
  std::unique_ptr<control::Server> server;
  void Serve(bool with_server = true) {
    Pool();
    ServeMade(with_server);
  }
  // Serves the pool tank the test made (e.g. a format 2 one).
  void ServeMade(bool with_server = true) {
    auto r = store::Pool::Open(store::DefaultEnv(), pools + "/tank");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    pool = std::move(r.value());
    if (!with_server) return;
    server = control_test::StartTestServer(*pool, run, "tank");
    ASSERT_TRUE(server);
  }
  void TearDown() override {
    server.reset();
    if (pool) (void)pool->Close();
  }
};

// pool upgrade is offline: refused while tcmu-runner serves the pool (it
// says to stop serving it) or another process holds it, the pool left as
// it was; a served pool that is format 3 already has nothing to do.
TEST_F(Served, PoolUpgradeIsRefusedWhileThePoolIsServedOrHeld) {
  Format2Pool();
  ServeMade();
  Err("pool upgrade tank --yes",
      "pool 'tank' is in use by tcmu-runner: stop serving it first (remove its LUNs' backstores: 'cowctl unexport "
      "tank/LUN --backstore' for each, or stop tcmu-runner), then upgrade it; 'cowctl restore' brings saved exports "
      "back");
  server.reset();
  Err("--wait 0 pool upgrade tank --yes", "held by another process and nothing answers");
  ASSERT_TRUE(pool->Close().ok());
  pool.reset();
  EXPECT_EQ(FormatOf(pools + "/tank"), 2u);
  Ok("pool upgrade tank --yes");
  ServeMade();
  EXPECT_EQ(Ok("pool upgrade tank"), "pool tank is format 3 already (sharing unit 4.00 KiB); nothing to do\n");
}

TEST_F(Served, LockedPoolWithoutSocketSaysSo) {
  Serve(false);
  Err("--wait 0 pool show tank", "held by another process and nothing answers");
}

// Another cowctl (here: this test) holds the pool for a moment, as a
// snapshot timer would: cowctl waits for it instead of failing.
TEST_F(Served, WaitsForAnotherCowctlToLetGo) {
  Serve(false);
  std::thread holder([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    ASSERT_TRUE(pool->Close().ok());
    pool.reset();
  });
  CmdResult r = Cowctl("pool show tank");
  holder.join();
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("held by another process; waiting up to 10 s"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("tank"), std::string::npos) << r.out;
}

TEST_F(Served, GivesUpWhenTheWaitEnds) {
  Serve(false);
  const auto t0 = std::chrono::steady_clock::now();
  CmdResult r = Cowctl("--wait 1 pool show tank");
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("nothing answers"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(waited 1 s)"), std::string::npos) << r.err;
}

TEST_F(Served, CowctlGoesThroughTheSocket) {
  Serve();
  struct stat st;
  ASSERT_EQ(::stat((run + "/tank.sock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_NE(Ok("pool show tank").find("tcmu-runner"), std::string::npos);
  Ok("lun create tank/vm1 --size 16M");
  Ok("lun clone tank/vm1 vm2");
  Ok("lun snapshot tank/vm1 snap1");
  Ok("lun rollback tank/vm1 snap1");  // done by the serving process
  Ok("lun resize tank/vm2 --size 32M");
  Err("lun create tank/vm1 --size 16M", "the name is taken");
  EXPECT_NE(Ok("pool list").find("tcmu-runner"), std::string::npos);
  EXPECT_NE(Ok("pool check tank").find("clean"), std::string::npos);
  Ok("pool grow tank --size 2G");
  Ok("lun delete tank/vm2");
  // What cowctl did is what the serving process sees.
  EXPECT_TRUE(pool->GetLun("vm1").ok());
  EXPECT_TRUE(pool->GetLun("snap1")->read_only);
  EXPECT_FALSE(pool->GetLun("vm2").ok());
  // Import and export are done by the serving process.
  std::string img = host.dir.path() + "/one.img";
  WriteText(img, std::string(4096, 'x') + std::string(1 << 20, '\0') + "tail");
  std::string j = Ok("--json lun import tank/x --from " + img);
  // Zeros stay unmapped per 4K grain: 255 of the first MiB's 256, then the
  // zero grain before the tail's.
  EXPECT_NE(j.find("\"left_unmapped\": 1048576"), std::string::npos) << j;
  EXPECT_NE(j.find("\"mapped\": 8192"), std::string::npos) << j;
  EXPECT_TRUE(pool->GetLun("x").ok());
  std::string back = host.dir.path() + "/back.img";
  Ok("lun export tank/x --to " + back);
  EXPECT_EQ(ReadText(back).substr(0, ReadText(img).size()), ReadText(img));
  Err("lun export tank/x --to " + back, "pass --force");
  Err("lun import tank/y --from relative-and-missing.img", "cannot open");
  EXPECT_FALSE(pool->GetLun("y").ok());
}

TEST_F(Served, VaaiStatusShowsHandlerCounters) {
  Serve();
  Ok("lun create tank/vm1 --size 16M");
  Ok("backstore create tank/vm1");
  std::string out = Ok("vaai status tank/vm1");
  EXPECT_NE(out.find("commands=10 ats=3 ats_miscompares=1"), std::string::npos) << out;
  std::string top = Ok("top --count 1 --interval 0.1 --json");
  EXPECT_NE(top.find("\"lun\":\"tank/vm1\""), std::string::npos) << top;  // JSON Lines: one compact line
  EXPECT_NE(top.find("\"ats_miscompares\":1"), std::string::npos) << top;
}

// procps top's -d and -n; rates per second over the measured interval, in
// bytes for what the handler counts in blocks; --json is JSON Lines.
class ServedCounting : public Served {
 protected:
  std::atomic<uint64_t> calls{0};
  void Serve() {
    Pool();
    Ok("lun create tank/vm1 --size 16M");  // 512-byte blocks
    auto r = store::Pool::Open(store::DefaultEnv(), pools + "/tank");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    pool = std::move(r.value());
    control::ServerOptions o;
    o.run_dir = run;
    o.pool_name = "tank";
    // Each ask (one per sample) adds one step: 4096 bytes read, 8 blocks
    // cloned by XCOPY, 2 commands.
    o.counters = [this] {
      uint64_t n = ++calls;
      return std::vector<control::LunCounters>{
          {"vm1", {{"commands", 2 * n}, {"read_bytes", 4096 * n}, {"clone_blocks", 8 * n}, {"ats_miscompares", 1}}}};
    };
    auto s = control::Server::Start(*pool, o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server = std::move(s.value());
  }
  static double Field(const std::string& line, const std::string& key) {
    size_t at = line.find("\"" + key + "\":");
    if (at == std::string::npos) return -1;
    return std::strtod(line.c_str() + at + key.size() + 3, nullptr);
  }
};

TEST_F(ServedCounting, TopTakesDAndNAndGivesJsonLinesInBytesPerSecond) {
  Serve();
  std::string out = Ok("top -n 2 -d 0.1 --json");
  std::vector<std::string> lines;
  std::istringstream in(out);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 2u) << out;  // -n 2: two samples, one line each
  for (const auto& l : lines) {
    EXPECT_EQ(l.front(), '{');
    EXPECT_EQ(l.back(), '}');
    EXPECT_NE(l.find("\"lun\":\"tank/vm1\""), std::string::npos) << l;
    EXPECT_NE(l.find("\"ats_miscompares\":1"), std::string::npos) << l;
    const double s = Field(l, "seconds");
    EXPECT_GE(s, 0.1) << l;  // -d 0.1
    // One step per sample over `seconds`: the rates say so, within rounding.
    EXPECT_NEAR(Field(l, "read_bytes_per_s") * s, 4096, 41) << l;
    EXPECT_NEAR(Field(l, "cloned_bytes_per_s") * s, 8 * 512, 41) << l;  // blocks as bytes
    EXPECT_NEAR(Field(l, "iops") * s, 2, 0.05) << l;
  }
  if (std::system("python3 -c pass >/dev/null 2>&1") == 0) {
    testing::WriteText(host.dir.path() + "/top.jsonl", out);
    EXPECT_EQ(std::system(("python3 -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1])]' " +
                           host.dir.path() + "/top.jsonl").c_str()),
              0)
        << out;
  }
  // Text: human units per second, one screen per sample.
  std::string text = Ok("top -n 2 -d 0.1");
  size_t screens = 0;
  for (size_t at = 0; (at = text.find("cowctl top - ", at)) != std::string::npos; ++at) ++screens;
  EXPECT_EQ(screens, 2u) << text;
  EXPECT_NE(text.find("KiB/s"), std::string::npos) << text;
  Err("top -d 0.05", "at least 0.1");
}

// The exporter: every pool's space and the serving handler's counters, in a
// form the textfile collector parses; --output replaces the file whole.
TEST_F(Served, MetricsParseAndCarryThePoolsAndTheHandlersCounters) {
  Serve();
  Ok("lun create tank/vm1 --size 16M");
  Pool("other", "64M");  // not served: space, no counters
  std::string out = Ok("metrics");
  auto e = testing::ParseExposition(out);
  std::string problems;
  for (const auto& p : e.problems) problems += p + "\n";
  ASSERT_TRUE(e.problems.empty()) << problems << out;
  EXPECT_EQ(e.samples["cowstore_pool_up{pool=\"tank\"}"], 1);
  EXPECT_EQ(e.samples["cowstore_pool_served{pool=\"tank\"}"], 1);
  EXPECT_EQ(e.samples["cowstore_pool_served{pool=\"other\"}"], 0);
  EXPECT_EQ(e.samples["cowstore_pool_size_bytes{pool=\"other\"}"], 64 << 20);
  EXPECT_EQ(e.samples["cowstore_pool_provisioned_bytes{pool=\"tank\"}"], 16 << 20);
  EXPECT_GT(e.samples["cowstore_pool_backing_free_bytes{pool=\"tank\"}"], 0);  // through the handler
  EXPECT_GT(e.samples["cowstore_pool_soft_threshold_bytes{pool=\"tank\"}"], 0);
  EXPECT_EQ(e.samples["cowstore_lun_commands_total{pool=\"tank\",lun=\"vm1\"}"], 10);
  EXPECT_EQ(e.samples["cowstore_lun_vaai_ats_total{pool=\"tank\",lun=\"vm1\"}"], 3);
  EXPECT_EQ(e.samples["cowstore_lun_vaai_ats_miscompares_total{pool=\"tank\",lun=\"vm1\"}"], 1);
  EXPECT_EQ(e.samples.count("cowstore_lun_commands_total{pool=\"other\",lun=\"vm1\"}"), 0u);
  // For node_exporter's textfile collector: replaced whole, readable by it.
  std::string dir = host.dir.path() + "/textfile";
  ::mkdir(dir.c_str(), 0755);
  EXPECT_EQ(Ok("metrics --output " + dir + "/cowstore.prom"), "");
  EXPECT_TRUE(testing::ParseExposition(ReadText(dir + "/cowstore.prom")).problems.empty());
  struct stat st;
  ASSERT_EQ(::stat((dir + "/cowstore.prom").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()), 1);
  Err("metrics --output " + dir + "/missing/cowstore.prom", "cannot write");
  Err("--json metrics", "--json does not apply");
}

// Space a served pool frees is punched off the command path (the store's
// Thinner); until then pool show, pool list --json and metrics say how much
// is still on its way back to the filesystem, through the handler's socket.
// Once the pool is closed (every punch done), cowctl opening it itself says 0.
TEST_F(Served, ShowsFreedSpaceStillBeingReturnedToTheFilesystem) {
  Format2Pool();  // 64 KiB allocation units, counted as such
  control_test::PunchGateEnv env;
  struct Cleanup {
    std::function<void()> f;
    ~Cleanup() { f(); }
  } cleanup{[&] {  // before `env` goes: release the punches, stop serving, close
    env.Release();
    server.reset();
    if (pool) (void)pool->Close();
    pool.reset();
  }};
  auto r = store::Pool::Open(&env, pools + "/tank");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  pool = std::move(r.value());
  server = control_test::StartTestServer(*pool, run, "tank");
  ASSERT_TRUE(server);
  ASSERT_TRUE(pool->CreateLun("vm1", 16 << 20, 512).ok());
  auto opened = pool->OpenLun("vm1");
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::shared_ptr<store::Lun> lun = std::move(opened).value();
  constexpr uint64_t kAu = 64 << 10, kAus = 8, kBlocksPerAu = kAu / 512;
  const std::string data(kAu, 'x');
  for (uint64_t i = 0; i < kAus; ++i)
    ASSERT_TRUE(lun->Write(i * kBlocksPerAu, kBlocksPerAu, data.data(), store::Durability::kDurable).ok());
  auto await_punched = [&] {  // the thinner's background punches, all done
    for (int i = 0; i < 1000 && pool->Space().thinning_units != 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  };
  // What the open and the writes freed (a checkpoint's old chain) is punched
  // in the background too: let it finish, so that what follows counts only
  // the unmap. On a loaded machine it may not have yet.
  await_punched();
  EXPECT_NE(Ok("--json pool show tank").find("\"thinning\": 0,"), std::string::npos);

  env.Hold();  // the punches wait: the unmapped AUs stay thinning
  ASSERT_TRUE(lun->Unmap(0, kAus * kBlocksPerAu, store::Durability::kDurable).ok());
  ASSERT_EQ(pool->Space().thinning_units, kAus);
  const std::string want = "\"thinning\": " + std::to_string(kAus * kAu) + ",";  // 512 KiB, in bytes
  std::string j = Ok("--json pool show tank");
  EXPECT_NE(j.find("\"served_by_handler\": true"), std::string::npos) << j;
  EXPECT_NE(j.find(want), std::string::npos) << j;
  EXPECT_NE(Ok("--json pool list").find(want), std::string::npos);
  std::string show = Ok("pool show tank");
  EXPECT_NE(show.find("thinning:        512 KiB (in free; still being returned to the filesystem)"), std::string::npos)
      << show;
  auto e = testing::ParseExposition(Ok("metrics"));
  EXPECT_TRUE(e.problems.empty());
  EXPECT_EQ(e.samples["cowstore_pool_thinning_bytes{pool=\"tank\"}"], kAus * kAu);
  EXPECT_EQ(e.types["cowstore_pool_thinning_bytes"], "gauge");

  env.Release();  // punched in the background: back to 0
  await_punched();
  EXPECT_NE(Ok("--json pool show tank").find("\"thinning\": 0,"), std::string::npos);
  server.reset();
  lun.reset();  // lets go of the pool
  ASSERT_TRUE(pool->Close().ok());
  pool.reset();
  j = Ok("--json pool show tank");  // opened by cowctl itself
  EXPECT_NE(j.find("\"served_by_handler\": false"), std::string::npos) << j;
  EXPECT_NE(j.find("\"thinning\": 0,"), std::string::npos) << j;
  EXPECT_NE(Ok("pool show tank").find("thinning:        0 B\n"), std::string::npos);
}

// The control server itself (protocol, several clients, progress, import
// and export inside the daemon) is tested in tests/control.

// The handler runs the import; cowctl's Ctrl-C reaches it (cowctl shuts down
// its side of the connection), which deletes the partial LUN, and cowctl
// reports that once the handler has.
TEST_F(Served, CtrlCDuringAnImportByTheHandlerLeavesNothing) {
  Serve();
  std::string img = HugeSparseImage(host.dir.path());
  std::string out, err;
  pid_t pid = Spawn("lun import tank/x --overcommit --from " + img, &out, &err);
  ASSERT_GT(pid, 0);
  bool started = false;
  for (int i = 0; i < 6000 && !started; ++i) {
    started = pool->GetLun("x.importing").ok() || pool->GetLun("x").ok();
    if (!started) ::usleep(10000);
  }
  EXPECT_TRUE(started);
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  int st = Reap(pid);
  ASSERT_TRUE(WIFEXITED(st)) << "killed by signal " << (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  EXPECT_EQ(WEXITSTATUS(st), 1);
  std::string e = ReadText(err);
  EXPECT_NE(e.find("\ncowctl: interrupted: importing " + img + " into tank/x (done by tcmu-runner's handler): "),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("(nothing was kept)"), std::string::npos) << e;
  EXPECT_FALSE(pool->GetLun("x").ok());
  EXPECT_FALSE(pool->GetLun("x.importing").ok());
}

// A handler loaded before an upgrade (hello without "safe-images") would
// follow links, wait on FIFOs and truncate in place: cowctl asks it for no
// image copy and says what to do.
TEST_F(Served, AnOlderHandlerIsAskedForNoImageCopy) {
  Serve(false);  // the pool is held; an old handler answers on its socket
  ASSERT_EQ(::mkdir(run.c_str(), 0700), 0);
  int lfd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", (run + "/tank.sock").c_str());
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(lfd, 4), 0);
  std::atomic<bool> stop{false};
  std::vector<std::string> asked;  // written by the thread, read after join
  std::thread old_handler([&] {
    while (!stop) {
      pollfd p{lfd, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      int c = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      std::string buf;
      char chunk[4096];
      ssize_t n;
      while ((n = ::recv(c, chunk, sizeof chunk, 0)) > 0) {
        buf.append(chunk, static_cast<size_t>(n));
        size_t nl;
        while ((nl = buf.find('\n')) != std::string::npos) {
          std::string line = buf.substr(0, nl);
          buf.erase(0, nl + 1);
          asked.push_back(line.substr(0, line.find(' ')));
          std::string verb = asked.back(), reply = "error code=InvalidArgument message=old\nend\n";
          if (verb == "hello") reply = "ok version=2 pool=tank features=progress\nend\n";
          if (verb == "space") reply = "ok\npool name=tank size=1073741824\nend\n";
          if (verb == "lun-get") reply = "ok\nlun name=x size=1048576 block_size=512\nend\n";
          (void)!::send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
        }
      }
      ::close(c);
    }
  });
  std::string img = host.dir.path() + "/d.img";
  WriteText(img, std::string(4096, 'd'));
  Err("lun import tank/x --from " + img, "served by an older cowstore handler");
  Err("lun export tank/x --to " + host.dir.path() + "/out.img", "restart tcmu-runner");
  stop = true;
  old_handler.join();
  ::close(lfd);
  for (const auto& v : asked) EXPECT_TRUE(v == "hello" || v == "space" || v == "lun-get") << v;
  EXPECT_FALSE(Exists(host.dir.path() + "/out.img"));
}

TEST_F(Served, ScrubIsDoneByTheHandler) {
  Serve();
  Ok("lun create tank/vm1 --size 16M");
  auto l = pool->OpenLun("vm1");
  ASSERT_TRUE(l.ok());
  std::string data(1 << 20, 'v');
  ASSERT_TRUE(l.value()->Write(0, 2048, data.data(), store::Durability::kDurable).ok());
  std::string j = Ok("--json pool scrub tank");
  EXPECT_NE(j.find("\"online\": true"), std::string::npos) << j;
  EXPECT_NE(j.find("\"read_bytes\": 1048576"), std::string::npos) << j;
  EXPECT_NE(j.find("\"clean\": true"), std::string::npos) << j;
}

TEST_F(Served, CowctlDrawsTheBarOnATerminalOnly) {
  Serve();
  // 8 MiB, every other MiB data: 8 copy chunks, so several progress lines.
  std::string img = host.dir.path() + "/big.img";
  std::string data;
  for (int i = 0; i < 8; ++i) data += std::string(1 << 20, i % 2 ? '\0' : static_cast<char>('a' + i));
  WriteText(img, data);
  // Without a terminal: no bar, and --json output is unchanged.
  CmdResult r = Cowctl("--json lun import tank/x --from " + img);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_NE(r.out.find("\"written\": 4194304"), std::string::npos) << r.out;
  // On a terminal (script(1) gives one): the same bar as direct operation.
  if (std::system("script --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "no script(1) for a terminal";
  std::string log = host.dir.path() + "/tty.log";
  std::string cmd = std::string("COWSTORE_POOL_DIR=") + pools + " COWSTORE_RUN_DIR=" + run + " " + COWCTL_BINARY +
                    " --configfs-root " + host.configfs + " --proc-root " + host.proc;
  std::string back = host.dir.path() + "/back.img";
  std::string full = "script -qec '" + cmd + " lun import tank/y --from " + img + " && " + cmd + " lun export tank/y --to " +
                     back + " && " + cmd + " pool check tank' " + log + " >/dev/null 2>&1 </dev/null";
  ASSERT_EQ(std::system(full.c_str()), 0) << ReadText(log);
  std::string t = ReadText(log);
  EXPECT_NE(t.find("importing tank/y [########################################] 100.0%"), std::string::npos) << t;
  EXPECT_NE(t.find("exporting tank/y [########################################] 100.0%"), std::string::npos) << t;
  EXPECT_NE(t.find("checking tank (by tcmu-runner's handler) ["), std::string::npos) << t;
  EXPECT_TRUE(pool->GetLun("y").ok());
  EXPECT_EQ(ReadText(back), ReadText(img));
}

// The completion offers what the parser accepts (bash-completion itself is
// optional: the file brings stand-ins).
TEST(Completion, OffersTheSubcommands) {
  testing::TempDir d;
  std::string script = d.path() + "/c.sh", out = d.path() + "/out";
  testing::WriteText(script, std::string("source ") + COWCTL_COMPLETION + R"(
c() { COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); COMPREPLY=(); _cowctl; echo "${COMPREPLY[*]}"; }
c cowctl ""
c cowctl pool ""
c cowctl lun ""
c cowctl export ""
c cowctl export iscsi t/l --
c cowctl restore --
c cowctl top -
c cowctl metrics --
c cowctl pool create p --
)");
  ASSERT_EQ(std::system(("bash " + script + " >" + out + " 2>&1").c_str()), 0);
  auto lines = testing::ReadText(out);
  for (const char* w : {"pool lun backstore export unexport vaai top metrics save restore", "create list show check grow delete scrub",
                        "create list show resize delete clone snapshot rollback import export", "iscsi loop list",
                        "--target --portal --initiator --demo-mode --no-auto-map --chap-user --chap-password --lun",
                        "--dry-run --create-missing", "-d -n --delay --iterations", "--output",
                        "--soft-threshold --overcommit"}) {
    EXPECT_NE(lines.find(w), std::string::npos) << w << "\n" << lines;
  }
}

// The words of cowctl's own command line (CLI11's lists, as Main builds
// them), which the completion is held to, so that neither can drift.
struct Words {
  std::vector<std::string> path;         // "lun", "snapshot"
  std::set<std::string> subcommands;     // names and aliases
  std::set<std::string> long_options;    // "--keep", "--help" (hidden ones left out)
  std::set<std::string> short_options;   // "-s"
  std::vector<std::string> value_names;  // every name of an option that takes a value
};
void CollectWords(CLI::App* app, std::vector<std::string> path, std::vector<Words>* out) {
  Words w;
  w.path = path;
  for (CLI::App* sub : app->get_subcommands([](CLI::App*) { return true; })) {
    w.subcommands.insert(sub->get_name());
    for (const auto& a : sub->get_aliases()) w.subcommands.insert(a);
  }
  for (const CLI::Option* o : app->get_options()) {
    if (o->get_positional() || o->get_group().empty()) continue;
    for (const auto& n : o->get_lnames()) {
      w.long_options.insert("--" + n);
      if (o->get_expected_min() > 0) w.value_names.push_back("--" + n);
    }
    for (const auto& n : o->get_snames()) {
      w.short_options.insert("-" + n);
      if (o->get_expected_min() > 0) w.value_names.push_back("-" + n);
    }
  }
  out->push_back(w);
  for (CLI::App* sub : app->get_subcommands([](CLI::App*) { return true; })) {
    auto p = path;
    p.push_back(sub->get_name());
    CollectWords(sub, p, out);
  }
}
std::vector<Words> CowctlWords() {
  CLI::App app;
  Context ctx;
  int rc = 0;
  CommandLine cl(app, ctx, rc);
  AddCommandLine(cl);
  std::vector<Words> out;
  CollectWords(&app, {}, &out);
  return out;
}
std::set<std::string> SplitWords(const std::string& line) {
  std::set<std::string> out;
  std::istringstream in(line);
  for (std::string w; in >> w;) out.insert(w);
  return out;
}

// Completes each line of `probes` (words, the last one being completed; ""
// quoted) with a pool tank holding tank/vm1; one line of words per probe.
std::vector<std::string> Complete(const std::vector<std::string>& probes, const std::string& pools) {
  testing::TempDir d;
  std::string bin = COWCTL_BINARY, script = d.path() + "/c.sh", out = d.path() + "/out";
  if (!Exists(pools + "/tank")) {
    EXPECT_EQ(std::system(("COWSTORE_POOL_DIR=" + pools + " " + bin + " pool create tank --size 64M >/dev/null && " +
                           "COWSTORE_POOL_DIR=" + pools + " " + bin + " lun create tank/vm1 --size 16M >/dev/null")
                              .c_str()),
              0);
  }
  std::string text = "export COWSTORE_POOL_DIR=" + pools + "; PATH=" + bin.substr(0, bin.rfind('/')) +
                     ":$PATH\nsource " + COWCTL_COMPLETION + R"(
c() { COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); COMPREPLY=(); _cowctl; echo "=${COMPREPLY[*]}"; }
)";
  for (const auto& p : probes) text += "c " + p + "\n";
  testing::WriteText(script, text);
  // In an empty directory: file names offered are none of cowctl's words.
  std::string empty = d.path() + "/cwd";
  std::filesystem::create_directories(empty);
  EXPECT_EQ(std::system(("cd " + empty + " && bash " + script + " >" + out + " 2>/dev/null").c_str()), 0);
  // One "=words" line a probe (anything else the script prints is not a reply).
  std::vector<std::string> lines;
  std::istringstream in(ReadText(out));
  for (std::string l; std::getline(in, l);) {
    if (!l.empty() && l[0] == '=') lines.push_back(l.substr(1));
  }
  EXPECT_EQ(lines.size(), probes.size()) << ReadText(out);
  lines.resize(probes.size());
  return lines;
}

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& w : v) s += w + " ";
  return s;
}

// Every command, alias and long option the parser has is offered where it
// belongs, and nothing the parser would refuse there: completion and CLI
// cannot drift apart (a command or option added to one and not the other
// fails here).
TEST(Completion, OffersExactlyWhatTheParserAccepts) {
  testing::TempDir d;
  auto words = CowctlWords();
  ASSERT_GT(words.size(), 20u);
  std::vector<std::string> probes;
  for (const auto& w : words) {
    // A command with subcommands: "cowctl lun <TAB>"; a leaf: "cowctl lun snapshot -<TAB>".
    probes.push_back("cowctl " + Join(w.path) + (w.subcommands.empty() ? "-" : "\"\""));
  }
  auto got = Complete(probes, d.path() + "/pools");
  const std::set<std::string> globals = words[0].long_options;
  for (size_t i = 0; i < words.size(); ++i) {
    const Words& w = words[i];
    std::set<std::string> offered = SplitWords(got[i]), want, allowed;
    if (!w.subcommands.empty()) {
      want = w.subcommands;
      want.insert("--help");
      if (w.path.empty()) want.insert(globals.begin(), globals.end());  // cowctl <TAB>: commands and global options
      allowed = want;
    } else {
      want = w.long_options;
      allowed = want;
      allowed.insert(w.short_options.begin(), w.short_options.end());
      allowed.insert("--json");  // a global option, taken anywhere (fallthrough)
    }
    for (const auto& x : want) EXPECT_TRUE(offered.count(x)) << probes[i] << ": " << x << " not offered (got: " << got[i] << ")";
    for (const auto& x : offered) EXPECT_TRUE(allowed.count(x)) << probes[i] << ": " << x << " offered, not accepted there";
  }
}

// After an option that takes a value, the next word is that value: no
// command, option, pool or LUN is offered for it.
TEST(Completion, AnOptionsValueIsNotTakenForAWord) {
  testing::TempDir d;
  auto words = CowctlWords();
  std::vector<std::string> probes;
  std::set<std::string> forbidden = {"tank", "tank/vm1", "tank/"};
  for (const auto& w : words) {
    forbidden.insert(w.subcommands.begin(), w.subcommands.end());
    for (const auto& n : w.value_names) probes.push_back("cowctl " + Join(w.path) + n + " \"\"");
  }
  ASSERT_GT(probes.size(), 20u);
  auto got = Complete(probes, d.path() + "/pools");
  for (size_t i = 0; i < probes.size(); ++i) {
    for (const auto& x : SplitWords(got[i])) {
      EXPECT_TRUE(!forbidden.count(x) && x[0] != '-') << probes[i] << ": offers " << x << " (got: " << got[i] << ")";
    }
  }
}

// What is offered for a pool or a LUN comes from the --pool-dir on the line
// (either spelling; bash splits --pool-dir=DIR into three words), not from
// the default directory.
TEST(Completion, HonoursPoolDir) {
  testing::TempDir d;
  std::string pools = d.path() + "/pools", script = d.path() + "/c.sh", out = d.path() + "/out";
  std::string bin = COWCTL_BINARY;
  std::string dir = bin.substr(0, bin.rfind('/'));
  ASSERT_EQ(std::system((bin + " --pool-dir " + pools + " pool create tank --size 64M >/dev/null && " + bin +
                         " --pool-dir " + pools + " lun create tank/vm1 --size 16M >/dev/null")
                            .c_str()),
            0);
  testing::WriteText(script, "unset COWSTORE_POOL_DIR; PATH=" + dir + ":$PATH\nsource " + COWCTL_COMPLETION + R"(
c() { COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); COMPREPLY=(); _cowctl; echo "${COMPREPLY[*]}"; }
)" + "c cowctl --pool-dir " + pools + " pool scrub \"\"\n" +
                                "c cowctl --pool-dir " + pools + " lun show \"\"\n" +
                                "c cowctl --pool-dir = " + pools + " lun show \"\"\n" +
                                "c cowctl --pool-dir=" + pools + " export iscsi \"\"\n");
  ASSERT_EQ(std::system(("bash " + script + " >" + out + " 2>&1").c_str()), 0);
  auto lines = testing::ReadText(out);
  EXPECT_EQ(lines, "tank\ntank/vm1\ntank/vm1\ntank/vm1\n");
}

}  // namespace
}  // namespace cowstore::cowctl
