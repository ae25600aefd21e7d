// SPDX-License-Identifier: Apache-2.0
// Loading and registration: what tcmu-runner's load_our_module() does with
// handler_cowstore.so, and the shape of the handler it registers.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tests/plugin/plugin_test_util.h"

namespace cowstore::plugin_test {
namespace {

using LoadTest = PluginTest;

TEST_F(LoadTest, DlopenWithRtldNowLocalAndHandlerInitRegistersOneHandler) {
  // SetUp loaded it exactly as the runner does; a failed load fails there.
  ASSERT_NE(runner().handler(), nullptr);
  EXPECT_GE(runner().registrations(), 1);
}

TEST_F(LoadTest, SubtypeIsCowstoreAndUsableAsDbusObjectName) {
  const char* subtype = handler().subtype;
  ASSERT_NE(subtype, nullptr);
  EXPECT_STREQ(subtype, "cowstore");
  for (const char* p = subtype; *p; ++p) {
    EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(*p)) || *p == '_') << subtype;
  }
  // No subtype Debian ships may be a prefix of ours, nor ours of theirs
  // (dev_config is matched by prefix).
  for (const char* other : {"fbo", "zbc", "qcow", "rbd", "file", "glfs"}) {
    EXPECT_NE(std::strncmp(subtype, other, std::strlen(other)), 0) << other;
  }
  EXPECT_NE(handler().name, nullptr);
  ASSERT_NE(handler().cfg_desc, nullptr);
  EXPECT_NE(std::string(handler().cfg_desc).find("cowstore/<pool>/<lun>"), std::string::npos);
}

TEST_F(LoadTest, HandleCmdOnlyMode) {
  tcmu::Handler& h = handler();
  EXPECT_NE(h.handle_cmd, nullptr);
  EXPECT_NE(h.open, nullptr);
  EXPECT_NE(h.close, nullptr);
  EXPECT_NE(h.reconfig, nullptr);  // without it the runner refuses even a resize
  EXPECT_NE(h.check_config, nullptr);
  // No callouts: the runner's generic emulation (mixed mode) never runs.
  // Every runner reads its own layout of slots after handle_cmd (1.5.2:
  // 160 bytes, 1.5.3: 184, 1.5.4 on: 200); all zero is NULL/false in each.
  ASSERT_GE(sizeof(h), 200u);
  const auto* bytes = reinterpret_cast<const unsigned char*>(&h);
  for (size_t i = 80; i < sizeof(h); ++i) EXPECT_EQ(bytes[i], 0) << "byte " << i;
  // Asynchronous completion by default: handle_cmd runs on the device's
  // command thread (nr_threads 0) and completes commands through libtcmu.
  if (!std::getenv("COWSTORE_COMPLETION")) {
    EXPECT_EQ(h.nr_threads, 0);
  }
}

// Restores COWSTORE_COMPLETION and COWSTORE_THREADS_PER_LUN as the test
// found them, and the handler as handler_init then sets it up.
class ModeEnvironment {
 public:
  ModeEnvironment() {
    for (const char* name : {"COWSTORE_COMPLETION", "COWSTORE_THREADS_PER_LUN"}) {
      const char* v = std::getenv(name);
      saved_.emplace_back(name, v ? std::optional<std::string>(v) : std::nullopt);
    }
  }
  ~ModeEnvironment() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
    EXPECT_EQ(fake::Runner::Get().InitAgain(), 0);
  }
  ModeEnvironment(const ModeEnvironment&) = delete;
  ModeEnvironment& operator=(const ModeEnvironment&) = delete;

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST_F(LoadTest, SyncModeThreadsPerLunFollowTheEnvironmentWithinLimits) {
  ModeEnvironment restore;
  setenv("COWSTORE_COMPLETION", "sync", 1);
  setenv("COWSTORE_THREADS_PER_LUN", "4", 1);
  ASSERT_EQ(runner().InitAgain(), 0);
  EXPECT_EQ(handler().nr_threads, 4);
  setenv("COWSTORE_THREADS_PER_LUN", "0", 1);
  ASSERT_EQ(runner().InitAgain(), 0);
  EXPECT_EQ(handler().nr_threads, 32);  // the default: ESXi's 32 in flight (docs/design/plugin.md)
  EXPECT_TRUE(runner().LogContains("COWSTORE_THREADS_PER_LUN"));
  setenv("COWSTORE_THREADS_PER_LUN", "12abc", 1);
  ASSERT_EQ(runner().InitAgain(), 0);
  EXPECT_EQ(handler().nr_threads, 32);
  unsetenv("COWSTORE_THREADS_PER_LUN");
  ASSERT_EQ(runner().InitAgain(), 0);
  EXPECT_EQ(handler().nr_threads, 32);
}

TEST_F(LoadTest, AsyncModeAsksTheRunnerForNoWorkers) {
  ModeEnvironment restore;
  for (const char* mode : {"async", ""}) {
    setenv("COWSTORE_COMPLETION", mode, 1);
    setenv("COWSTORE_THREADS_PER_LUN", "4", 1);  // our pipeline's workers, not the runner's
    ASSERT_EQ(runner().InitAgain(), 0);
    EXPECT_EQ(handler().nr_threads, 0) << "COWSTORE_COMPLETION='" << mode << "'";
  }
  runner().ClearLogs();
  setenv("COWSTORE_COMPLETION", "fast", 1);
  ASSERT_EQ(runner().InitAgain(), 0);
  EXPECT_EQ(handler().nr_threads, 0);
  EXPECT_TRUE(runner().LogContains("COWSTORE_COMPLETION='fast' is neither 'async' nor 'sync'"));
}

TEST_F(LoadTest, ExportsOnlyHandlerInit) {
  void* dl = dlopen(fake::PluginPath().c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  ASSERT_NE(dl, nullptr);
  EXPECT_NE(dlsym(dl, "handler_init"), nullptr);
  // Internal C++ symbols (store, SCSI layer, runtime) are not visible.
  EXPECT_EQ(dlsym(dl, "_ZN8cowstore5store10DefaultEnvEv"), nullptr);
  EXPECT_EQ(dlsym(dl, "_ZN8cowstore6common14ParseCfgstringESt17basic_string_viewIcSt11char_traitsIcEEPNS0_7LunSpecEPNSt7__cxx1112basic_stringIcS3_SaIcEEE"), nullptr);
  dlclose(dl);
}

}  // namespace
}  // namespace cowstore::plugin_test
