#include "tools/cli_args.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace ds::cli {

void Usage::fail(const std::string& error) const {
  std::fprintf(stderr, "%s: %s\nusage: %s %s\n", tool, error.c_str(), tool, synopsis);
  std::exit(2);
}

void Usage::help() const {
  std::printf("usage: %s %s\n", tool, synopsis);
  std::exit(0);
}

std::string ArgReader::value() {
  if (i_ + 1 >= argc_) usage_.fail(flag() + " needs a value");
  return argv_[++i_];
}

void ArgReader::unknown() const {
  if (flag() == "--help" || flag() == "-h") usage_.help();
  usage_.fail("unknown argument '" + flag() + "'");
}

uint64_t parse_uint(const Usage& usage, const std::string& flag, const std::string& v, uint64_t min, uint64_t max) {
  const bool digits = !v.empty() && v.find_first_not_of("0123456789") == std::string::npos;
  errno = 0;
  const unsigned long long n = digits ? std::strtoull(v.c_str(), nullptr, 10) : 0;
  if (!digits || errno == ERANGE || n < min || n > max) {
    const std::string range = max == std::numeric_limits<uint64_t>::max()
                                  ? ">= " + std::to_string(min)
                                  : "in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
    usage.fail(flag + " needs an integer " + range + ", got '" + v + "'");
  }
  return n;
}

std::vector<std::string> split_commas(const std::string& v) {
  std::vector<std::string> items;
  std::stringstream ss(v);
  std::string item;
  while (std::getline(ss, item, ',')) items.push_back(item);
  return items;
}

bool kv_cache_flag(const Usage& usage, const std::string& flag, ArgReader& args, KvTypeFlags* out) {
  std::optional<KvType>* side = flag.rfind("--", 0) == 0 ? kv_type_flag(out, flag.substr(2)) : nullptr;
  if (side == nullptr) return false;
  const std::string v = args.value();
  *side = parse_kv_type(v);
  if (!side->has_value()) usage.fail(kv_type_flag_error(flag, v));
  return true;
}

}  // namespace ds::cli
