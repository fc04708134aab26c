// One call to serve the OpenAI API over HTTP: what `deltaserve serve` runs once the engine,
// tokenizer and chat template are up.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "coordinator/chat_template/chat_template.h"
#include "coordinator/http/metrics.h"
#include "coordinator/http/server_options.h"
#include "coordinator/http/upstream_proxy.h"
#include "coordinator/serving/generation.h"
#include "coordinator/tokenizer/tokenizer.h"

namespace ds {

// What one served model brings: its options (served name, model kind), engine, tokenizer and
// chat template. Every reference outlives the server.
struct ServedModel {
  const ServerOptions* options = nullptr;
  Engine* engine = nullptr;
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat_template = nullptr;
};

// An upstream server that answers one kind of route ("embed" or "rerank") for this one.
struct UpstreamRoute {
  std::string kind;
  UpstreamOptions options;
};

// The models a server answers for beside its main one (issue 29): hosted by this process, or
// reached over HTTP. Each kind at most once, and never the main model's kind.
struct PeerSet {
  std::vector<ServedModel> hosted;
  std::vector<UpstreamRoute> upstreams;
};

// Listens on options.host:port and serves until SIGTERM or SIGINT, then stops gracefully
// (stop accepting, let in-flight requests finish for options.shutdown_grace, cancel the
// rest). Returns the process exit code: 0 after a graceful stop. Throws std::runtime_error
// when the address cannot be bound. `metrics` may be null (a private registry is used);
// `on_listening` gets the bound port once signals are armed.
int run_http_server(const ServerOptions& options, Engine& engine, const Tokenizer& tokenizer,
                    const ChatTemplate& chat_template, ServerMetrics* metrics = nullptr,
                    const std::function<void(uint16_t port)>& on_listening = {}, const PeerSet& peers = {});

}  // namespace ds
