// Structured logging (see log.h).
#include "common/log.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <ctime>

#include "common/utf8.h"

namespace ds::log {
namespace {

Config& mutable_config() {
  static Config c;
  return c;
}

// 2026-01-02T03:04:05.678Z
std::string iso8601_utc(int64_t unix_ms) {
  const time_t secs = static_cast<time_t>(unix_ms / 1000);
  const int ms = static_cast<int>(unix_ms % 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
  return buf;
}

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  out += json_escape(s);
  out += '"';
}

}  // namespace

void configure(const Config& config) {
  mutable_config() = config;
}
const Config& config() {
  return mutable_config();
}

bool parse_format(std::string_view name, Format* out) {
  if (name == "text") {
    *out = Format::kText;
  } else if (name == "json") {
    *out = Format::kJson;
  } else {
    return false;
  }
  return true;
}

const char* level_name(Level level) {
  switch (level) {
    case Level::kDebug:
      return "debug";
    case Level::kInfo:
      return "info";
    case Level::kWarn:
      return "warn";
    case Level::kError:
      return "error";
  }
  return "info";
}

std::string json_escape(std::string_view s) {
  const std::string valid = utf8::sanitize(s);
  std::string out;
  out.reserve(valid.size() + 8);
  for (const char ch : valid) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  return out;
}

std::string format_line(const Config& config, Level level, std::string_view component, std::string_view msg,
                        std::string_view request_id, int64_t unix_ms) {
  std::string line;
  if (config.format == Format::kText) {
    line += '[';
    line += component;
    if (component == "worker" && config.rank >= 0) line += " " + std::to_string(config.rank);
    line += "] ";
    line += msg;
    if (!request_id.empty()) {
      line += " request_id=";
      line += request_id;
    }
  } else {
    line += "{\"ts\":\"" + iso8601_utc(unix_ms) + "\",\"level\":\"" + level_name(level) + "\",\"proc\":";
    append_json_string(line, config.proc);
    line += ",\"rank\":";
    line += config.rank >= 0 ? std::to_string(config.rank) : std::string("null");
    line += ",\"component\":";
    append_json_string(line, component);
    line += ",\"msg\":";
    append_json_string(line, msg);
    line += ",\"request_id\":";
    if (request_id.empty()) {
      line += "null";
    } else {
      append_json_string(line, request_id);
    }
    line += '}';
  }
  line += '\n';
  return line;
}

void write(Level level, std::string_view component, std::string_view msg, std::string_view request_id) {
  const Config& c = config();
  if (level < c.min_level) return;
  const int64_t now_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  const std::string line = format_line(c, level, component, msg, request_id, now_ms);
  // One write per line (retried on partial writes) keeps concurrent lines whole.
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(STDERR_FILENO, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

}  // namespace ds::log
