// Endpoint naming: the coordinator derives every data endpoint from its control endpoint, so
// a restarted worker binds the same address and the previous stage reconnects by itself.
#pragma once

#include <cstdint>
#include <string>

namespace ds::ipc {

struct DataEndpoints {
  std::string bind;     // where the stage binds its data (PULL) socket
  std::string connect;  // what the previous stage connects to
};

// ipc://DIR/control -> ipc://DIR/data-R (bind and connect alike).
// tcp://HOST:PORT   -> bind tcp://*:PORT+1+R, connect tcp://WORKER_HOST:PORT+1+R.
// Throws std::invalid_argument for other schemes.
DataEndpoints data_endpoints(const std::string& control_endpoint, uint32_t rank, const std::string& worker_host);

// A fresh private directory for ipc sockets, returned as "ipc://DIR/control".
std::string make_ipc_control_endpoint();

// Removes the directory created by make_ipc_control_endpoint (no-op for other endpoints).
void remove_ipc_endpoint_dir(const std::string& control_endpoint);

}  // namespace ds::ipc
