// deltaserve-bench-http: see tools/bench_http.h (also reachable as `deltaserve-bench --http URL`).
#include "tools/bench_http.h"

int main(int argc, char** argv) {
  return ds::bench_http::run(argc, argv);
}
