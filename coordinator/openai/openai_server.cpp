#include "coordinator/openai/openai_server.h"

#include "common/log.h"
#include "coordinator/http/http_server.h"
#include "coordinator/openai/service.h"

namespace ds {

int run_http_server(const ServerOptions& options, Engine& engine, const Tokenizer& tokenizer,
                    const ChatTemplate& chat_template, ServerMetrics* metrics,
                    const std::function<void(uint16_t port)>& on_listening) {
  ServerMetrics own_metrics;
  ServerMetrics& m = metrics != nullptr ? *metrics : own_metrics;
  openai::OpenAIService service(options, engine, tokenizer, chat_template, m);
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
