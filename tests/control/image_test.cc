// SPDX-License-Identifier: Apache-2.0
// Import and export as root (handler/control/image.h): what they refuse to
// open, what an import maps, and what a failure or a cancellation leaves
// behind.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <csignal>
#include <cstdlib>

#include "handler/control/image.h"
#include "handler/store/all_zero.h"
#include "tests/control/served_pool.h"

namespace cowstore::control_test {
namespace {

// An image of 36 pieces of 64 KiB (crossing import's 1 MiB chunks): piece i
// holds one 4 KiB block of (i + 1)s, at block (5 * i) % 16 of it, and every
// third piece nothing but zeros.
constexpr uint32_t kPiece = 64 << 10, kBlock4k = 4 << 10;
std::string ScatteredImage() {
  std::string img(36 * kPiece, '\0');
  for (uint32_t i = 0; i < 36; ++i) {
    if (i % 3 == 2) continue;
    img.replace(i * kPiece + (5 * i) % 16 * kBlock4k, kBlock4k, kBlock4k, static_cast<char>(i + 1));
  }
  return img;
}

// GetAllocationStatus's runs as text: "lba+count:m|u ".
std::string RunsText(const std::vector<store::AllocationRun>& runs) {
  std::string t;
  for (const auto& r : runs) t += std::to_string(r.lba) + "+" + std::to_string(r.count) + (r.mapped ? ":m " : ":u ");
  return t;
}

// The runs of a LUN of 512-byte blocks holding `img` whose `unit`-byte units
// are mapped exactly where `img` has data.
std::string RunsOfData(const std::string& img, uint32_t unit) {
  std::vector<store::AllocationRun> runs;
  for (size_t at = 0; at < img.size(); at += unit) {
    bool mapped = !store::AllZero(img.data() + at, unit);
    if (runs.empty() || runs.back().mapped != mapped) runs.push_back({at / 512, 0, mapped});
    runs.back().count += unit / 512;
  }
  return RunsText(runs);
}

class Image : public ::testing::Test {
 protected:
  TempDir dir;
  std::string pool_path = dir.path() + "/tank";
  std::unique_ptr<store::Pool> pool;
  control::ImageOptions opts;
  void SetUp() override {
    pool = CreateTestPool(pool_path);
    ASSERT_TRUE(pool);
    auto pf = control::PoolFileAt(pool_path);
    ASSERT_TRUE(pf.ok());
    opts.pool_file = pf.value();
  }
  void TearDown() override {
    if (pool) (void)pool->Close();
  }
  // LUN `name` of 4 MiB holding 'D's.
  void DataLun(const std::string& name) {
    std::string img = dir.path() + "/" + name + ".src";
    WriteText(img, std::string(4 << 20, 'D'));
    control::CopyStats st;
    auto r = control::ImportImage(*pool, name, img, 512, 0, opts, &st);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  std::string Leftovers() { return TemporaryFiles(dir.path()); }
  // Imports ScatteredImage() into a new pool of 64 KiB AUs, of `format` and
  // `grain`: the LUN maps exactly the grains (the AUs at format 2) that hold
  // data, with every byte as imported.
  void ImportScattered(uint32_t format, uint32_t grain) {
    store::PoolOptions po;
    po.size_bytes = 1ull << 30;
    po.allocation_unit = kPiece;
    po.format = format;
    po.grain = grain;
    auto c = store::Pool::Create(store::DefaultEnv(), dir.path() + "/f" + std::to_string(format), po);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    store::Pool& p = *c.value();
    const uint32_t unit = grain ? grain : kPiece;
    ASSERT_EQ(p.grain(), unit);
    const std::string img = ScatteredImage();
    const std::string path = dir.path() + "/scattered.img";
    WriteText(path, img);
    uint64_t data = 0;
    for (size_t at = 0; at < img.size(); at += unit) data += store::AllZero(img.data() + at, unit) ? 0 : unit;
    control::CopyStats st;
    auto r = control::ImportImage(p, "x", path, 512, 0, opts, &st);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r.value().mapped_bytes, data);
    EXPECT_EQ(p.Space().mapped_bytes, data);
    EXPECT_EQ(st.written, data);
    EXPECT_EQ(st.skipped, img.size() - data);
    {
      auto lun = p.OpenLun("x");
      ASSERT_TRUE(lun.ok()) << lun.status().ToString();
      auto runs = lun.value()->GetAllocationStatus(0, img.size() / 512);
      ASSERT_TRUE(runs.ok()) << runs.status().ToString();
      EXPECT_EQ(RunsText(runs.value()), RunsOfData(img, unit));
      std::string back(img.size(), 'r');
      ASSERT_TRUE(lun.value()->Read(0, img.size() / 512, back.data()).ok());
      EXPECT_TRUE(back == img) << "the LUN does not read back as the image";
    }
    EXPECT_TRUE(p.Close().ok());
  }
};

TEST_F(Image, ASymlinkedSourceIsRefused) {
  std::string secret = dir.path() + "/secret";
  WriteText(secret, std::string(4096, 's'));
  ASSERT_EQ(::chmod(secret.c_str(), 0600), 0);
  std::string link = dir.path() + "/disk.img";
  ASSERT_EQ(::symlink(secret.c_str(), link.c_str()), 0);
  auto r = control::ImportImage(*pool, "x", link, 512, 0, opts, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("is a symbolic link"), std::string::npos) << r.status().ToString();
  EXPECT_FALSE(pool->GetLun("x").ok());
}

TEST_F(Image, ExportNeverWritesThroughASymlink) {
  DataLun("x");
  // A dangling link into a directory only root may write: nothing is made there.
  std::string closed = dir.path() + "/root-only";
  ASSERT_EQ(::mkdir(closed.c_str(), 0700), 0);
  std::string dangling = dir.path() + "/dangling.img";
  ASSERT_EQ(::symlink((closed + "/planted").c_str(), dangling.c_str()), 0);
  // A link to an existing file: it stays as it is, even with force.
  std::string victim = dir.path() + "/victim";
  WriteText(victim, "precious");
  std::string link = dir.path() + "/link.img";
  ASSERT_EQ(::symlink(victim.c_str(), link.c_str()), 0);
  for (bool force : {false, true}) {
    opts.force = force;
    for (const std::string& p : {dangling, link}) {
      store::Status s = control::ExportImage(*pool, "x", p, opts, nullptr);
      EXPECT_NE(s.message().find("is a symbolic link"), std::string::npos) << p << ": " << s.ToString();
    }
  }
  EXPECT_FALSE(Exists(closed + "/planted"));
  EXPECT_EQ(ReadText(victim), "precious");
}

TEST_F(Image, AFailedExportKeepsTheOldFileWhole) {
  DataLun("x");
  std::string out = dir.path() + "/out.img";
  WriteText(out, std::string(8 << 20, 'O'));
  opts.force = true;
  // Writes past 1 MiB fail (EFBIG), as a full file system would fail them.
  struct sigaction ign {}, old_sig {};
  ign.sa_handler = SIG_IGN;
  sigaction(SIGXFSZ, &ign, &old_sig);
  rlimit old_lim{}, lim{1 << 20, 1 << 20};
  ::getrlimit(RLIMIT_FSIZE, &old_lim);
  lim.rlim_max = old_lim.rlim_max;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &lim), 0);
  store::Status s = control::ExportImage(*pool, "x", out, opts, nullptr);
  ::setrlimit(RLIMIT_FSIZE, &old_lim);
  sigaction(SIGXFSZ, &old_sig, nullptr);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("writing " + out + " failed"), std::string::npos) << s.ToString();
  EXPECT_EQ(ReadText(out), std::string(8 << 20, 'O'));
  EXPECT_EQ(Leftovers(), "");
  // Without the limit the same export replaces it.
  ASSERT_TRUE(control::ExportImage(*pool, "x", out, opts, nullptr).ok());
  EXPECT_EQ(ReadText(out), std::string(4 << 20, 'D'));
  EXPECT_EQ(Leftovers(), "");
}

