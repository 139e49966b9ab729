"""Loopback ports for the tests' coordinators, emulators and fake servers."""

import socket


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it; bind, read, close).

    Another process may take it before the caller binds it; tests that start a server on it
    retry or fail with the server's own error, never hang.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
