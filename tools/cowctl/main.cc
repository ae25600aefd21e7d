// SPDX-License-Identifier: Apache-2.0
#include "tools/cowctl/commands.h"

int main(int argc, char** argv) { return cowstore::cowctl::Main(argc, argv); }
