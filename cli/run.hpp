// cli/run.hpp -- the sigprop command-line tool as a function, so that tests
// can call it without a process and without exit() (cli/run.cpp, docs/cli.md).
//
// Exit status: 0 success, 2 bad usage or a value outside its valid range
// or a result that overflows (one line on stderr naming the flag or quantity,
// the value and the valid range; nothing on stdout).
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace sigprop::cli {

inline constexpr const char* version = "0.1.0";

/// The tool's top-level usage text.
void usage(std::ostream& out);

/// The names `sigprop component` accepts, in the order of its help.
std::vector<std::string> component_names();

/// The whole tool. `args` excludes the program name.
int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace sigprop::cli
