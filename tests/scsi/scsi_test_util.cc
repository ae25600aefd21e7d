// SPDX-License-Identifier: Apache-2.0
#include "tests/scsi/scsi_test_util.h"

#include <condition_variable>
#include <cstring>
#include <mutex>

#include "handler/scsi/cdb.h"

namespace cowstore::scsi::testing {

Bytes Pattern(size_t n, uint8_t seed) {
  Bytes b(n);
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1103515245u + 12345u;
    b[i] = static_cast<uint8_t>(x >> 16);
  }
  return b;
}

::testing::AssertionResult IsGood(const CommandResult& r) {
  if (r.good()) return ::testing::AssertionSuccess();
  char buf[96];
  std::snprintf(buf, sizeof(buf), "status 0x%02x sense key 0x%x asc 0x%02x/0x%02x",
                static_cast<unsigned>(r.status), static_cast<unsigned>(r.sense_key()),
                r.additional_sense().asc, r.additional_sense().ascq);
  return ::testing::AssertionFailure() << buf;
}

::testing::AssertionResult HasSense(const CommandResult& r, SenseKey key, Asc code) {
  if (r.status == ScsiStatus::kCheckCondition && r.sense_length == 18 && r.sense_key() == key &&
      r.additional_sense() == code) {
    return ::testing::AssertionSuccess();
  }
  char buf[160];
  std::snprintf(buf, sizeof(buf),
                "got status 0x%02x key 0x%x asc 0x%02x/0x%02x, want key 0x%x asc 0x%02x/0x%02x",
                static_cast<unsigned>(r.status), static_cast<unsigned>(r.sense_key()),
                r.additional_sense().asc, r.additional_sense().ascq, static_cast<unsigned>(key),
                code.asc, code.ascq);
  return ::testing::AssertionFailure() << buf;
}

