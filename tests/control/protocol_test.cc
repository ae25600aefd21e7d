// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

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
