"""The environment's framing: each message is preceded by its length as a
4-byte little-endian unsigned integer."""

import struct

_HEAD = struct.Struct("<I")


def write_frame(stream, payload: bytes) -> None:
    stream.write(_HEAD.pack(len(payload)))
    stream.write(payload)
    stream.flush()


def read_frame(stream) -> bytes:
    head = _read_exactly(stream, _HEAD.size)
    (size,) = _HEAD.unpack(head)
    return _read_exactly(stream, size)


def _read_exactly(stream, size: int) -> bytes:
    data = stream.read(size)
    if data is None or len(data) < size:
        # A buffered reader returns short only at the end of the stream.
        raise EOFError(f"the environment closed its output after {0 if data is None else len(data)} of {size} bytes")
    return data
