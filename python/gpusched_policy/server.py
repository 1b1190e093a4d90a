"""A PolicyService over gRPC, for any score function.

serve(score_fn, address) answers the scheduler's Score calls: score_fn gets
the pod, the request's feature matrix as a float32 array (one row per node
of the request, in order), the column names and the request itself (whole:
an incremental request is expanded first), and returns one score per node,
higher is better.
"""

from concurrent import futures

import grpc
import numpy as np

from . import policy_pb2 as pb
from .bases import Bases, RequestError
from .matrix import to_array

SERVICE = "gpusched.policy.v1alpha1.PolicyService"


def score_handler(score_fn, on_reply=None, bases=None):
    """The Score method: the request scored by score_fn, the scores as
    values in the request's node order (by name to a request without a
    session). With bases (a Bases), each session's table is kept and
    incremental requests expanded, so that score_fn and on_reply see every
    request whole (and must not modify it)."""

    def score(request, context):
        kept = False
        if bases is not None:
            try:
                request, kept = bases.expand(request)
            except RequestError as e:
                context.abort(e.code, str(e))
        matrix = to_array(request.features)
        if matrix.shape[0] != len(request.nodes):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"the request's features have {matrix.shape[0]} rows for {len(request.nodes)} nodes")
        scores = np.asarray(score_fn(request.pod, matrix, list(request.features.columns), request), dtype=np.float64)
        if scores.shape != (len(request.nodes),):
            context.abort(grpc.StatusCode.INTERNAL,
                          f"the score function answered {scores.shape} scores for {len(request.nodes)} nodes")
        if request.session:
            reply = pb.ScoreReply(values=scores.tolist(), kept=kept)
        else:  # a scheduler that sends no session reads scores by name only
            reply = pb.ScoreReply(scores=[pb.NodeScore(node=n.name, score=float(v))
                                          for n, v in zip(request.nodes, scores)])
        if on_reply is not None:
            on_reply(request, reply)
        return reply

    return score


def serve(score_fn, address="127.0.0.1:50051", *, max_workers=4, on_reply=None, keep_requests=True):
    """Starts a gRPC server answering PolicyService.Score on address (host:port;
    port 0 picks a free one) and returns (server, port); server.stop(None)
    ends it, server.wait_for_termination() waits for that. It keeps each
    scheduler's last request so that the next may send only the nodes that
    changed (bases.Bases); keep_requests=False makes it answer whole
    requests only, as a service that does not keep them."""
    handler = grpc.method_handlers_generic_handler(SERVICE, {
        "Score": grpc.unary_unary_rpc_method_handler(
            score_handler(score_fn, on_reply, Bases() if keep_requests else None),
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
