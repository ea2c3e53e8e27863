"""The judge's line to its launcher (issue 35, item 1): one Unix stream socket, length-prefixed messages.

Requests from the judge are pickled (the launcher trusts the judge) and may carry file descriptors
(``SCM_RIGHTS``: the shared buffers' memfds, :mod:`core.evaluation.shared_buffers`). Replies from the
launcher are JSON, never pickles: a pickle from the process that runs the kernel would run whatever
code it names in the judge. The judge also bounds a reply's size.
"""
from __future__ import annotations

import json
import pickle
import socket
import struct
from typing import Any

_HEADER = struct.Struct("!QI")  # payload bytes, descriptors attached
MAX_REPLY_BYTES = 64 << 20
MAX_FDS = 253  # SCM_MAX_FD


class ChannelClosed(EOFError):
    """The other end is gone."""


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            raise ChannelClosed("the other end closed the channel")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def send_request(sock: socket.socket, request: Any, fds: list[int] = ()) -> None:
    """Judge -> launcher: a pickled request, with ``fds`` attached (sent in groups of MAX_FDS)."""
    payload = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
    fds = list(fds)
    groups = [fds[i:i + MAX_FDS] for i in range(0, len(fds), MAX_FDS)] or [[]]
    header = _HEADER.pack(len(payload), len(fds))
    socket.send_fds(sock, [header], groups[0])
    for group in groups[1:]:
        socket.send_fds(sock, [b"\0"], group)
    sock.sendall(payload)


def recv_request(sock: socket.socket) -> tuple[Any, list[int]]:
    """Launcher side: (request, the descriptors that came with it)."""
    data, fds, _, _ = socket.recv_fds(sock, _HEADER.size, MAX_FDS)
    if not data:
        raise ChannelClosed("the judge closed the channel")
    if len(data) < _HEADER.size:
        data += _recv_exact(sock, _HEADER.size - len(data))
    size, count = _HEADER.unpack(data)
    fds = list(fds)
    while len(fds) < count:
        _, more, _, _ = socket.recv_fds(sock, 1, MAX_FDS)
        if not more:
            raise ChannelClosed("descriptors missing")
        fds += more
    return pickle.loads(_recv_exact(sock, size)), fds


def send_reply(sock: socket.socket, reply: dict) -> None:
    """Launcher -> judge: JSON only."""
    payload = json.dumps(reply, default=_plain).encode()
    sock.sendall(_HEADER.pack(len(payload), 0) + payload)


def recv_reply(sock: socket.socket) -> dict:
    """Judge side: a launcher's reply, parsed as JSON (a dict), within MAX_REPLY_BYTES."""
    size, _ = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
    if size > MAX_REPLY_BYTES:
        raise ValueError(f"launcher reply of {size} bytes exceeds {MAX_REPLY_BYTES}")
    reply = json.loads(_recv_exact(sock, size))
    if not isinstance(reply, dict):
        raise ValueError("launcher reply is not a JSON object")
    return reply


def _plain(value: Any) -> Any:
    """numpy scalars and the like, as JSON numbers."""
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON")
