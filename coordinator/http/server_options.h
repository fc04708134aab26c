// Every knob of the HTTP front door in one struct; `deltaserve serve` fills it from flags.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ds {

// Vision input (issue 31): what the chat routes need to turn image parts into image tokens.
struct VisionOptions {
  bool enabled = false;         // --mmproj given: the workers embed images
  uint32_t patch_size = 16;     // the mmproj's clip.vision.patch_size
  uint32_t merge = 2;           // clip.vision.spatial_merge_size: merge x merge patches per token
  int32_t image_token_id = -1;  // the model's <|image_pad|>
  // Resize bounds in LLM tokens (one token = (patch * merge)^2 pixels): HF's preprocessor's
  // 65536 pixels = 64 tokens below; above, llama.cpp's cap of 4096 (HF allows 16384, whose
  // attention over 65536 patches is too costly for a default).
  uint32_t image_min_tokens = 64;
  uint32_t image_max_tokens = 4096;
  uint32_t max_images_per_request = 8;
  std::string media_root;  // --media-path: the directory file:// URLs may read; empty = off
  // --allowed-media-domains: the hosts http(s):// image URLs may name (coordinator/media/
  // remote_url.h: host, *.domain, IP literal); empty = remote URLs refused.
  std::vector<std::string> allowed_media_domains{};
  // --media-fetch-timeout: one remote image's whole download.
  std::chrono::milliseconds media_fetch_timeout{10'000};
};

struct ServerOptions {
  std::string host = "127.0.0.1";  // loopback unless the operator opts in to exposure
  uint16_t port = 8000;            // 0: pick an ephemeral port (tests); see HttpServer::port()
  std::string api_key;             // empty: no authentication
  size_t max_body_bytes = size_t{32} << 20;
  size_t max_header_bytes = size_t{64} << 10;
  // Waiting for (the header of) the next request on a keep-alive connection.
  std::chrono::milliseconds idle_timeout{60'000};
  // Reading a request body once its header has arrived.
  std::chrono::milliseconds read_timeout{30'000};
  // One write to a client that stopped reading (SSE streams included).
  std::chrono::milliseconds write_timeout{60'000};
  // On SIGTERM/SIGINT: how long in-flight requests may still run before they are cancelled.
  std::chrono::milliseconds shutdown_grace{30'000};
  unsigned io_threads = 2;
  // Threads that parse, render and tokenize generation requests (and /tokenize): that work is
  // proportional to the body, so it never runs on the I/O threads that answer /health.
  uint32_t request_threads = 4;
  // Admission control: generation requests are answered 429 (Retry-After: 1) while this many
  // requests already wait in the engine's queue. 0: no limit.
  uint32_t max_queue = 256;
  // The largest `n` (choices per request) accepted.
  uint32_t max_n = 16;
  // The model id clients send and see in /v1/models; the GGUF file name is accepted too.
  std::string served_model_name = "deltaserve";
  std::string model_file_name;
  // What the served model answers: "chat" (the generation routes), "embed" (/v1/embeddings) or
  // "rerank" (/v1/rerank, /rerank, /v2/rerank, /v1/score); the other model kinds' routes say
  // which kind this server serves.
  std::string model_kind = "chat";
  uint32_t embedding_size = 0;  // "embed": the pooled vector's size (the model's hidden size)
  VisionOptions vision;
};

}  // namespace ds
