#!/usr/bin/env python3
# Front-door probe: N concurrent one-word prompts of SIZE MiB (completion or chat form) against a
# running server; prints how fast each is refused after its upload, /health latency while they
# are in flight, and one normal request's latency.  Usage: front_door_probe.py PORT [chat|completion] [N] [MiB]
import http.client, json, threading, time, sys
port = int(sys.argv[1]); kind = sys.argv[2] if len(sys.argv) > 2 else "chat"
n = int(sys.argv[3]) if len(sys.argv) > 3 else 8
word = "a" * ((int(sys.argv[4]) if len(sys.argv) > 4 else 31) << 20)
body = json.dumps({"messages": [{"role": "user", "content": word}], "max_tokens": 4} if kind == "chat" else {"prompt": word, "max_tokens": 4}).encode()
path = "/v1/chat/completions" if kind == "chat" else "/v1/completions"
res = []
def bad():
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", path, body, {"Content-Type": "application/json"}); t = time.time(); r = c.getresponse(); r.read()
    res.append((r.status, time.time() - t))
ts = [threading.Thread(target=bad) for _ in range(n)]
for t in ts: t.start()
time.sleep(0.3)
lat = []
normal = None
t_end = time.time() + 3
while any(t.is_alive() for t in ts) or time.time() < t_end:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    t = time.time(); c.request("GET", "/health"); c.getresponse().read(); lat.append(time.time() - t)
    if normal is None:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        t = time.time(); c.request("POST", "/v1/completions", json.dumps({"prompt": "Hello", "max_tokens": 4}).encode(), {"Content-Type": "application/json"}); r = c.getresponse(); r.read(); normal = (r.status, time.time() - t)
    time.sleep(0.02)
    if not any(t.is_alive() for t in ts): break
for t in ts: t.join()
lat.sort()
print(f"{kind}: bad requests {sorted(s for s, _ in res)}, each answered in {min(d for _, d in res):.2f}..{max(d for _, d in res):.2f} s after its upload")
print(f"/health while in flight: {len(lat)} probes, median {1000*lat[len(lat)//2]:.1f} ms, max {1000*lat[-1]:.1f} ms")
print(f"normal request while in flight: status {normal[0]}, {1000*normal[1]:.0f} ms")
