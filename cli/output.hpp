// cli/output.hpp -- number formatting shared by the subcommands.
#pragma once

#include <cstdio>
#include <string>

#include "sigprop/core/errors.hpp"

namespace sigprop::cli {

/// Shortest decimal that reads back as x (JSON and CSV): no digits lost.
inline std::string exact(double x) { return sigprop::detail::format_number(x); }

/// Six significant digits for tables meant to be read.
inline std::string brief(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

/// A JSON string literal (the tool only emits ASCII names).
inline std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace sigprop::cli
