// `name = value` option files (`#` comments, blank lines ignored) for the layered option parser
// (common/options.h), so every process reads config files the same way.
#pragma once

#include <functional>
#include <string>

namespace ds {

// Calls apply(name, value, where) for every setting in `path` (`where` = "path:line" for
// messages); stops at the first false. Returns false with `error` set when the file cannot
// be read (apply sets `error` itself for bad settings).
bool read_option_file(
    const std::string& path,
    const std::function<bool(const std::string& name, const std::string& value, const std::string& where)>& apply,
    std::string* error);

// " a b \t" -> "a b"
std::string trim_spaces(const std::string& s);

// DELTASERVE_MAX_BATCH_TOKENS with prefix "DELTASERVE_" -> "max-batch-tokens".
std::string option_name_of_variable(const std::string& var, const std::string& prefix);

}  // namespace ds
