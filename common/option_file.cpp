#include "common/option_file.h"

#include <cctype>
#include <fstream>

namespace ds {

std::string trim_spaces(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

std::string option_name_of_variable(const std::string& var, const std::string& prefix) {
  std::string name = var.substr(prefix.size());
  for (char& c : name) c = c == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

bool read_option_file(const std::string& path,
                      const std::function<bool(const std::string&, const std::string&, const std::string&)>& apply,
                      std::string* error) {
  std::ifstream in(path);
  if (!in) {
    *error = "cannot read config file '" + path + "'";
    return false;
  }
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    line = trim_spaces(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    const size_t eq = line.find('=');
    const std::string name = trim_spaces(line.substr(0, eq));
    const std::string value = eq == std::string::npos ? "" : trim_spaces(line.substr(eq + 1));
    if (!apply(name, value, path + ":" + std::to_string(n))) return false;
  }
  return true;
}

}  // namespace ds
