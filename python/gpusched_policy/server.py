"""A PolicyService over gRPC, for any score function.

serve(score_fn, address) answers the scheduler's Score calls: score_fn gets
the pod, the request's feature matrix as a float32 array (one row per node
of the request, in order), the column names and the request itself, and
returns one score per node, higher is better.
"""

from concurrent import futures

import grpc
import numpy as np

from . import policy_pb2 as pb
from .matrix import to_array

SERVICE = "gpusched.policy.v1alpha1.PolicyService"


def score_handler(score_fn, on_reply=None):
    """The Score method: the request scored by score_fn, each node named."""

    def score(request, context):
        matrix = to_array(request.features)
        if matrix.shape[0] != len(request.nodes):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"the request's features have {matrix.shape[0]} rows for {len(request.nodes)} nodes")
        scores = np.asarray(score_fn(request.pod, matrix, list(request.features.columns), request), dtype=np.float64)
        if scores.shape != (len(request.nodes),):
            context.abort(grpc.StatusCode.INTERNAL,
                          f"the score function answered {scores.shape} scores for {len(request.nodes)} nodes")
        reply = pb.ScoreReply(scores=[pb.NodeScore(node=n.name, score=float(s)) for n, s in zip(request.nodes, scores)])
        if on_reply is not None:
            on_reply(request, reply)
        return reply

    return score


def serve(score_fn, address="127.0.0.1:50051", *, max_workers=4, on_reply=None):
    """Starts a gRPC server answering PolicyService.Score on address (host:port;
    port 0 picks a free one) and returns (server, port); server.stop(None)
    ends it, server.wait_for_termination() waits for that."""
    handler = grpc.method_handlers_generic_handler(SERVICE, {
        "Score": grpc.unary_unary_rpc_method_handler(
            score_handler(score_fn, on_reply),
            request_deserializer=pb.ScoreRequest.FromString,
            response_serializer=pb.ScoreReply.SerializeToString),
    })
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"cannot listen on {address}")
    server.start()
    return server, port
