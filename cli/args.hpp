// cli/args.hpp -- command-line parsing for the sigprop tool.
//
// Flags are `--name value` or `--name=value`. Numbers are parsed in full
// (no trailing characters) and must be finite; every problem becomes a
// usage_error whose message names the flag, the value and what is valid.
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "sigprop/components/detail/attention_terms.hpp"
#include "sigprop/components/detail/rotary.hpp"
#include "sigprop/core/errors.hpp"
#include "sigprop/core/validate.hpp"

namespace sigprop::cli {

/// Bad command-line usage (exit status 2).
class usage_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The largest whole number a count flag takes (widths, lengths, vocabulary):
/// far beyond any model, and well inside the range where a double holds
/// every whole number exactly (2^53 ~ 9e15).
constexpr double max_count = 1e15;

/// A count flag's value `v` (typed as `shown`): a whole number in [1, max_count].
inline double require_count(const std::string& flag, double v, const std::string& shown) {
  if (!(v >= 1 && v <= max_count && std::floor(v) == v))
    throw usage_error("--" + flag + " = " + shown + " is outside the valid range: a whole number in [1, 1e+15]");
  return v;
}

/// Parses all of `s` as a finite double into `v`; returns null, or what is
/// wrong with `s` (to follow "--flag = 's' ").
inline const char* number_problem(const std::string& s, double& v) {
  char* end = nullptr;
  errno = 0;
  v = s.empty() ? NAN : std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || std::isspace(static_cast<unsigned char>(s[0])))
    return "is not a number";
  // ERANGE also flags subnormal results, which are valid; only overflow and underflow to 0 are not.
  if (!std::isfinite(v)) return "is outside the valid range: a finite number";
  if (errno == ERANGE && v == 0) return "underflows to 0 (the smallest magnitude is 4.9e-324)";
  return nullptr;
}

/// `text` split at every `separator`, empty pieces kept ("a," is {"a", ""}).
inline std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> pieces(1);
  for (char ch : text) {
    if (ch == separator) pieces.emplace_back();
    else pieces.back() += ch;
  }
  return pieces;
}

/// Parsed `--flag value` pairs plus positional words, checked against the
/// flags a command accepts.
class Args {
 public:
  /// `words` excludes the program and subcommand names. `allowed` lists the
  /// flags (without dashes) this command accepts; `switches` those that take
  /// no value.
  Args(const std::vector<std::string>& words, const std::set<std::string>& allowed,
       const std::set<std::string>& switches = {}) {
    for (std::size_t i = 0; i < words.size(); ++i) {
      const std::string& w = words[i];
      if (w.size() < 3 || w.compare(0, 2, "--") != 0) {
        if (!w.empty() && w[0] == '-' && !is_number(w))
          throw usage_error("unknown option '" + w + "' (options start with --; see --help)");
        positional_.push_back(w);
        continue;
      }
      std::string name = w.substr(2), value;
      const auto eq = name.find('=');
      const bool inline_value = eq != std::string::npos;
      if (inline_value) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
      }
      if (!allowed.count(name)) throw usage_error("unknown flag --" + name + " (see --help)");
      if (values_.count(name)) throw usage_error("flag --" + name + " given twice");
      if (switches.count(name)) {
        if (inline_value) throw usage_error("flag --" + name + " takes no value");
        values_[name] = "";
        continue;
      }
      if (!inline_value) {
        if (i + 1 >= words.size()) throw usage_error("flag --" + name + " needs a value");
        value = words[++i];
      }
      values_[name] = value;
    }
  }

  const std::vector<std::string>& positional() const { return positional_; }
  bool has(const std::string& name) const { return values_.count(name) > 0; }

  std::string text(const std::string& name, const std::string& fallback) const {
    return has(name) ? values_.at(name) : fallback;
  }

  /// Finite real number.
  double number(const std::string& name, double fallback) const {
    if (!has(name)) return fallback;
    return parse_number(name, values_.at(name));
  }

  /// Positive integer (a width, a length, a count).
  double count(const std::string& name, double fallback) const {
    if (!has(name)) return fallback;
    return require_count(name, parse_number(name, values_.at(name)), values_.at(name));
  }

  /// One of a fixed set of words.
  std::string choice(const std::string& name, const std::vector<std::string>& options,
                     const std::string& fallback) const {
    if (!has(name)) return fallback;
    const std::string& v = values_.at(name);
    for (const auto& o : options)
      if (v == o) return v;
    std::string list;
    for (const auto& o : options) list += (list.empty() ? "" : "|") + o;
    throw usage_error("--" + name + " = '" + v + "' is not one of " + list);
  }

  static bool is_number(const std::string& s) {
    if (s.empty()) return false;
    char* end = nullptr;
    errno = 0;
    std::strtod(s.c_str(), &end);
    return end == s.c_str() + s.size();
  }

 private:
  static double parse_number(const std::string& name, const std::string& s) {
    double v = 0;
    if (const char* problem = number_problem(s, v)) throw usage_error("--" + name + " = '" + s + "' " + problem);
    return v;
  }

  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
};

/// --rotary BASE: rotary position embeddings on every head (0: none), for
/// heads of width `head_width` (2 to 65536 coordinates with a rotation).
inline double parse_rotary(const Args& a, double head_width) {
  const double base = a.number("rotary", 0);
  sigprop::detail::require("sigprop", "--rotary", base,
                           [](double v) { return v == 0 || (std::isfinite(v) && v > 1); }, "{0} or (1, inf)");
  if (base != 0 && !(head_width >= 2 && head_width <= sigprop::detail::max_rotary_width))
    throw usage_error("--rotary needs heads of width at least 2 and at most 65536 (head width " +
                      sigprop::detail::format_number(head_width) + ")");
  return base;
}

/// --logit-scale inv-sqrt-dk|inv-dk: the attention logits Q K^T over sqrt(d_k) or d_k.
inline LogitScale parse_logit_scale(const Args& a) {
  return a.choice("logit-scale", {"inv-sqrt-dk", "inv-dk"}, "inv-sqrt-dk") == "inv-dk" ? LogitScale::inv_dk
                                                                                       : LogitScale::inv_sqrt_dk;
}

}  // namespace sigprop::cli
