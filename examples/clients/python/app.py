"""A tiny WSGI app limited by fairgate, on the standard library's server.

    FAIRGATE_URL=http://127.0.0.1:8080 python3 app.py
    curl -i -H 'Authorization: Bearer token-a' http://127.0.0.1:8000/hello

Settings, from the environment: FAIRGATE_URL (http://127.0.0.1:8080),
FAIRGATE_TOKEN (fairgate's internal token, if it has one),
FAIRGATE_ON_UNREACHABLE (open or closed; open), FAIRGATE_TIMEOUT_MS (250),
PORT (8000; 0 picks a free one). It prints "listening on http://HOST:PORT"
once it listens.
"""

import json
import logging
import os
import socketserver
import sys
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from fairgate_wsgi import Client, Middleware

# The app's own users: an API token to the tenant it belongs to. A real
# app checks a session, a hashed API key or a signed token here.
TOKENS = {"token-a": "tenant-a", "token-b": "tenant-b"}


def authenticate(app):
    """The app's own authentication: 401 without a known token, else the
    verified tenant in environ["app.tenant"] for the layers after it."""
    def authenticated(environ, start_response):
        scheme, _, token = environ.get("HTTP_AUTHORIZATION", "").partition(" ")
        tenant = TOKENS.get(token) if scheme.lower() == "bearer" else None
        if tenant is None:
            start_response("401 Unauthorized", [("Content-Type", "text/plain"), ("WWW-Authenticate", "Bearer")])
            return [b"unknown token\n"]
        environ["app.tenant"] = tenant
        return app(environ, start_response)
    return authenticated


def api(environ, start_response):
    """The API itself: says whom it served."""
    body = json.dumps({"tenant": environ["app.tenant"], "path": environ.get("PATH_INFO", "")}).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


def build():
    client = Client(os.environ.get("FAIRGATE_URL", "http://127.0.0.1:8080"),
                    token=os.environ.get("FAIRGATE_TOKEN") or None,
                    timeout=int(os.environ.get("FAIRGATE_TIMEOUT_MS", "250")) / 1000)
    limited = Middleware(api, client,
                         # The tenant the authentication above verified,
                         # never a header the client sends.
                         tenant_of=lambda environ: environ["app.tenant"],
                         on_unreachable=os.environ.get("FAIRGATE_ON_UNREACHABLE", "open"))
    return authenticate(limited)


class ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class QuietHandler(WSGIRequestHandler):
    def log_message(self, *args):
        pass


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    server = make_server("127.0.0.1", int(os.environ.get("PORT", "8000")), build(),
                         server_class=ThreadingWSGIServer, handler_class=QuietHandler)
    print("listening on http://127.0.0.1:%d" % server.server_port, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        sys.exit(0)