::testing::AssertionResult HasFieldPointer(const CommandResult& r, bool in_cdb, uint16_t byte,
                                           int bit) {
  const bool sksv = r.sense[15] & 0x80;
  const bool cd = r.sense[15] & 0x40;
  const bool bpv = r.sense[15] & 0x08;
  const uint16_t ptr = Be16(&r.sense[16]);
  bool ok = sksv && cd == in_cdb && ptr == byte;
  if (bit >= 0) ok = ok && bpv && (r.sense[15] & 0x07) == bit;
  if (ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "sksv=" << sksv << " cd=" << cd << " byte=" << ptr << " bpv=" << bpv
         << " bit=" << (r.sense[15] & 0x07) << ", want cd=" << in_cdb << " byte=" << byte
         << " bit=" << bit;
}

void ScsiTest::SetUp() {
  store::PoolOptions opts;
  opts.size_bytes = pool_bytes_;
  opts.allocation_unit = 1u << 20;
  auto pool = store::Pool::Create(&env_, "/pool0", opts);
  ASSERT_TRUE(pool.ok()) << pool.status().message();
  pool_ = std::move(pool.value());
  lu_ = AddLu(*pool_, "lun0", kLunBytes, Config("5f3b0c2a-41d2-4e8b-9a1c-000000000001"));
  ASSERT_NE(lu_, nullptr);
}

void ScsiTest::CrashAndReopen() {
  env_.CrashAfter(0);
  pipeline_.reset();
  extra_.clear();
  lu_.reset();
  (void)pool_->Close();
  pool_.reset();
  env_.PowerLoss(store::FaultInjectionEnv::Loss::kDropAll, 1);
  auto pool = store::Pool::Open(&env_, "/pool0");
  ASSERT_TRUE(pool.ok()) << pool.status().message();
  pool_ = std::move(pool.value());
  auto lun = pool_->OpenLun("lun0");
  ASSERT_TRUE(lun.ok());
  auto lu = LogicalUnit::Create(Config("5f3b0c2a-41d2-4e8b-9a1c-000000000001"), lun.value(), &directory_);
  ASSERT_TRUE(lu.ok());
  lu_ = lu.value();
}

std::unique_ptr<store::Pool> ScsiTest::CreateGrainPool(const std::string& path) {
  store::PoolOptions o;
  o.size_bytes = 32ull << 20;  // the 16 MiB journal's and 16 MiB of data
  o.allocation_unit = 64u << 10;
  o.format = 3;
  o.grain = kGrain;
  auto p = store::Pool::Create(&env_, path, o);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? std::move(p.value()) : nullptr;
}

void ScsiTest::CloseExtraPool(std::unique_ptr<store::Pool>* pool) {
  extra_.clear();
  if (*pool) {
    EXPECT_TRUE((*pool)->Close().ok());
  }
  pool->reset();
}

void ScsiTest::TearDown() {
  pipeline_.reset();  // answers anything still queued, before the LUs go
  extra_.clear();
  lu_.reset();
  if (pool_) {
    EXPECT_TRUE(pool_->Close().ok());
    pool_.reset();
  }
}

LunConfig ScsiTest::Config(const std::string& serial, const std::string& group) const {
  LunConfig c;
  c.unit_serial = serial;
  c.copy_group = group;
  return c;
}

std::shared_ptr<LogicalUnit> ScsiTest::AddLu(store::Pool& pool, const std::string& name,
                                             uint64_t bytes, LunConfig config, uint32_t block) {
  auto info = pool.CreateLun(name, bytes, block);
  EXPECT_TRUE(info.ok()) << info.status().message();
  auto lun = pool.OpenLun(name);
  EXPECT_TRUE(lun.ok()) << lun.status().message();
  if (!lun.ok()) return nullptr;
  auto lu = LogicalUnit::Create(std::move(config), lun.value(), &directory_);
  EXPECT_TRUE(lu.ok());
  if (!lu.ok()) return nullptr;
  extra_.push_back(lu.value());
  return lu.value();
}

const char* RouteName(Route r) {
  switch (r) {
    case Route::kBlocking:
      return "Blocking";
    case Route::kDeferred:
      return "DeferredCommit";
    case Route::kPipeline:
      return "Pipeline";
  }
  return "?";
}

namespace {

// One command handed to the fixture's pipeline, and its answer.
struct Submitted {
  LogicalUnit* lu = nullptr;
  const Bytes* cdb = nullptr;
  std::span<const iovec> data;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  CommandResult result;
};

}  // namespace

CommandResult ScsiTest::Run(LogicalUnit& lu, const Bytes& cdb, std::span<const iovec> data) {
  switch (route_) {
    case Route::kBlocking:
      return lu.Execute(cdb, data);
    case Route::kDeferred: {
      DeferredCommit deferred;
      CommandResult r = lu.Execute(cdb, data, &deferred);
      store::Status s = deferred.Commit();
      return r.good() && !s.ok() ? CommitFailure(lu, s) : r;
    }
    case Route::kPipeline:
      break;
  }
  if (!pipeline_) {
    CommandPipeline::Callbacks cb;
    cb.execute = [](void* tag, DeferredCommit* deferred) {
      auto* c = static_cast<Submitted*>(tag);
      return c->lu->Execute(*c->cdb, c->data, deferred);
    };
    cb.complete = [](std::span<const CommandPipeline::Finished> done) {
      for (const auto& f : done) {
        auto* c = static_cast<Submitted*>(f.tag);
        std::lock_guard<std::mutex> g(c->mu);
        c->result = f.result;
        c->done = true;
        c->cv.notify_all();
      }
    };
    // The commands of this fixture all run on lu_'s pool or pools beside
    // it; a failed commit is answered as lu_'s (counters only).
    cb.commit_failure = [this](const store::Status& s) { return CommitFailure(*lu_, s); };
    pipeline_ = std::make_unique<CommandPipeline>(2, std::move(cb));
  }
  Submitted c;
  c.lu = &lu;
  c.cdb = &cdb;
  c.data = data;
  EXPECT_TRUE(pipeline_->Submit(&c));
  std::unique_lock<std::mutex> lk(c.mu);
  c.cv.wait(lk, [&] { return c.done; });
  return c.result;
}

CommandResult ScsiTest::Exec(LogicalUnit& lu, const Bytes& cdb, const Bytes& data_out) {
  Bytes copy = data_out;
  iovec v{copy.data(), copy.size()};
  std::span<const iovec> iov;
  if (!copy.empty()) iov = std::span<const iovec>(&v, 1);
  return Run(lu, cdb, iov);
}

CommandResult ScsiTest::ExecIn(LogicalUnit& lu, const Bytes& cdb, size_t len, Bytes* out) {
  out->assign(len, 0xEE);
  iovec v{out->data(), out->size()};
  CommandResult r = Run(lu, cdb, std::span<const iovec>(&v, len ? 1 : 0));
  out->resize(r.data_in_length);
  return r;
}

CommandResult ScsiTest::Write(LogicalUnit& lu, uint64_t lba, const Bytes& data) {
  return Exec(lu, Write16(lba, static_cast<uint32_t>(data.size() / lu.lun().block_size())), data);
}

Bytes ScsiTest::Read(LogicalUnit& lu, uint64_t lba, uint32_t blocks) {
  Bytes out;
  CommandResult r = ExecIn(lu, Read16(lba, blocks), size_t{blocks} * lu.lun().block_size(), &out);
  EXPECT_TRUE(IsGood(r));
  return out;
}

}  // namespace cowstore::scsi::testing
