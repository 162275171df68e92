// cli/run.cpp -- the sigprop command-line tool (cli/run.hpp), compiled once
// into sigprop_cli_core and linked by the tool and the tests that call it.

#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "run.hpp"

#include "args.hpp"
#include "component_command.hpp"
#include "model_command.hpp"
#include "sweep_command.hpp"
#include "sigprop/core/errors.hpp"

namespace sigprop::cli {

void usage(std::ostream& out) {
  out << "usage: sigprop <command> [options]\n"
         "\n"
         "Closed-form signal propagation through transformers at initialization.\n"
         "\n"
         "commands:\n"
         "  component NAME   forward and backward moments of one component\n"
         "  table            per-layer variance and correlation table of a whole model\n"
         "  init             per-layer weight standard deviations of an initialization\n"
         "  sweep            summary figures for every configuration of a design grid\n"
         "\n"
         "Run 'sigprop <command> --help' for the options of a command.\n";
}

namespace detail {

// Library messages name parameters as in C++ (d_in); the user typed flags
// (--d-in). Rewrite "name = " to "--flag = " for the flags of the command.
// The commands' own checks of a flag run the library's require_* with the
// function "sigprop", already printed by the "sigprop: error: " prefix.
inline std::string with_flag_names(std::string message) {
  if (message.rfind("sigprop: --", 0) == 0) return message.substr(9);
  static const std::vector<std::pair<std::string, std::string>> names = {
      {"seq_len", "seq"}, {"weight_var", "weight-var"}, {"d_in", "d-in"}, {"d_out", "d-out"},
      {"d_k", "d-k"}, {"q_var", "q-var"}, {"k_var", "k-var"}, {"v_var", "v-var"},
      {"vocab", "vocab"}, {"p", "p"}, {"d", "d"}, {"n", "n"}, {"corr_dim", "corr-dim"},
      {"var * (1 - corr_dim)", "var * (1 - --corr-dim)"}};
  for (const auto& [param, flag] : names) {
    const std::string from = ": " + param + " = ";
    const auto at = message.find(from);
    if (at != std::string::npos) {
      message.replace(at, from.size(), ": --" + flag + " = ");
      break;
    }
  }
  return message;
}

// The error is one line on stderr even when it quotes an argument holding
// a newline or another control character: those are printed escaped (\n, \xHH).
inline std::string one_line(const std::string& message) {
  std::string line;
  for (const char c : message) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      line += "\\n";
    } else if (u < 0x20 || u == 0x7f) {
      const char* hex = "0123456789abcdef";
      line += {'\\', 'x', hex[u >> 4], hex[u & 15]};
    } else {
      line += c;
    }
  }
  return line;
}

}  // namespace detail

std::vector<std::string> component_names() {
  std::vector<std::string> names;
  for (const auto& e : detail::component_table()) names.emplace_back(e.name);
  return names;
}

std::vector<ComponentInfo> components() {
  std::vector<ComponentInfo> all;
  for (const auto& e : detail::component_table())
    all.push_back({e.name, std::vector<std::string>(e.flags.begin(), e.flags.end()), e.help});
  return all;
}

ComponentResult evaluate_component(const std::string& name, const std::vector<std::string>& parameters,
                                   const Moments<double>& in, const GradMoments<double>& grad) {
  const detail::ComponentEntry* entry = detail::find_component(name);
  if (!entry) throw usage_error("component: unknown NAME '" + name + "'");
  const Args args(parameters, entry->flags);
  if (!args.positional().empty())
    throw usage_error("component: unexpected argument '" + args.positional()[0] + "'");
  return entry->run(args, in, grad);
}

std::vector<SweepRow> sweep_table(const std::vector<std::string>& words) {
  return sweep_rows(parse_sweep(Args(words, sweep_flags())));
}

/// The whole tool. `args` excludes the program name.
int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const auto wants_help = [](const std::vector<std::string>& w) {
    for (const auto& s : w)
      if (s == "--help" || s == "-h") return true;
    return false;
  };
  std::ostringstream buffer, warnings;  // nothing is printed unless the command succeeds
  try {
    // No command is bad usage: status 2, one line on stderr, nothing on stdout.
    if (args.empty()) throw usage_error("missing command (see sigprop --help)");
    if (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
      usage(out);
      return 0;
    }
    if (args[0] == "--version") {
      out << "sigprop " << version << "\n";
      return 0;
    }
    const std::vector<std::string> rest(args.begin() + 1, args.end());
    int status = 0;
    if (args[0] == "component") {
      if (wants_help(rest)) {
        component_usage(out);
        return 0;
      }
      status = component_command(rest, buffer, warnings);
    } else if (args[0] == "table" || args[0] == "init") {
      if (wants_help(rest)) {
        (args[0] == "table" ? table_usage : init_usage)(out);
        return 0;
      }
      status = args[0] == "table" ? table_command(rest, buffer, warnings) : init_command(rest, buffer, warnings);
    } else if (args[0] == "sweep") {
      if (wants_help(rest)) {
        sweep_usage(out);
        return 0;
      }
      status = sweep_command(rest, buffer, warnings);
    } else {
      throw usage_error("unknown command '" + args[0] + "' (see sigprop --help)");
    }
    err << warnings.str();
    out << buffer.str();
    return status;
  } catch (const usage_error& e) {
    err << "sigprop: error: " << detail::one_line(e.what()) << "\n";
    return 2;
  } catch (const sigprop::domain_error& e) {
    err << "sigprop: error: " << detail::one_line(detail::with_flag_names(e.what())) << "\n";
    return 2;
  } catch (const sigprop::overflow_error& e) {
    err << "sigprop: error: " << detail::one_line(e.what()) << "\n";
    return 2;
  }
}

}  // namespace sigprop::cli
