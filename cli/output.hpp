// cli/output.hpp -- number formatting shared by the subcommands.
#pragma once

#include <cstdio>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

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

/// Rows of named, already formatted values: csv (a header line, then one
/// line per row) or a json array of objects with the column names as keys.
class RecordWriter {
 public:
  RecordWriter(std::ostream& out, bool csv, std::vector<std::string> columns)
      : out_(out), csv_(csv), columns_(std::move(columns)) {
    if (!csv_) {
      out_ << "[";
      return;
    }
    for (std::size_t i = 0; i < columns_.size(); ++i) out_ << (i ? "," : "") << columns_[i];
    out_ << "\n";
  }

  void row(const std::vector<std::string>& values) {
    if (csv_) {
      for (std::size_t i = 0; i < values.size(); ++i) out_ << (i ? "," : "") << values[i];
      out_ << "\n";
    } else {
      out_ << (rows_ ? ",\n " : "") << "{";
      for (std::size_t i = 0; i < values.size(); ++i) out_ << (i ? ", " : "") << quoted(columns_[i]) << ": " << values[i];
      out_ << "}";
    }
    ++rows_;
  }

  /// Closes the json array (nothing for csv).
  void finish() {
    if (!csv_) out_ << "]\n";
  }

 private:
  std::ostream& out_;
  bool csv_;
  std::vector<std::string> columns_;
  std::size_t rows_ = 0;
};

}  // namespace sigprop::cli
