"""A policy service's side of incremental requests (ScoreRequest.base).

Between two pods most nodes look the same to the service, so the scheduler
sends only the nodes whose Node message or feature row changed and names
the others by their slot in a table the service keeps per session
(docs/policy-service.md#incremental-requests). Bases keeps those tables and
expands a request into a whole one, so that score functions only ever see
whole requests. It does what Go's pkg/policyservice/bases does.
"""

import math
import threading

import grpc
import numpy as np

from . import policy_pb2 as pb

DEFAULT_SESSIONS = 16
MAX_SLOTS = 1 << 20

# BUILTIN_COLUMN is the feature column builtin_scores set (gpu.BuiltinScoreColumn).
BUILTIN_COLUMN = "builtin_score"


class RequestError(Exception):
    """A request that cannot be expanded: code is the gRPC status to answer."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


class _Table:
    def __init__(self, columns):
        self.version = 0
        self.columns = list(columns)
        self.nodes = {}  # slot -> Node
        self.rows = {}  # slot -> row bytes
        self.used = 0


class Bases:
    """Each session's table of nodes, at most `sessions` of them (the least
    recently used dropped first; 0 or less: DEFAULT_SESSIONS). Safe for
    concurrent use."""

    def __init__(self, sessions=DEFAULT_SESSIONS):
        self._limit = sessions if sessions > 0 else DEFAULT_SESSIONS
        self._lock = threading.Lock()
        self._tables = {}
        self._clock = 0

    def expand(self, request):
        """(whole request, kept). A request without a session is whole and
        not kept; one with a session and base 0 replaces the session's
        table; one on the table's version writes its nodes at their slots
        and expands to them followed by the reused slots' nodes, with their
        rows and builtin scores. Raises RequestError: FAILED_PRECONDITION
        when base is not the table's version (nothing changes; the
        scheduler sends the request whole), INVALID_ARGUMENT when the
        request is malformed. The whole request is read only."""
        features = request.features
        width = len(features.columns)
        if features.rows != len(request.nodes) or len(features.values) != 4 * width * len(request.nodes):
            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"features: {features.rows} rows in {len(features.values)} bytes for "
                               f"{len(request.nodes)} nodes of {width} columns: want one row per node, 4 bytes a value")
        if not request.session:
            if request.base or len(request.reused) or len(request.slots):
                raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                                   "base, slots, reused: set without a session: want a session")
            return request, False
        if len(request.slots) != len(request.nodes):
            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"slots: {len(request.slots)} for {len(request.nodes)} nodes: want one per node")
        for k, slot in enumerate(request.slots):
            if not 0 <= slot < MAX_SLOTS:
                raise RequestError(grpc.StatusCode.INVALID_ARGUMENT, f"slots[{k}] {slot}: want 0..{MAX_SLOTS - 1}")
        with self._lock:
            self._clock += 1
            table = self._tables.get(request.session)
            if request.base == 0:
                if len(request.reused) or len(request.builtin_scores):
                    raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                                       "reused, builtin_scores: set without a base: want a base")
                table = _Table(features.columns)
            elif table is None or table.version != request.base:
                held = "none" if table is None else str(table.version)
                raise RequestError(grpc.StatusCode.FAILED_PRECONDITION,
                                   f'base {request.base} of session "{request.session}": the table is as of {held}; '
                                   "send the request whole")
            self._check(table, request)
            if request.base == 0:
                self._tables.pop(request.session, None)
                while len(self._tables) >= self._limit:
                    oldest = min(self._tables, key=lambda s: self._tables[s].used)
                    del self._tables[oldest]
                self._tables[request.session] = table
            table.used = self._clock
            return self._apply(table, request, width), True

    @staticmethod
    def _check(table, request):
        columns = list(request.features.columns)
        if table.columns != columns:
            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"features.columns {columns}: the table's are {table.columns}; a session keeps its columns")
        sent = set()
        for slot in request.slots:
            if slot in sent:
                raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                                   f"slots: {slot} twice: want each node at its own slot")
            sent.add(slot)
        for k, slot in enumerate(request.reused):
            if slot not in table.nodes or slot in sent:
                raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                                   f"reused[{k}] {slot}: not a slot the table holds, or sent again: want a slot sent before")
        if len(request.builtin_scores) != len(request.reused):
            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"builtin_scores: {len(request.builtin_scores)} for {len(request.reused)} reused nodes: "
                               "want one per reused node, in their order")
        for k, v in enumerate(request.builtin_scores):
            if not math.isfinite(v):
                raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                                   f"builtin_scores[{k}] {v}: want a finite number")

    @staticmethod
    def _apply(table, request, width):
        row = 4 * width
        values = request.features.values
        for k, slot in enumerate(request.slots):
            table.nodes[slot] = request.nodes[k]
            table.rows[slot] = values[k * row:(k + 1) * row]
        table.version = request.sequence
        if request.base == 0:
            return request
        nodes = list(request.nodes) + [table.nodes[slot] for slot in request.reused]
        reused = b"".join(table.rows[slot] for slot in request.reused)
        if len(request.reused) and BUILTIN_COLUMN in table.columns:
            matrix = np.frombuffer(reused, dtype="<f4").reshape(len(request.reused), width).copy()
            matrix[:, table.columns.index(BUILTIN_COLUMN)] = np.asarray(request.builtin_scores, dtype=np.float64).astype(np.float32)
            reused = matrix.tobytes()
        whole = pb.ScoreRequest(pod=request.pod, fallback_policy=request.fallback_policy, models=request.models,
                                groups=request.groups, session=request.session, sequence=request.sequence, nodes=nodes,
                                features=pb.FeatureMatrix(columns=request.features.columns, rows=len(nodes),
                                                          values=values + reused))
        for node, score in zip(whole.nodes[len(request.nodes):], request.builtin_scores):
            node.builtin_score = score
        return whole
