// Process-wide structured logging to stderr. The format is chosen once at start-up from the
// process's options (`--log-format text|json`), before any other thread logs:
//
//  * text: `[component] message` — the historical human-readable lines (tests and operators
//    grep them, e.g. `listening on http://HOST:PORT`), a `request_id=...` suffix when set.
//  * json: one object per line, `{"ts":"2026-01-02T03:04:05.678Z","level":"info",
//    "proc":"coordinator","rank":null,"component":"engine","msg":"...","request_id":null}`;
//    strings are escaped per RFC 8259 and ill-formed UTF-8 becomes U+FFFD, so every line
//    parses with any JSON reader.
//
// Each line is written with a single write(2), so lines of concurrent threads (and of the
// coordinator and its workers sharing one stderr) do not interleave.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>

namespace ds::log {

enum class Level { kDebug, kInfo, kWarn, kError };
enum class Format { kText, kJson };

struct Config {
  Format format = Format::kText;
  std::string proc = "coordinator";  // coordinator | worker
  int rank = -1;                     // worker rank; -1: none (JSON null)
  Level min_level = Level::kInfo;
};

// Sets the process's logging configuration. Call once, early, before other threads log.
void configure(const Config& config);
const Config& config();

// "text" / "json" -> Format; false for anything else.
bool parse_format(std::string_view name, Format* out);
const char* level_name(Level level);  // "debug", "info", "warn", "error"

// `s` as the inside of a JSON string literal (no quotes added).
std::string json_escape(std::string_view s);

// One complete line (with '\n') as `config` formats it; `unix_ms` is the wall-clock time.
// Pure, for tests; write() uses it with the current configuration and time.
std::string format_line(const Config& config, Level level, std::string_view component, std::string_view msg,
                        std::string_view request_id, int64_t unix_ms);

// Logs one line (dropped below the configured min_level). `component` tags the source
// ("deltaserve", "engine", "supervisor", "worker", ...); `request_id` is empty for lines
// that belong to no request.
void write(Level level, std::string_view component, std::string_view msg, std::string_view request_id = {});

// A message built with <<: `ds::log::info("engine", ds::log::Msg() << "rank " << r << " lost")`.
class Msg {
 public:
  template <typename T>
  Msg& operator<<(const T& value) {
    out_ << value;
    return *this;
  }
  std::string str() const { return out_.str(); }

 private:
  std::ostringstream out_;
};

inline void info(std::string_view component, std::string_view msg, std::string_view request_id = {}) {
  write(Level::kInfo, component, msg, request_id);
}
inline void warn(std::string_view component, std::string_view msg, std::string_view request_id = {}) {
  write(Level::kWarn, component, msg, request_id);
}
inline void error(std::string_view component, std::string_view msg, std::string_view request_id = {}) {
  write(Level::kError, component, msg, request_id);
}

inline void info(std::string_view component, const Msg& msg, std::string_view request_id = {}) {
  write(Level::kInfo, component, msg.str(), request_id);
}
inline void warn(std::string_view component, const Msg& msg, std::string_view request_id = {}) {
  write(Level::kWarn, component, msg.str(), request_id);
}
inline void error(std::string_view component, const Msg& msg, std::string_view request_id = {}) {
  write(Level::kError, component, msg.str(), request_id);
}

}  // namespace ds::log
