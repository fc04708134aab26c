// Endpoint naming (see endpoints.h).
#include "common/ipc/endpoints.h"

#include <unistd.h>

#include <filesystem>
#include <stdexcept>
#include <system_error>

namespace ds::ipc {
namespace {

constexpr const char* kIpc = "ipc://";
constexpr const char* kTcp = "tcp://";

bool starts_with(const std::string& s, const char* prefix) {
  return s.rfind(prefix, 0) == 0;
}

}  // namespace

DataEndpoints data_endpoints(const std::string& control_endpoint, uint32_t rank, const std::string& worker_host) {
  if (starts_with(control_endpoint, kIpc)) {
    const std::filesystem::path path(control_endpoint.substr(6));
    const std::string ep = kIpc + (path.parent_path() / ("data-" + std::to_string(rank))).string();
    return {ep, ep};
  }
  if (starts_with(control_endpoint, kTcp)) {
    const size_t colon = control_endpoint.rfind(':');
    int port = 0;
    try {
      port = std::stoi(control_endpoint.substr(colon + 1));
    } catch (const std::exception&) {
      throw std::invalid_argument("tcp endpoint without a port: " + control_endpoint);
    }
    const std::string p = std::to_string(port + 1 + static_cast<int>(rank));
    return {std::string(kTcp) + "*:" + p, std::string(kTcp) + worker_host + ":" + p};
  }
  throw std::invalid_argument("unsupported endpoint scheme (use ipc:// or tcp://): " + control_endpoint);
}

std::string make_ipc_control_endpoint() {
  std::string templ = (std::filesystem::temp_directory_path() / "deltaserve-XXXXXX").string();
  if (mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + templ);
  return kIpc + templ + "/control";
}

void remove_ipc_endpoint_dir(const std::string& control_endpoint) {
  if (!starts_with(control_endpoint, kIpc)) return;
  const std::filesystem::path dir = std::filesystem::path(control_endpoint.substr(6)).parent_path();
  if (dir.filename().string().rfind("deltaserve-", 0) != 0) return;  // only what we created
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace ds::ipc
