// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include "handler/control/client.h"
#include "handler/control/protocol.h"

namespace cowstore::control_test {
namespace {

TEST(Protocol, EncodingRoundTrips) {
  std::string raw = "a b=c\n%\x01/ok:-_.,+";
  EXPECT_EQ(control::Decode(control::Encode(raw)), raw);
  EXPECT_EQ(control::Encode("a b"), "a%20b");
  EXPECT_FALSE(control::Decode("%4"));
  EXPECT_FALSE(control::Decode("%zz"));
  auto r = control::ParseRecord("lun name=vm%201 size=10");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->Get("name"), "vm 1");
  EXPECT_EQ(r->GetU64("size"), 10u);
  EXPECT_FALSE(control::ParseRecord(""));
  EXPECT_FALSE(control::ParseRecord("x  y=1"));
  EXPECT_FALSE(control::ParseRecord("x =1"));
  EXPECT_FALSE(control::Record().Set("n", "12a").GetU64("n"));
}

}  // namespace
}  // namespace cowstore::control_test

namespace cowstore::control {
namespace {

// Every store code crosses the socket by name and comes back as itself,
// the last one (kLastCode) included; a name the client does not know
// reads as kIOError.
TEST(Protocol, ErrorRepliesCarryEveryStoreCode) {
  for (int c = 1; c <= static_cast<int>(store::kLastCode); ++c) {
    const auto code = static_cast<store::Code>(c);
    Reply r;
    r.head = Record("error");
    r.head.Set("code", store::CodeName(code)).Set("message", "m");
    EXPECT_EQ(r.status().code(), code) << store::CodeName(code);
    EXPECT_EQ(r.status().message(), "m");
  }
  Reply u;
  u.head = Record("error");
  u.head.Set("code", "SomethingNewer").Set("message", "m");
  EXPECT_EQ(u.status().code(), store::Code::kIOError);
}

}  // namespace
}  // namespace cowstore::control
