// One layered option parser for every deltaserve process. A process describes its options once,
// as a table of OptionSpecs bound to its options struct; from that table come
//   - command-line flags: `--name value`, `--name=value`, a switch (no value name) alone;
//   - environment variables: <prefix><NAME> (DELTASERVE_MAX_BATCH_TOKENS = max-batch-tokens);
//   - a config file: `--config FILE` (or <prefix>CONFIG): `name = value` lines, `#` comments
//     (common/option_file.h);
//   - the --help text and the start-up summary (every option, secrets masked).
// Precedence: flag > environment > file > default. Every error names the option and where the
// value came from ("--port", "environment DELTASERVE_PORT", "serve.conf:3").
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ds {

struct OptionSpec {
  std::string name;        // "max-batch-tokens"
  std::string value_name;  // "N" in the help; empty: a switch (`--name` alone sets "true")
  std::string help;        // may hold '\n' for more lines
  // Parses, validates and stores the value; false: a bad value (the parser reports it).
  std::function<bool(const std::string& value)> set;
  // The current value as the start-up summary (and the help's default) shows it.
  std::function<std::string()> show;
  // The default as --help shows it; empty: show() on the defaults, "-": none shown.
  std::string default_text = {};
  bool secret = false;  // the summary shows "***" unless it is the default; errors never show it
};

using OptionTable = std::vector<OptionSpec>;

enum class OptionSource { kFile, kEnvironment, kFlag };

// One process's parser settings.
struct OptionParser {
  std::string usage;       // first help line(s): "usage: deltaserve serve --model F.gguf [options]"
  std::string env_prefix;  // "DELTASERVE_": <prefix><NAME>, and <prefix>CONFIG for the file
  // Unknown <prefix>* variables: errors (true), or ignored (false: for a prefix that other
  // processes' variables share, as DELTASERVE_ with DELTASERVE_WORKER_).
  bool strict_environment = true;
  // How a bad setting reads: "WHERE: unknown option 'NAME'" / "WHERE: bad value 'V' for NAME"
  // (false), or the worker's "WHERE: bad option or value: NAME 'V'" for both (true).
  bool combined_errors = false;
  std::string footer;  // last help lines
};

struct ParsedOptions {
  bool ok = false;
  bool help = false;                           // --help / -h: `error` holds the help text
  std::string error;                           // the problem, followed by the help text
  std::map<std::string, OptionSource> set_by;  // options given, by where the winning value came from
};

// Applies defaults < config file < environment < flags through `table`'s setters. argv holds
// only options (no program name). `env` is the environment (environment_with_prefix()).
ParsedOptions parse_options(const OptionParser& parser, const OptionTable& table, int argc, char** argv,
                            const std::map<std::string, std::string>& env);

// The help text; the defaults shown are those of `table` as it is now (call it on the defaults).
std::string options_help(const OptionParser& parser, const OptionTable& table);

// "name_one=value name_two=value ..." over every option of `table`, in table order (dashes
// become underscores); a secret differing from `defaults`' value shows as "***".
std::string options_summary(const OptionTable& table, const OptionTable& defaults);

// The process environment's variables starting with `prefix`.
std::map<std::string, std::string> environment_with_prefix(const std::string& prefix);

// "max-batch-tokens" with prefix "DELTASERVE_" -> "DELTASERVE_MAX_BATCH_TOKENS".
std::string option_variable(const std::string& prefix, const std::string& name);

}  // namespace ds
