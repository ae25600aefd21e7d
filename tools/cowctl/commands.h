// SPDX-License-Identifier: Apache-2.0
// cowctl's command line: every subcommand, parsed with CLI11.
#pragma once

namespace cowstore::cowctl {

class CommandLine;  // cmd_common.h

// Runs cowctl; returns the exit status (0 ok, 1 failure, 2 bad usage).
int Main(int argc, char** argv);
// Adds the global options and every command to cl.app: the command line
// Main parses (tests read its words, e.g. to hold the shell completion to it).
void AddCommandLine(CommandLine& cl);

}  // namespace cowstore::cowctl
