// The layered option parser (see options.h).
#include "common/options.h"

#include <cctype>
#include <sstream>
#include <utility>

#include "common/option_file.h"

extern char** environ;

namespace ds {
namespace {

constexpr size_t kHelpColumn = 27;  // where the help text of an option starts

const OptionSpec* find_option(const OptionTable& table, const std::string& name) {
  for (const OptionSpec& o : table) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

struct Flag {
  std::string name, value;
};

// Applies one setting; on failure fills `error` with the problem, naming the option and `where`.
class Applier {
 public:
  Applier(const OptionParser& parser, const OptionTable& table, const std::string& help, ParsedOptions* out)
      : parser_(parser), table_(table), help_(help), out_(out) {}

  bool apply(const std::string& name, const std::string& value, const std::string& where, OptionSource source) {
    const OptionSpec* o = find_option(table_, name);
    if (o != nullptr && o->set(value)) {
      out_->set_by[name] = source;
      return true;
    }
    const std::string shown = o != nullptr && o->secret ? std::string("***") : value;
    // A choice's values (value name "a|b|c") are named right in the error line.
    const std::string valid =
        o != nullptr && o->value_name.find('|') != std::string::npos ? " (valid: " + o->value_name + ")" : "";
    if (parser_.combined_errors) {
      out_->error = where + ": bad option or value: " + name + " '" + shown + "'" + valid + "\n" + help_;
    } else if (o == nullptr) {
      out_->error = where + ": unknown option '" + name + "'\n" + help_;
    } else {
      out_->error = where + ": bad value '" + shown + "' for " + name + valid + "\n" + help_;
    }
    return false;
  }

 private:
  const OptionParser& parser_;
  const OptionTable& table_;
  const std::string& help_;
  ParsedOptions* out_;
};

// Splits argv into flags; a flag without `=` takes the next argument unless it is a switch.
// `--config` is taken out into `config`.
bool split_flags(const OptionTable& table, int argc, char** argv, const std::string& help, std::vector<Flag>* flags,
                 std::string* config, ParsedOptions* out) {
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      out->help = true;
      out->error = help;
      return false;
    }
    if (arg.rfind("--", 0) != 0 || arg.size() == 2) {
      out->error = "unexpected argument '" + arg + "'\n" + help;
      return false;
    }
    arg = arg.substr(2);
    Flag f;
    const size_t eq = arg.find('=');
    const OptionSpec* o = find_option(table, arg);
    if (eq != std::string::npos) {
      f = {arg.substr(0, eq), arg.substr(eq + 1)};
    } else if (o != nullptr && o->value_name.empty()) {
      f = {arg, "true"};
    } else if (i + 1 < argc) {
      f = {arg, argv[++i]};
    } else {
      out->error = "--" + arg + " needs a value\n" + help;
      return false;
    }
    if (f.name == "config") {
      *config = f.value;
    } else {
      flags->push_back(std::move(f));
    }
  }
  return true;
}

// `text` as lines: the first after the flag column, the others indented to it.
void append_help_lines(std::ostringstream& s, const std::string& left, const std::string& text) {
  s << left;
  if (left.size() + 1 < kHelpColumn) {
    s << std::string(kHelpColumn - left.size(), ' ');
  } else {
    s << "\n" << std::string(kHelpColumn, ' ');
  }
  for (const char c : text) {
    s << c;
    if (c == '\n') s << std::string(kHelpColumn, ' ');
  }
  s << "\n";
}

}  // namespace

std::string option_variable(const std::string& prefix, const std::string& name) {
  std::string var = prefix;
  for (const char c : name) var += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return var;
}

std::string options_help(const OptionParser& parser, const OptionTable& table) {
  std::ostringstream s;
  s << parser.usage << "\n";
  append_help_lines(
      s, "  --config FILE",
      "read `name = value` lines, `#` comments (also " + option_variable(parser.env_prefix, "config") + ")");
  for (const OptionSpec& o : table) {
    const std::string left = "  --" + o.name + (o.value_name.empty() ? "" : " " + o.value_name);
    const std::string shown = o.default_text.empty() ? o.show() : o.default_text;
    std::string text = o.help;
    if (!shown.empty() && shown != "-") text += " (default " + shown + ")";
    append_help_lines(s, left, text);
  }
  const std::string example = table.empty() ? std::string("NAME") : table.front().name;
  s << "Every option can also be set as " << parser.env_prefix << "<NAME> (e.g. "
    << option_variable(parser.env_prefix, example) << ") or in the config file;\n"
    << "precedence: flag > environment > config file > default.\n"
    << parser.footer;
  return s.str();
}

ParsedOptions parse_options(const OptionParser& parser, const OptionTable& table, int argc, char** argv,
                            const std::map<std::string, std::string>& env) {
  ParsedOptions out;
  const std::string help = options_help(parser, table);  // before any setter runs: the defaults
  std::vector<Flag> flags;
  std::string config;
  if (!split_flags(table, argc, argv, help, &flags, &config, &out)) return out;
  const std::string config_var = option_variable(parser.env_prefix, "config");
  if (config.empty() && env.count(config_var)) config = env.at(config_var);
  Applier applier(parser, table, help, &out);
  if (!config.empty()) {
    std::string file_error;
    const bool read = read_option_file(
        config,
        [&](const std::string& name, const std::string& value, const std::string& where) {
          return applier.apply(name, value, where, OptionSource::kFile);
        },
        &file_error);
    if (!read) {
      if (!file_error.empty()) out.error = file_error;  // unreadable; a bad line filled out.error
      return out;
    }
  }
  for (const auto& [var, value] : env) {
    if (var == config_var || var.rfind(parser.env_prefix, 0) != 0) continue;
    const std::string name = option_name_of_variable(var, parser.env_prefix);
    if (find_option(table, name) == nullptr && !parser.strict_environment) continue;
    if (!applier.apply(name, value, "environment " + var, OptionSource::kEnvironment)) return out;
  }
  for (const Flag& f : flags) {
    if (!applier.apply(f.name, f.value, "--" + f.name, OptionSource::kFlag)) return out;
  }
  out.ok = true;
  return out;
}

std::string options_summary(const OptionTable& table, const OptionTable& defaults) {
  std::ostringstream s;
  for (size_t i = 0; i < table.size(); ++i) {
    std::string key = table[i].name;
    for (char& c : key) c = c == '-' ? '_' : c;
    std::string value = table[i].show();
    if (table[i].secret && (i >= defaults.size() || value != defaults[i].show())) value = "***";
    s << (i ? " " : "") << key << "=" << value;
  }
  return s.str();
}

std::map<std::string, std::string> environment_with_prefix(const std::string& prefix) {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (kv.rfind(prefix, 0) == 0 && eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

}  // namespace ds
