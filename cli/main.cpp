// The sigprop command-line tool; all logic lives in run.hpp.
#include <iostream>
#include <string>
#include <vector>

#include "run.hpp"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  return sigprop::cli::run(args, std::cout, std::cerr);
}
