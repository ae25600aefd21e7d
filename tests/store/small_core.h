// SPDX-License-Identifier: Apache-2.0
// A small format 2 Core for tests that reach the engine below Pool (its
// test hooks): 64 KiB AUs, a 64 KiB journal, 64 data AUs, one LUN "a" of
// 8 AUs. ChurnUntilCheckpoint makes and deletes LUNs until the journal
// fills and a checkpoint runs, returning the first error.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "handler/store/fault_env.h"
#include "handler/store/format_v3.h"
#include "handler/store/pool_impl.h"

namespace cowstore::store::testing {

constexpr uint32_t kSmallCoreAu = 64 * 1024;

// Null (with a test failure) if the pool cannot be made.
inline std::shared_ptr<Core> MakeSmallCore(FaultInjectionEnv* env) {
  PoolOptions po;
  po.allocation_unit = kSmallCoreAu;
  po.journal_bytes = 64 * 1024;
  po.size_bytes = 128 * 1024 + 64 * uint64_t{kSmallCoreAu};
  auto c = Core::Create(env, "pool", po);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (!c.ok()) return nullptr;
  std::shared_ptr<Core> core = c.value();
  EXPECT_TRUE(core->CreateLun("a", 8 * kSmallCoreAu, 4096).ok());
  return core;
}

// Null (with a test failure) if the pool cannot be made.
inline std::shared_ptr<Core> MakeGrainCore(FaultInjectionEnv* env, uint64_t bytes) {
  {
    auto f = env->OpenLocked("pool", Env::Mode::kCreate);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    if (!f.ok()) return nullptr;
    Uuid id{};
    id.fill(3);
    Status s = FormatV3::Create(f->get(), id, 64 << 10, 4 << 10, bytes, 256 << 10, 1);
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (!s.ok()) return nullptr;
  }
  auto opened = Core::Open(env, "pool", false);
  EXPECT_TRUE(opened.ok()) << opened.status().ToString();
  return opened.ok() ? *opened : nullptr;
}

// LUNs made and deleted fill the 64 KiB journal: a checkpoint.
inline Status ChurnUntilCheckpoint(Core* core) {
  Status s;
  for (int i = 0; i < 4000 && s.ok(); i++) {
    s = core->CreateLun("x", kSmallCoreAu, 4096).status();
    if (s.ok()) s = core->DeleteLun("x");
  }
  return s;
}

}  // namespace cowstore::store::testing
