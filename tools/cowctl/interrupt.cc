// SPDX-License-Identifier: Apache-2.0
#include "tools/cowctl/interrupt.h"

#include <csignal>

namespace cowstore::cowctl {
namespace {

volatile sig_atomic_t g_interrupted = 0;
struct sigaction g_old_int, g_old_term;

void OnSignal(int) { g_interrupted = 1; }

}  // namespace

Interruptible::Interruptible() {
  g_interrupted = 0;
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;  // no SA_RESTART: a blocking read returns EINTR
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
}

Interruptible::~Interruptible() {
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
}

bool Interruptible::interrupted() { return g_interrupted != 0; }

}  // namespace cowstore::cowctl
