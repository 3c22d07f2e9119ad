"""Refuse HTTP requests whose Host header is not a loopback name: the guard
against DNS rebinding.

A server bound to 127.0.0.1 is still reachable from any web page the user
opens: the page's own host name can be re-pointed at 127.0.0.1, and the
browser then sends the page's requests, with the page's Host header, to the
local server and lets the page read the answers. Only a name the attacker
cannot re-point is accepted: ``localhost``, an IPv4 address in 127.0.0.0/8
or ``[::1]``, alone or with the port the server listens on.
"""

from __future__ import annotations

import ipaddress

REFUSED_BODY = (b"Refused: this txdb server answers only requests addressed to a loopback host "
                b"(localhost, 127.0.0.1, [::1]).\n")


def loopback_host(host: str | None, port: int | None) -> bool:
    """True when ``host`` (a Host header) names this machine's loopback,
    with no port or ``port``; ``port`` None (a Unix socket) accepts any."""
    if not host:
        return False
    host = host.strip().lower()
    if host.startswith("["):
        name, sep, rest = host[1:].partition("]")
        if not sep:
            return False
        if rest and not rest.startswith(":"):
            return False
        given = rest[1:] if rest else None
    else:
        name, colon, given = host.partition(":")
        given = given if colon else None
    if given is not None:
        if not given.isascii() or not given.isdigit() or (port is not None and int(given) != port):
            return False
    if name == "localhost":
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    if host.startswith("[") != (address.version == 6):
        return False  # an IPv6 address must be bracketed, an IPv4 one must not
    return address.is_loopback


def refuse_foreign_hosts(app):
    """The ASGI ``app``, answering 400 to any HTTP or WebSocket request whose
    Host header is not a loopback name (see ``loopback_host``)."""

    async def guarded(scope, receive, send):
        if scope.get("type") not in ("http", "websocket"):
            return await app(scope, receive, send)
        hosts = [v.decode("latin-1") for k, v in scope.get("headers") or () if k == b"host"]
        server = scope.get("server") or (None, None)
        if len(hosts) == 1 and loopback_host(hosts[0], server[1]):
            return await app(scope, receive, send)
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await send({"type": "http.response.start", "status": 400,
                    "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                                (b"content-length", str(len(REFUSED_BODY)).encode()),
                                (b"cache-control", b"no-store")]})
        await send({"type": "http.response.body", "body": REFUSED_BODY})

    return guarded
