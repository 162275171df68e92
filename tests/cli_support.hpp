// The command-line tool run in-process (cli/run.hpp) by the tests that call
// it: its exit status, stdout and stderr.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "../cli/run.hpp"

namespace sigprop::test {

struct CliOutcome {
  int status;
  std::string out, err;
};

inline CliOutcome run_cli(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int status = sigprop::cli::run(args, out, err);
  return {status, out.str(), err.str()};
}

}  // namespace sigprop::test
