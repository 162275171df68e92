// Prints the accuracy tables of docs/accuracy.md: every closed form in double
// against the library's own formulas instantiated in 50 digits
// (boost::multiprecision::cpp_bin_float_50), peak and RMS relative error in
// units of eps = 2^-52 per function, then the complements 1 - r_out near
// r = 1. The cases and the method are in tests/reference50.hpp, which
// tests/test_reference50.cpp asserts.
//
//   build/examples/accuracy_report            # markdown on stdout
//   build/examples/accuracy_report --timing   # and the time per function on stderr

#include <chrono>
#include <cstdio>
#include <cstring>

#include "reference50.hpp"

namespace {

void report(const std::vector<sigprop::reference50::Case>& cases, bool timing) {
  std::vector<sigprop::reference50::Accuracy> all;
  for (const auto& c : cases) {
    const auto start = std::chrono::steady_clock::now();
    all.push_back(sigprop::reference50::measure(c));
    if (timing)
      std::fprintf(stderr, "%8.1f ms  %s\n",
                   std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count(),
                   c.function.c_str());
  }
  sigprop::reference50::print_table(stdout, all);
}

}  // namespace

int main(int argc, char** argv) {
  const bool timing = argc > 1 && std::strcmp(argv[1], "--timing") == 0;
  std::printf("### Closed forms\n\n");
  report(sigprop::reference50::closed_form_cases(), timing);
  std::printf("\n### Complements 1 - r_out, 1 - r in [2^-52, 10^-2]\n\n");
  report(sigprop::reference50::complement_cases(), timing);
  return 0;
}
