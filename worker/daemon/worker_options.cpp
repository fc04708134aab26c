// Command-line parsing of the worker daemon (see worker_options.h).
#include "worker/daemon/worker_options.h"

#include <unistd.h>

#include <boost/program_options.hpp>  // options_description, parse_command_line
#include <sstream>

namespace ds {
namespace po = boost::program_options;

namespace {

po::options_description worker_flags(WorkerOptions* o) {
  po::options_description desc("deltaserve-worker options");
  desc.add_options()
      ("help,h", "show this help")
      ("coordinator", po::value(&o->coordinator)->required(), "coordinator control endpoint (ipc://PATH or tcp://HOST:PORT)")
      ("rank", po::value(&o->rank)->required(), "pipeline stage index, 0-based")
      ("backend", po::value(&o->backend)->default_value("cpu"), "cpu | cuda")
      ("device", po::value(&o->device)->default_value(-1), "GPU index for the cuda backend")
      ("threads", po::value(&o->threads)->default_value(1), "compute threads")
      ("heartbeat-ms", po::value(&o->heartbeat_ms)->default_value(200), "heartbeat period in ms")
      ("hostname", po::value(&o->hostname), "host name other stages reach this worker at (tcp)");
  return desc;
}

std::string local_hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

}  // namespace

bool parse_worker_options(int argc, char** argv, WorkerOptions* out, std::string* error, bool* help) {
  po::options_description desc = worker_flags(out);
  std::ostringstream usage;
  usage << desc;
  *help = false;
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    if (vm.count("help")) {
      *help = true;
      *error = usage.str();
      return false;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    *error = std::string(e.what()) + "\n" + usage.str();
    return false;
  }
  if (out->backend != "cpu" && out->backend != "cuda") {
    *error = "--backend must be cpu or cuda, got '" + out->backend + "'";
    return false;
  }
  if (out->threads < 1 || out->heartbeat_ms < 10) {
    *error = "--threads must be >= 1 and --heartbeat-ms >= 10";
    return false;
  }
  if (out->hostname.empty()) out->hostname = local_hostname();
  return true;
}

std::string describe(const WorkerOptions& o) {
  std::ostringstream s;
  s << "rank=" << o.rank << " coordinator=" << o.coordinator << " backend=" << o.backend << " device=" << o.device
    << " threads=" << o.threads << " heartbeat_ms=" << o.heartbeat_ms << " host=" << o.hostname;
  return s.str();
}

}  // namespace ds