TEST_F(Image, ACancelledImportLeavesNothing) {
  std::string img = dir.path() + "/img";
  WriteText(img, std::string(4 << 20, 'x'));
  int polls = 0;
  opts.cancelled = [&] { return ++polls > 2; };  // after two chunks
  auto r = control::ImportImage(*pool, "x", img, 512, 0, opts, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "import of " + img + " cancelled (nothing was kept)");
  EXPECT_TRUE(pool->ListLuns().empty());
}

TEST_F(Image, AnImportCutShortByACrashIsNamedSoAndNotTakenForDone) {
  // What a crash part way leaves: the temporary LUN, never the name asked.
  ASSERT_TRUE(pool->CreateLun(control::ImportTempName("x"), 1 << 20, 512).ok());
  std::string img = dir.path() + "/img";
  WriteText(img, std::string(4096, 'x'));
  auto r = control::ImportImage(*pool, "x", img, 512, 0, opts, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), store::Code::kAlreadyExists);
  EXPECT_NE(r.status().message().find("cut short by a crash"), std::string::npos) << r.status().ToString();
  EXPECT_FALSE(pool->GetLun("x").ok());
  EXPECT_EQ(control::ImportTempName(std::string(64, 'n')), std::string(54, 'n') + ".importing");
}

TEST_F(Image, AnImportGetsItsNameOnlyWhenComplete) {
  std::string img = dir.path() + "/img";
  WriteText(img, std::string(3 << 20, 'x'));
  std::vector<std::string> seen;
  opts.cancelled = [&] {
    for (const auto& l : pool->ListLuns()) seen.push_back(l.name);
    return false;
  };
  auto r = control::ImportImage(*pool, "x", img, 512, 0, opts, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(seen, std::vector<std::string>(3, "x.importing"));
  ASSERT_EQ(pool->ListLuns().size(), 1u);
  EXPECT_EQ(pool->ListLuns()[0].name, "x");
  EXPECT_EQ(r.value().mapped_bytes, 3u << 20);
  EXPECT_EQ(r.value().shared_bytes, 0u);
}

// Zeros are skipped per unit of sharing: at format 3 a 64 KiB piece with one
// 4 KiB block of data maps that grain, not the 15 grains of zeros beside it.
TEST_F(Image, AnImportMapsOnlyTheGrainsThatHoldData) { ImportScattered(3, kBlock4k); }

// At format 2 the unit is the AU: a piece with any data maps whole, as before.
TEST_F(Image, AFormat2ImportMapsWholeAllocationUnits) { ImportScattered(2, 0); }

TEST_F(Image, ModesAreOctalPermissions) {
  EXPECT_EQ(control::ParseMode("600"), 0600u);
  EXPECT_EQ(control::ParseMode("0640"), 0640u);
  EXPECT_EQ(control::ParseMode("7777"), 07777u);
  EXPECT_FALSE(control::ParseMode(""));
  EXPECT_FALSE(control::ParseMode("8"));
  EXPECT_FALSE(control::ParseMode("17777"));
  EXPECT_FALSE(control::ParseMode("rw"));
}

// A loop device stands for a disk: written in place only with force, never
// while something holds it exclusively (a mount, md, LVM: here the test).
TEST_F(Image, ABlockDeviceNeedsForceAndIsRefusedWhileInUse) {
  if (::geteuid() != 0 || std::system("losetup --version >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "needs root and losetup";
  }
  DataLun("x");
  std::string backing = dir.path() + "/disk";
  WriteText(backing, std::string(8 << 20, 'B'));
  std::string out = dir.path() + "/losetup.out";
  if (std::system(("losetup --find --show " + backing + " >" + out + " 2>&1").c_str()) != 0) {
    GTEST_SKIP() << "no loop device: " << ReadText(out);
  }
  std::string dev = ReadText(out);
  dev.erase(dev.find_last_not_of("\n") + 1);
  store::Status s = control::ExportImage(*pool, "x", dev, opts, nullptr);
  EXPECT_NE(s.message().find("pass --force"), std::string::npos) << s.ToString();
  opts.force = true;
  {
    int holder = ::open(dev.c_str(), O_RDONLY | O_EXCL | O_CLOEXEC);
    EXPECT_GE(holder, 0);
    s = control::ExportImage(*pool, "x", dev, opts, nullptr);
    EXPECT_NE(s.message().find("is in use"), std::string::npos) << s.ToString();
    if (holder >= 0) ::close(holder);
  }
  EXPECT_EQ(ReadText(backing), std::string(8 << 20, 'B'));
  s = control::ExportImage(*pool, "x", dev, opts, nullptr);
  EXPECT_TRUE(s.ok()) << s.ToString();
  std::system(("losetup -d " + dev).c_str());
  EXPECT_EQ(ReadText(backing), std::string(4 << 20, 'D') + std::string(4 << 20, 'B'));
}

}  // namespace
}  // namespace cowstore::control_test
