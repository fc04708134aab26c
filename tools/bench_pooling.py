#!/usr/bin/env python3
"""Embedding / rerank throughput and latency of a running `deltaserve serve` (issue 29).

  bench_pooling.py embed  --port P [--tokens 512] [--concurrency 1,64] [--seconds 15]
  bench_pooling.py rerank --port P [--docs 100] [--doc-tokens 256] [--requests 20]

embed: C clients, each sending one input of exactly --tokens token ids (the server appends
<|endoftext|>) back to back for --seconds; prints tokens/s (usage.prompt_tokens / wall) and
the p50 request latency per concurrency. rerank: one query x --docs documents of about
--doc-tokens tokens (calibrated with /tokenize), sequential requests; prints p50 / p90 latency
and pairs/s. Standard library only (the device has no extra packages).
"""
import argparse
import json
import random
import statistics
import threading
import time
import urllib.request


def post(port, path, body, timeout=600):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)


def bench_embed(a):
    rng = random.Random(1)
    rows = []
    for c in [int(x) for x in a.concurrency.split(",")]:
        tokens, lat, stop = [0], [], time.time() + a.seconds
        lock = threading.Lock()

        def client(seed):
            r = random.Random(seed)
            while time.time() < stop:
                ids = [r.randrange(1000, 100000) for _ in range(a.tokens)]
                t0 = time.time()
                d = post(a.port, "/v1/embeddings", {"input": [ids]})
                with lock:
                    lat.append(time.time() - t0)
                    tokens[0] += d["usage"]["prompt_tokens"]

        post(a.port, "/v1/embeddings", {"input": [[rng.randrange(1000, 100000) for _ in range(a.tokens)]]})  # warm
        t0 = time.time()
        threads = [threading.Thread(target=client, args=(i,)) for i in range(c)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.time() - t0
        rows.append((c, tokens[0] / wall, statistics.median(lat) * 1e3, len(lat)))
    print("| concurrent | tok/s | p50 ms | requests |")
    print("|---|---|---|---|")
    for c, tps, p50, n in rows:
        print("| %d | %.0f | %.1f | %d |" % (c, tps, p50, n))


def doc_of(port, n_words, seed):
    r = random.Random(seed)
    return " ".join("w%d" % r.randrange(100, 999) for _ in range(n_words))


def bench_rerank(a):
    # Calibrate words per token on one document.
    probe = doc_of(a.port, 200, 0)
    n = post(a.port, "/tokenize", {"prompt": probe, "add_special_tokens": False})["count"]
    words = max(1, round(200 * a.doc_tokens / n))
    docs = [doc_of(a.port, words, i + 1) for i in range(a.docs)]
    counts = [post(a.port, "/tokenize", {"prompt": d, "add_special_tokens": False})["count"] for d in docs[:5]]
    body = {"query": "which document mentions w500 most often?", "documents": docs}
    post(a.port, "/v1/rerank", body)  # warm
    lat = []
    for i in range(a.requests):
        body["query"] = "which document mentions w%d most often?" % (500 + i)  # no two requests alike
        t0 = time.time()
        d = post(a.port, "/v1/rerank", body)
        lat.append(time.time() - t0)
    lat.sort()
    p50 = statistics.median(lat)
    print("| docs | doc tokens | prompt tokens/request | p50 ms | p90 ms | pairs/s |")
    print("|---|---|---|---|---|---|")
    print("| %d | %.0f | %d | %.1f | %.1f | %.0f |" % (a.docs, statistics.mean(counts), d["usage"]["prompt_tokens"],
                                                       p50 * 1e3, lat[int(0.9 * (len(lat) - 1))] * 1e3,
                                                       a.docs / p50))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["embed", "rerank"])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--tokens", type=int, default=512)
    p.add_argument("--concurrency", default="1,64")
    p.add_argument("--seconds", type=float, default=15)
    p.add_argument("--docs", type=int, default=100)
    p.add_argument("--doc-tokens", type=int, default=256)
    p.add_argument("--requests", type=int, default=20)
    a = p.parse_args()
    bench_embed(a) if a.mode == "embed" else bench_rerank(a)


if __name__ == "__main__":
    main()
