#include "coordinator/openai/openai_server.h"

#include <memory>

#include "common/log.h"
#include "coordinator/http/http_server.h"
#include "coordinator/openai/service.h"

namespace ds {

int run_http_server(const ServerOptions& options, Engine& engine, const Tokenizer& tokenizer,
                    const ChatTemplate& chat_template, ServerMetrics* metrics,
                    const std::function<void(uint16_t port)>& on_listening, const PeerSet& peers) {
  ServerMetrics own_metrics;
  ServerMetrics& m = metrics != nullptr ? *metrics : own_metrics;
  // Peers are declared before the main service: it refers to them until it is gone.
  std::vector<std::unique_ptr<openai::OpenAIService>> hosted;
  std::vector<std::unique_ptr<UpstreamProxy>> proxies;
  for (const ServedModel& p : peers.hosted) {
    hosted.push_back(std::make_unique<openai::OpenAIService>(*p.options, *p.engine, *p.tokenizer, *p.chat_template, m));
  }
  for (const UpstreamRoute& u : peers.upstreams) proxies.push_back(std::make_unique<UpstreamProxy>(u.options));
  openai::OpenAIService service(options, engine, tokenizer, chat_template, m);
  for (size_t i = 0; i < hosted.size(); ++i) {
    openai::OpenAIService* peer = hosted[i].get();
    service.add_peer(
        {peers.hosted[i].options->model_kind,
         [peer](HttpRequest& r, std::shared_ptr<ResponseChannel> c) { return peer->handle_as_peer(r, std::move(c)); },
         peer});
    log::info("http", log::Msg() << "also serving the " << peers.hosted[i].options->model_kind << " model '"
                                 << peers.hosted[i].options->served_model_name << "'");
  }
  for (size_t i = 0; i < proxies.size(); ++i) {
    UpstreamProxy* proxy = proxies[i].get();
    service.add_peer(
        {peers.upstreams[i].kind,
         [proxy](HttpRequest& r, std::shared_ptr<ResponseChannel> c) { return proxy->forward(r, std::move(c)); },
         nullptr});
    log::info("http",
              log::Msg() << "forwarding the " << peers.upstreams[i].kind << " routes to " << proxy->url().origin());
  }
  HttpServer server(options, service.handler(), &m);
  server.run_until_signal([&] {
    log::info("http", log::Msg() << "serving '" << options.served_model_name << "' on http://" << options.host << ":"
                                 << server.port() << (options.api_key.empty() ? "" : " (API key required)"));
    if (on_listening) on_listening(server.port());
  });
  log::info("http", "HTTP server stopped");
  return 0;
}

}  // namespace ds
