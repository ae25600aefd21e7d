// SPDX-License-Identifier: Apache-2.0
// The checkpoint's metadata turnover (meta_turnover.h): which AUs a new
// checkpoint keeps, retires (pending) and frees at once, and each set of
// AUs it refuses, leaving its output alone.
#include "handler/store/meta_turnover.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "handler/store/fault_env.h"
#include "handler/store/pool_impl.h"
#include "tests/store/small_core.h"

namespace cowstore::store {
namespace {

using V = std::vector<uint64_t>;

// Format 2: a fresh chain each time, exactly the AUs handed over.
TEST(MetaTurnover, AFreshChainRetiresAllOfTheCurrentSet) {
  MetaTurnover t;
  ASSERT_TRUE(SplitMetaTurnover({4, 2, 9}, {7, 5}, {7, 5}, &t).ok());
  EXPECT_EQ(t.kept, V{});
  EXPECT_EQ(t.retired, (V{2, 4, 9}));
  EXPECT_EQ(t.unused, V{});
}

// Format 3: chunks that survive keep their AUs, an emptied one retires,
// and a handed-over AU the checkpoint did not need is free at once.
TEST(MetaTurnover, OverlappingSetsKeepTheSharedAusAndFreeUnusedHandedOverAtOnce) {
  MetaTurnover t;
  ASSERT_TRUE(SplitMetaTurnover({10, 3, 11, 12}, {20, 21, 22}, {12, 21, 3, 10}, &t).ok());
  EXPECT_EQ(t.kept, (V{3, 10, 12}));
  EXPECT_EQ(t.retired, V{11});
  EXPECT_EQ(t.unused, (V{20, 22}));
}

TEST(MetaTurnover, NothingHandedOverAndEverythingKeptChangesNothing) {
  MetaTurnover t;
  ASSERT_TRUE(SplitMetaTurnover({1, 2}, {}, {2, 1}, &t).ok());
  EXPECT_EQ(t.kept, (V{1, 2}));
  EXPECT_TRUE(t.retired.empty());
  EXPECT_TRUE(t.unused.empty());
}

// Each refusal: kIOError that says the pool must be reopened, and *out as
// it was.
TEST(MetaTurnover, RefusesAnAuNeitherCurrentNorHandedOverDuplicatesAndOverlap) {
  struct Case {
    const char* what;
    V current, handed, next;
    const char* names;  // in the message
  };
  const Case cases[] = {
      {"foreign AU", {1, 2}, {5}, {5, 6}, "AU 6, neither current nor handed over"},
      {"duplicate", {1, 2}, {5, 6}, {5, 6, 5}, "AU 5 twice"},
      {"duplicate of a kept AU", {1, 2}, {5}, {2, 5, 2}, "AU 2 twice"},
      {"current and handed over overlap", {1, 2, 3}, {3, 4}, {3, 4}, "AU 3 is both current and handed over"},
      // Would retire AU 2 twice (pending twice), or free AU 5 twice.
      {"duplicate in the current set", {2, 1, 2}, {5}, {5}, "current set names AU 2 twice"},
      {"duplicate handed over", {1}, {5, 6, 5}, {6}, "AU 5 is handed over twice"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    MetaTurnover t;
    t.kept = {99};
    t.retired = {98};
    t.unused = {97};
    const Status s = SplitMetaTurnover(c.current, c.handed, c.next, &t);
    EXPECT_EQ(s.code(), Code::kIOError);
    EXPECT_NE(s.message().find(c.names), std::string::npos) << s.message();
    const std::string tail = "; the pool must be reopened";
    ASSERT_GE(s.message().size(), tail.size());
    EXPECT_EQ(s.message().substr(s.message().size() - tail.size()), tail) << s.message();
    EXPECT_EQ(t.kept, V{99});
    EXPECT_EQ(t.retired, V{98});
    EXPECT_EQ(t.unused, V{97});
  }
}

// Core's side of the rule's premise: AUs handed over outside a checkpoint
// (an engine bug, made here by a test hook) make the next checkpoint fail
// the pool instead of freeing them at once, unpunched, with the unused ones.
TEST(MetaTurnoverCore, AUsHandedOverOutsideACheckpointFailTheNextOne) {
  constexpr uint32_t kAu = testing::kSmallCoreAu;
  FaultInjectionEnv env;
  std::shared_ptr<Core> core = testing::MakeSmallCore(&env);
  ASSERT_TRUE(core);
  ASSERT_TRUE(core->TakeMetaForTest(1));
  const Status s = testing::ChurnUntilCheckpoint(core.get());
  EXPECT_EQ(s.code(), Code::kIOError);
  EXPECT_NE(s.message().find("handed over outside a checkpoint"), std::string::npos) << s.ToString();
  EXPECT_FALSE(core->CreateLun("y", kAu, 4096).ok()) << "the pool serves after a refused checkpoint";
}

}  // namespace
}  // namespace cowstore::store
