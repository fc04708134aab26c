// Command-line parsing of `deltaserve serve` (see serve_options.h). Flags take the forms
// `--name value` and `--name=value`; --external-workers takes no value.
#include "coordinator/engine/serve_options.h"

#include <charconv>
#include <functional>
#include <map>
#include <sstream>

namespace ds {
namespace {

constexpr const char* kUsage =
    "usage: deltaserve serve --model F.gguf [--workers N] [--backend cpu|cuda] [--external-workers]\n"
    "                        [--layer-split a,b,...] [--threads T] [--control-endpoint EP]\n"
    "  --model             GGUF model file\n"
    "  --workers           pipeline stages, one worker process each (default 1)\n"
    "  --backend           cpu (default) or cuda\n"
    "  --external-workers  do not start workers; wait for them to connect (systemd, by hand)\n"
    "  --layer-split       layers per stage, e.g. 3,3,2 (default: balanced by weight bytes)\n"
    "  --threads           compute threads per worker (default 1)\n"
    "  --control-endpoint  ipc://PATH or tcp://HOST:PORT (default: a private ipc:// directory)\n";

template <typename T>
bool parse_number(const std::string& s, T* out) {
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

bool parse_counts(const std::string& s, std::vector<uint32_t>* out) {
  std::stringstream in(s);
  std::string item;
  out->clear();
  while (std::getline(in, item, ',')) {
    uint32_t v = 0;
    if (!parse_number(item, &v) || v == 0) return false;
    out->push_back(v);
  }
  return !out->empty();
}

using Setter = std::function<bool(const std::string&)>;

std::map<std::string, Setter> serve_setters(EngineOptions* o) {
  return {
      {"model", [o](const std::string& v) { o->model_path = v; return !v.empty(); }},
      {"workers", [o](const std::string& v) { return parse_number(v, &o->n_workers) && o->n_workers >= 1; }},
      {"backend", [o](const std::string& v) { o->backend = v; return v == "cpu" || v == "cuda"; }},
      {"layer-split", [o](const std::string& v) { return parse_counts(v, &o->layer_split); }},
      {"threads", [o](const std::string& v) { return parse_number(v, &o->threads_per_worker) && o->threads_per_worker >= 1; }},
      {"control-endpoint", [o](const std::string& v) { o->control_endpoint = v; return !v.empty(); }},
  };
}

}  // namespace

bool parse_serve_options(int argc, char** argv, ServeOptions* out, std::string* error, bool* help) {
  const std::map<std::string, Setter> setters = serve_setters(&out->engine);
  *help = false;
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      *help = true;
      *error = kUsage;
      return false;
    }
    if (arg == "--external-workers") {
      out->engine.external_workers = true;
      continue;
    }
    std::string value;
    const size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    }
    const auto it = arg.rfind("--", 0) == 0 ? setters.find(arg.substr(2)) : setters.end();
    if (it == setters.end() || !it->second(value)) {
      *error = "bad flag or value: " + arg + " '" + value + "'\n" + kUsage;
      return false;
    }
  }
  if (out->engine.model_path.empty()) {
    *error = std::string("--model is required\n") + kUsage;
    return false;
  }
  if (!out->engine.layer_split.empty() && out->engine.layer_split.size() != out->engine.n_workers) {
    *error = "--layer-split must name one layer count per worker";
    return false;
  }
  if (out->engine.external_workers && out->engine.control_endpoint.empty()) {
    *error = "--external-workers needs --control-endpoint (the address the workers connect to)";
    return false;
  }
  return true;
}

std::string describe(const ServeOptions& o) {
  std::ostringstream s;
  const EngineOptions& e = o.engine;
  s << "model=" << e.model_path << " workers=" << e.n_workers << " backend=" << e.backend
    << " external_workers=" << (e.external_workers ? "yes" : "no") << " threads=" << e.threads_per_worker
    << " control=" << (e.control_endpoint.empty() ? "(private ipc)" : e.control_endpoint);
  return s.str();
}

}  // namespace ds
