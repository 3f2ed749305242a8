"""Sends KServe v2 / Open Inference Protocol requests with Triton's own HTTP client
(tritonclient[http]) through Ferry's Envoy to the echo model, and saves what came back.

Usage: triton_client.py HOST:PORT OUT_DIR < cases.json

cases.json is a list of {"name", "model", "binary_data", "ids": {input name: [ids]}, "forged"}
where an input named merchant_id holds INT64 ids and any other name BYTES ids. Every request
also carries the client's own inputs (`amount` FP32, `note` BYTES) and a forged INT64 tensor
named `forged` (a name Ferry writes on that route), all in the case's form (JSON or binary).

Each case is sent twice:
- raw: tritonclient builds the exact body `infer()` posts (`InferenceServerClient.
  generate_request_body`, the same `_get_inference_request` call `infer()` makes in 2.73.0) and
  http.client posts it with the `Inference-Header-Content-Length` header `infer()` adds when the
  body carries binary data. This keeps the bytes the client sent and the raw bytes the model
  echoed, for the test to compare byte by byte; tritonclient offers no public way to get either
  from `infer()`.
- through `client.infer()` itself (tritonclient's own transport and response parsing): the echo
  model hands the request back with its framing header, so tritonclient parses the echo as an
  answer; its JSON header (`get_response()`) is saved for the test to compare with the raw one.
  With binary data the request names an output (`binary_data: true`), since tritonclient reads
  `outputs` from a framed answer; without, it asks for none and the client adds
  `parameters.binary_data_output: true`.

Writes OUT_DIR/NAME.sent and NAME.got (bodies) and OUT_DIR/cases.json (per case: the status,
the header lengths sent and received, the echoed request headers, and infer()'s response or
its error).
"""

import http.client
import importlib.metadata
import json
import os
import sys

import numpy as np
import tritonclient.http as triton


def inputs(case):
    n = len(next(iter(case["ids"].values())))
    binary = case["binary_data"]
    out = []
    for name, ids in case["ids"].items():
        if name == "merchant_id":
            t = triton.InferInput(name, [n], "INT64")
            t.set_data_from_numpy(np.array(ids, dtype=np.int64), binary_data=binary)
        else:
            t = triton.InferInput(name, [n, 1], "BYTES")
            data = np.array([[i.encode()] for i in ids], dtype=np.object_)
            t.set_data_from_numpy(data, binary_data=binary)
        out.append(t)
    amount = triton.InferInput("amount", [n], "FP32")
    amount.set_data_from_numpy(np.arange(n, dtype=np.float32) * 1.5 - 3.25, binary_data=binary)
    note = triton.InferInput("note", [n], "BYTES")
    note.set_data_from_numpy(
        np.array([("n\u00e9%d" % i).encode() * (i % 3) for i in range(n)], dtype=np.object_),
        binary_data=binary,
    )
    forged = triton.InferInput(case["forged"], [n], "INT64")
    forged.set_data_from_numpy(np.full(n, 999, dtype=np.int64), binary_data=binary)
    # The forged tensor between the client's own, so dropping it must cut the binary part.
    return [amount] + out[:1] + [forged] + out[1:] + [note]


def outputs(case):
    if case["binary_data"]:
        return [triton.InferRequestedOutput("probability", binary_data=True)]
    return None


def send_raw(host, case):
    body, json_size = triton.InferenceServerClient.generate_request_body(
        inputs(case), outputs=outputs(case), request_id=case["name"]
    )
    headers = {}
    if json_size is not None:
        headers["Inference-Header-Content-Length"] = str(json_size)
    conn = http.client.HTTPConnection(host, timeout=30)
    conn.request("POST", "/v2/models/%s/infer" % case["model"], body=body, headers=headers)
    resp = conn.getresponse()
    got = resp.read()
    conn.close()
    return body, json_size, resp, got


def send_infer(host, case):
    client = triton.InferenceServerClient(host, connection_timeout=30, network_timeout=30)
    try:
        result = client.infer(
            case["model"], inputs(case), outputs=outputs(case), request_id=case["name"]
        )
        return {"response": result.get_response()}
    except Exception as e:  # the test reports it; nothing is swallowed
        return {"error": "%s: %s" % (type(e).__name__, e)}
    finally:
        client.close()


def main():
    host, out_dir = sys.argv[1], sys.argv[2]
    cases = json.load(sys.stdin)
    report = []
    for case in cases:
        body, json_size, resp, got = send_raw(host, case)
        with open(os.path.join(out_dir, case["name"] + ".sent"), "wb") as f:
            f.write(body)
        with open(os.path.join(out_dir, case["name"] + ".got"), "wb") as f:
            f.write(got)
        report.append(
            {
                "name": case["name"],
                "status": resp.status,
                "sent_header_length": json_size,
                "got_header_length": resp.getheader("Inference-Header-Content-Length"),
                "echo_headers": json.loads(resp.getheader("x-echo-headers") or "{}"),
                "infer": send_infer(host, case),
            }
        )
    with open(os.path.join(out_dir, "cases.json"), "w") as f:
        json.dump(report, f)
    print("tritonclient", importlib.metadata.version("tritonclient"))


if __name__ == "__main__":
    main()
