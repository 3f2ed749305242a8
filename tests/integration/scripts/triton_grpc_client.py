"""Sends KServe v2 / Triton ModelInfer calls over gRPC with Triton's own gRPC client
(tritonclient[grpc], grpcio underneath) through Ferry's Envoy to the echo model, and saves what
came back.

Usage: triton_grpc_client.py HOST:PORT OUT < cases.json

cases.json is a list of {"name", "model", "mode", "ids", "forged", "headers"}: `ids` maps an
input name to its ids (merchant_id: INT64, any other name: BYTES of shape [N, 1]), `forged` a tensor name Ferry writes on that route (the client sends its own INT64
tensor under it), `headers` gRPC metadata (e.g. one a route matches on). `mode`:
- "raw": `InferenceServerClient.infer()` (it sends every tensor as raw_input_contents) with the
  client's own inputs `amount` (FP32) and `note` (BYTES) around the ids and the forged tensor,
  and a request parameter `client_param`;
- "typed": the same request with each tensor's data in its typed `contents`
  (InferTensorContents), sent through tritonclient's generated stub (GRPCInferenceServiceStub);
- "garbage": bytes that are not a ModelInferRequest, through a raw grpcio call.

The echo model answers with the inputs it received as outputs and the request's parameters.
Writes OUT (JSON), per case: "outputs" {name: {datatype, shape, data (BYTES as UTF-8 text)}}
"parameters" {name: value} and "sent" (the tensors sent, in the form of "outputs"), or "error" {"code": the gRPC status name, "message"}.
"""

import importlib.metadata
import json
import sys

import grpc
import numpy as np
import tritonclient.grpc as triton
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

PATH = "/inference.GRPCInferenceService/ModelInfer"


def arrays(case):
    """The request's tensors as (name, datatype, numpy array), in the order sent."""
    n = len(next(iter(case["ids"].values())))
    ids = []
    for name, values in case["ids"].items():
        if name == "merchant_id":
            ids.append((name, "INT64", np.array(values, dtype=np.int64)))
        else:
            ids.append((name, "BYTES", np.array([[i.encode()] for i in values], dtype=np.object_)))
    note = [("n\u00e9%d" % i).encode() * (i % 3) for i in range(n)]
    # The forged tensor between the client's own, so dropping it must keep the raw contents
    # of the others aligned.
    return (
        [("amount", "FP32", np.arange(n, dtype=np.float32) * 1.5 - 3.25)]
        + ids[:1]
        + [(case["forged"], "INT64", np.full(n, 999, dtype=np.int64))]
        + ids[1:]
        + [("note", "BYTES", np.array(note, dtype=np.object_))]
    )


def text(a):
    """A numpy array's elements as JSON values (BYTES as UTF-8 text), flattened."""
    return [x.decode() if isinstance(x, bytes) else x for x in a.flatten().tolist()]


def param_value(p):
    return getattr(p, p.WhichOneof("parameter_choice"))


def send_raw(client, case):
    inputs = []
    for name, datatype, a in arrays(case):
        t = triton.InferInput(name, list(a.shape), datatype)
        t.set_data_from_numpy(a)
        inputs.append(t)
    result = client.infer(
        case["model"], inputs, request_id=case["name"], headers=case["headers"],
        parameters={"client_param": "kept"},
    )
    response = result.get_response()
    outputs = {
        o.name: {"datatype": o.datatype, "shape": list(o.shape), "data": text(result.as_numpy(o.name))}
        for o in response.outputs
    }
    return outputs, response


CONTENTS = {"FP32": "fp32_contents", "INT64": "int64_contents", "BYTES": "bytes_contents",
            "INT32": "int_contents", "FP64": "fp64_contents", "BOOL": "bool_contents"}


def send_typed(host, case):
    request = service_pb2.ModelInferRequest(model_name=case["model"], id=case["name"])
    request.parameters["client_param"].string_param = "kept"
    for name, datatype, a in arrays(case):
        t = request.inputs.add(name=name, datatype=datatype, shape=list(a.shape))
        getattr(t.contents, CONTENTS[datatype]).extend(a.flatten().tolist())
    with grpc.insecure_channel(host) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        response = stub.ModelInfer(request, metadata=list(case["headers"].items()), timeout=30)
    assert not response.raw_output_contents, "typed in, typed out"
    outputs = {
        o.name: {"datatype": o.datatype, "shape": list(o.shape),
                 "data": text(np.array(getattr(o.contents, CONTENTS[o.datatype]), dtype=object))}
        for o in response.outputs
    }
    return outputs, response


def send_garbage(host, case):
    with grpc.insecure_channel(host) as channel:
        call = channel.unary_unary(PATH, request_serializer=None, response_deserializer=None)
        call(b"\xff\xff\xff", metadata=list(case["headers"].items()), timeout=30)


def run(host, client, case):
    try:
        if case["mode"] == "raw":
            outputs, response = send_raw(client, case)
        elif case["mode"] == "typed":
            outputs, response = send_typed(host, case)
        else:
            send_garbage(host, case)
            return {"name": case["name"], "error": {"code": "OK", "message": ""}}
    except InferenceServerException as e:  # the test compares the status; nothing is swallowed
        return {"name": case["name"],
                "error": {"code": str(e.status()).removeprefix("StatusCode."), "message": e.message()}}
    except grpc.RpcError as e:
        return {"name": case["name"], "error": {"code": e.code().name, "message": e.details()}}
    params = {k: param_value(v) for k, v in response.parameters.items()}
    sent = {name: {"datatype": d, "shape": list(a.shape), "data": text(a)} for name, d, a in arrays(case)}
    return {"name": case["name"], "id": response.id, "outputs": outputs, "parameters": params,
            "sent": sent}


def main():
    host, out = sys.argv[1], sys.argv[2]
    cases = json.load(sys.stdin)
    client = triton.InferenceServerClient(host)
    try:
        report = [run(host, client, case) for case in cases]
    finally:
        client.close()
    with open(out, "w") as f:
        json.dump(report, f)
    print("tritonclient", importlib.metadata.version("tritonclient"),
          "grpcio", importlib.metadata.version("grpcio"))


if __name__ == "__main__":
    main()
