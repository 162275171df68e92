// sigprop/core/errors.hpp -- the exception family.
//
// Model: Boost.Math's default error policy (policies/error_handling.hpp):
// a domain error throws std::domain_error, an overflow std::overflow_error,
// and the message names the function, the parameter, its value and the valid
// range. Checks never depend on NDEBUG.
#pragma once

#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>

namespace sigprop {

/// A parameter or input moment outside its valid range.
class domain_error : public std::domain_error {
 public:
  using std::domain_error::domain_error;
};

/// A result too large to represent (for example e^x in the softmax moments).
class overflow_error : public std::overflow_error {
 public:
  using std::overflow_error::overflow_error;
};

namespace detail {

inline std::string format_number(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  // Shortest of 15 or 17 significant digits that reads back as x. strtod,
  // not std::stod: stod throws std::out_of_range on subnormals (ERANGE).
  for (int digits : {15, 17}) {
    std::ostringstream s;
    s.precision(digits);
    s << x;
    if (digits == 17 || std::strtod(s.str().c_str(), nullptr) == x) return s.str();
  }
  return {};
}

/// The one way to report bad input: "function: what".
[[noreturn]] inline void raise_domain(const std::string& function, const std::string& what) {
  throw domain_error(function + ": " + what);
}

/// "function: parameter = value is outside the valid range range", the value
/// already written (a size, a name).
[[noreturn]] inline void raise_domain(const std::string& function, const std::string& parameter,
                                      const std::string& value, const std::string& range) {
  raise_domain(function, parameter + " = " + value + " is outside the valid range " + range);
}

/// The same with a number, written as the shortest decimal that reads back.
[[noreturn]] inline void raise_domain(const std::string& function, const std::string& parameter, double value,
                                      const std::string& range) {
  raise_domain(function, parameter, format_number(value), range);
}

[[noreturn]] inline void raise_overflow(const char* function, const char* quantity,
                                        double value, const std::string& hint) {
  throw overflow_error(std::string(function) + ": " + quantity + " = " + format_number(value) +
                       " overflows" + (hint.empty() ? "" : " (" + hint + ")"));
}

}  // namespace detail

}  // namespace sigprop
