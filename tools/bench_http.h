// The serving benchmark behind deltaserve-bench-http and `deltaserve-bench --http URL`: streaming
// /v1/completions clients against a running `deltaserve serve`, one table row per concurrency
// level (requests/s, output tokens/s, TTFT and inter-token p50 / p99). See bench_http.cpp.
#pragma once

namespace ds::bench_http {

// Parses the flags in argv[1..argc) (--port P [--host H] | --url http://H:P, --concurrency,
// --requests, --prompt-tokens, --max-tokens, --vocab, --sampling, --api-key, -o table|json), runs every level, returns
// the exit status. Usage errors print to stderr and exit with 2.
int run(int argc, char** argv);

}  // namespace ds::bench_http
