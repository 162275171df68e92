// Golden outputs of the command-line tool: every invocation of cases.txt is
// run in-process and its status, stdout and stderr compared with
// expected.txt. Numbers agree to 1e-12 relative (or, for one printed with
// fewer than 15 significant digits, to one unit of its last digit, which a
// change of 1e-12 can flip); all other text must be identical.
//
//   golden_check CASES EXPECTED           compare (the ctest entry)
//   golden_check --write CASES EXPECTED   store the current outputs
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli/run.hpp"

namespace {

struct Outcome {
  int status = 0;
  std::string out, err;
};

std::vector<std::string> read_cases(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<std::string> cases;
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != '#') cases.push_back(line);
  return cases;
}

Outcome run_case(const std::string& line) {
  std::istringstream words(line);
  std::vector<std::string> args;
  for (std::string w; words >> w;) args.push_back(w);
  std::ostringstream out, err;
  Outcome o;
  o.status = sigprop::cli::run(args, out, err);
  o.out = out.str();
  o.err = err.str();
  return o;
}

void write_block(std::ostream& s, const std::string& line, const Outcome& o) {
  s << "### " << line << "\nstatus " << o.status << "\n--- stdout " << o.out.size() << "\n"
    << o.out << "\n--- stderr " << o.err.size() << "\n" << o.err << "\n";
}

std::string read_sized(std::istream& in, const std::string& header) {
  std::string line;
  std::getline(in, line);
  if (line.rfind(header, 0) != 0) throw std::runtime_error("expected '" + header + "', read '" + line + "'");
  std::string text(std::stoul(line.substr(header.size())), '\0');
  in.read(&text[0], static_cast<std::streamsize>(text.size()));
  std::getline(in, line);  // the newline after the block
  return text;
}

std::vector<std::pair<std::string, Outcome>> read_expected(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<std::pair<std::string, Outcome>> blocks;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("### ", 0) != 0) throw std::runtime_error("expected '### ', read '" + line + "'");
    const std::string header = line;
    Outcome o;
    std::getline(in, line);
    o.status = std::stoi(line.substr(7));
    o.out = read_sized(in, "--- stdout ");
    o.err = read_sized(in, "--- stderr ");
    blocks.emplace_back(header, o);
  }
  return blocks;
}

// The place value of the last printed digit of a decimal number.
double last_digit_unit(const std::string& number) {
  const auto e = number.find_first_of("eE");
  const std::string mantissa = number.substr(0, e);
  const int exponent = e == std::string::npos ? 0 : std::stoi(number.substr(e + 1));
  const auto dot = mantissa.find('.');
  const int decimals = dot == std::string::npos ? 0 : static_cast<int>(mantissa.size() - dot - 1);
  return std::pow(10.0, exponent - decimals);
}

int significant_digits(const std::string& number) {
  int digits = 0;
  bool leading = true;
  for (const char c : number.substr(0, number.find_first_of("eE"))) {
    if (c < '0' || c > '9') continue;
    if (c != '0') leading = false;
    if (!leading) ++digits;
  }
  return digits;
}

bool numbers_agree(const std::string& a, const std::string& b) {
  if (a == b) return true;
  const double x = std::strtod(a.c_str(), nullptr), y = std::strtod(b.c_str(), nullptr);
  const double diff = std::abs(x - y);
  if (diff <= 1e-12 * std::max(std::abs(x), std::abs(y))) return true;
  const int digits = std::min(significant_digits(a), significant_digits(b));
  return digits < 15 && diff <= 1.0001 * std::max(last_digit_unit(a), last_digit_unit(b));
}

// Empty when the texts agree, else a description of the first difference.
std::string difference(const std::string& expected, const std::string& actual) {
  static const std::regex number(R"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)");
  std::sregex_iterator i(expected.begin(), expected.end(), number), j(actual.begin(), actual.end(), number), end;
  std::size_t at_e = 0, at_a = 0;
  for (; i != end && j != end; ++i, ++j) {
    const std::string text_e = expected.substr(at_e, static_cast<std::size_t>(i->position()) - at_e);
    const std::string text_a = actual.substr(at_a, static_cast<std::size_t>(j->position()) - at_a);
    if (text_e != text_a) return "text '" + text_e + "' became '" + text_a + "'";
    if (!numbers_agree(i->str(), j->str())) return "number " + i->str() + " became " + j->str();
    at_e = static_cast<std::size_t>(i->position() + i->length());
    at_a = static_cast<std::size_t>(j->position() + j->length());
  }
  if ((i == end) != (j == end)) return "a different count of numbers";
  if (expected.substr(at_e) != actual.substr(at_a))
    return "text '" + expected.substr(at_e) + "' became '" + actual.substr(at_a) + "'";
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const bool write = argc == 4 && std::string(argv[1]) == "--write";
    if (argc != 3 && !write) {
      std::cerr << "usage: golden_check [--write] CASES EXPECTED\n";
      return 2;
    }
    const std::vector<std::string> cases = read_cases(argv[write ? 2 : 1]);
    const std::string expected_path = argv[write ? 3 : 2];
    if (write) {
      std::ofstream s(expected_path, std::ios::binary);
      for (const std::string& line : cases) write_block(s, line, run_case(line));
      std::cout << "wrote " << cases.size() << " cases to " << expected_path << "\n";
      return 0;
    }
    const auto expected = read_expected(expected_path);
    if (expected.size() != cases.size()) {
      std::cerr << expected_path << " holds " << expected.size() << " cases, " << argv[1] << " lists "
                << cases.size() << "\n";
      return 1;
    }
    int failures = 0;
    for (std::size_t k = 0; k < cases.size(); ++k) {
      const auto& [line, want] = expected[k];
      if (line != "### " + cases[k]) {
        std::cerr << "case " << k + 1 << ": expected.txt has '" << line << "', cases.txt '" << cases[k] << "'\n";
        ++failures;
        continue;
      }
      const Outcome got = run_case(cases[k]);
      std::string problem;
      if (got.status != want.status)
        problem = "status " + std::to_string(want.status) + " became " + std::to_string(got.status);
      else if (std::string d = difference(want.out, got.out); !d.empty())
        problem = "stdout: " + d;
      else if (std::string e = difference(want.err, got.err); !e.empty())
        problem = "stderr: " + e;
      if (!problem.empty()) {
        std::cerr << "FAIL sigprop " << cases[k] << "\n  " << problem << "\n";
        ++failures;
      }
    }
    std::cout << cases.size() - static_cast<std::size_t>(failures) << " of " << cases.size()
              << " invocations agree with " << expected_path << "\n";
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "golden_check: " << e.what() << "\n";
    return 2;
  }
}
