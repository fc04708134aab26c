// One embeddings or rerank request is many engine requests (one per input or document, each a
// prompt whose last position's pooled output is the answer): this collects their outputs and
// answers the client once, when all have come back. The first input that fails fails the whole
// reply (one error, naming the input) and cancels the others; nothing is ever answered twice.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "coordinator/http/http_types.h"
#include "coordinator/serving/generation.h"

namespace ds::openai {

class PooledFanIn : public std::enable_shared_from_this<PooledFanIn> {
 public:
  // `answer` turns the outputs (request order) into the reply; `cancel_others` runs once, on
  // the first failure (off the engine's thread is not guaranteed: it must only post cancels).
  using Answer = std::function<HttpResponse(std::vector<std::vector<float>>& outputs)>;
  PooledFanIn(std::shared_ptr<ResponseChannel> out, size_t n_inputs, Answer answer,
              std::function<void()> cancel_others);

  // The sink of input i's engine request.
  std::shared_ptr<GenerationSink> sink(size_t index);
  // The reply failed before every input was submitted (e.g. the engine refused one): answers the
  // error now and makes the sinks of the others do nothing.
  void fail(HttpResponse response);
  bool failed() const;

 private:
  class InputSink;
  void pooled(size_t index, const std::vector<float>& values);
  void finished(size_t index, FinishReason reason, const std::string& error);

  std::shared_ptr<ResponseChannel> out_;
  Answer answer_;
  std::function<void()> cancel_others_;
  mutable std::mutex mu_;
  std::vector<std::vector<float>> outputs_;
  std::vector<bool> done_;
  size_t n_done_ = 0;
  bool failed_ = false;
};

}  // namespace ds::openai
