// SPDX-License-Identifier: Apache-2.0
// cowctl's command line: every subcommand, parsed with CLI11.
#pragma once

namespace cowstore::cowctl {

// Runs cowctl; returns the exit status (0 ok, 1 failure, 2 bad usage).
int Main(int argc, char** argv);

}  // namespace cowstore::cowctl
