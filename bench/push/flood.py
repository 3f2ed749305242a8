"""bench/write_flood.sh's writers (stdlib only).

  flood.py URL PUSH_SOURCE CLIENTS SECONDS ROWS ENTITIES TOKEN
      CLIENTS processes, each building one Feast /push body of ROWS rows of user_stats once
      (its own users) and posting it again and again for SECONDS, as fast as the server
      answers; a refusal with a Retry-After (`ferry serve`'s 429, Envoy's 503 over
      --write-max-requests) is sent again after it (FLOOD_IGNORE_RETRY_AFTER=1: at once); a
      connection that fails is opened again. Building the body once keeps the
      writers' own CPU out of what the flood costs the machine. Prints one JSON line: answers
      by status, resets, bytes sent.
"""
import http.client
import json
import multiprocessing
import os
import sys
import time
import urllib.parse

from load import body, headers


def worker(args):
    url, source, seconds, rows, entities, token, wid = args
    u = urllib.parse.urlsplit(url)
    users = [f"u{(wid * rows + j) % entities + 1:06d}" for j in range(rows)]
    data = body(source, users, time.time(), float(wid))
    h = headers(token)
    statuses, resets, sent = {}, 0, 0
    c = None
    end = time.time() + seconds
    while time.time() < end:
        try:
            if c is None:
                c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
            c.request("POST", u.path, data, h)
            r = c.getresponse()
            r.read()
            statuses[r.status] = statuses.get(r.status, 0) + 1
            sent += len(data)
            wait = r.getheader("retry-after")
            if r.status in (429, 503) and wait and os.environ.get("FLOOD_IGNORE_RETRY_AFTER") != "1":
                time.sleep(float(wait))
            if r.getheader("connection", "").lower() == "close":
                c.close()
                c = None
        except (ConnectionError, http.client.HTTPException, OSError):
            resets += 1
            if c is not None:
                c.close()
            c = None
    return statuses, resets, sent, len(data)


def main():
    url, source, clients, seconds, rows, entities, token = sys.argv[1:8]
    n = int(clients)
    jobs = [(url, source, float(seconds), int(rows), int(entities), token, w) for w in range(n)]
    with multiprocessing.Pool(n) as pool:
        out = pool.map(worker, jobs)
    statuses = {}
    for s, _, _, _ in out:
        for k, v in s.items():
            statuses[str(k)] = statuses.get(str(k), 0) + v
    print(json.dumps({
        "writers": n,
        "body_bytes": out[0][3],
        "answers": statuses,
        "resets": sum(r for _, r, _, _ in out),
        "mib_sent_and_answered": round(sum(b for _, _, b, _ in out) / 2**20, 1),
    }))


if __name__ == "__main__":
    main()
