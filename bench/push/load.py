"""bench/push.sh's driver (stdlib only).

  throughput URL PUSH_SOURCE CONNS SECONDS ROWS ENTITIES [TOKEN]
      CONNS processes, each a keep-alive connection posting Feast /push bodies of ROWS rows of
      user_stats (distinct users, event times increasing) in a closed loop for SECONDS; prints
      one JSON line: requests, rows, rows/s, non-200 answers.
  latency PUSH_URL PREDICT_URL PUSH_SOURCE SAMPLES [TOKEN]
      Pushes one row (a new balance for one user), then polls PREDICT_URL (1 connection) until
      the model is given the new value; prints p50/p99/max of push-sent -> served (ms) and of
      the push's own answer time.
"""
import http.client
import json
import multiprocessing
import sys
import time
import urllib.parse

FLOATS = ["amount_avg_7d", "amount_avg_30d", "amount_std_30d", "amount_max_30d", "balance",
          "credit_utilization", "risk_score", "device_trust", "geo_velocity", "merchant_risk_avg"]


def conn(url):
    u = urllib.parse.urlsplit(url)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=30), u.path


def body(source, users, ts, value):
    df = {"user_id": users, "event_timestamp": [ts] * len(users)}
    for i, f in enumerate(FLOATS):
        df[f] = [value + i for _ in users]
    return json.dumps({"push_source_name": source, "df": df, "to": "online"}).encode()


def headers(token):
    h = {"content-type": "application/json"}
    if token:
        h["authorization"] = f"Bearer {token}"
    return h


def worker(args):
    url, source, seconds, rows, entities, token, wid = args
    c, path = conn(url)
    h = headers(token)
    n, bad, k = 0, 0, wid * 7919
    start = time.time()
    end = start + seconds
    while time.time() < end:
        users = [f"u{(k + j) % entities + 1:06d}" for j in range(rows)]
        k += rows
        c.request("POST", path, body(source, users, time.time(), float(n)), h)
        r = c.getresponse()
        r.read()
        if r.status != 200:
            bad += 1
        n += 1
    return n, bad, time.time() - start


def throughput(url, source, conns, seconds, rows, entities, token=None):
    with multiprocessing.Pool(conns) as pool:
        out = pool.map(worker, [(url, source, float(seconds), int(rows), int(entities), token, w)
                                for w in range(conns)])
    reqs = sum(o[0] for o in out)
    wall = max(o[2] for o in out)
    print(json.dumps({"url": url, "conns": conns, "rows_per_request": int(rows),
                      "seconds": round(wall, 2), "requests": reqs, "non_200": sum(o[1] for o in out),
                      "rows_per_s": round(reqs * int(rows) / wall)}))


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def latency(push_url, predict_url, source, samples, token=None):
    pc, ppath = conn(push_url)
    qc, qpath = conn(predict_url)
    h = headers(token)
    served, acks = [], []
    for i in range(int(samples)):
        user = f"u{i % 1000 + 1:06d}"
        value = 1_000_000.0 + i
        b = body(source, [user], time.time(), value)
        q = json.dumps({"instances": [{"user_id": user}]}).encode()
        t0 = time.perf_counter()
        pc.request("POST", ppath, b, h)
        r = pc.getresponse()
        r.read()
        acks.append((time.perf_counter() - t0) * 1e3)
        assert r.status == 200, r.status
        while True:
            qc.request("POST", qpath, q, {"content-type": "application/json"})
            a = qc.getresponse()
            got = json.loads(a.read())
            inst = got.get("instances", [{}])[0]
            if any(v == value + 4 for k, v in inst.items() if k.endswith("balance")):
                break
            if time.perf_counter() - t0 > 5:
                raise SystemExit(f"push {i} not served after 5 s: {got}")
        served.append((time.perf_counter() - t0) * 1e3)
    print(json.dumps({"samples": len(served),
                      "push_to_served_ms": {"p50": round(pct(served, 50), 3),
                                            "p99": round(pct(served, 99), 3),
                                            "max": round(max(served), 3)},
                      "push_ack_ms": {"p50": round(pct(acks, 50), 3), "p99": round(pct(acks, 99), 3)}}))


if __name__ == "__main__":
    mode, rest = sys.argv[1], sys.argv[2:]
    if mode == "throughput":
        throughput(rest[0], rest[1], int(rest[2]), *rest[3:])
    elif mode == "latency":
        latency(*rest)
    else:
        raise SystemExit(__doc__)
