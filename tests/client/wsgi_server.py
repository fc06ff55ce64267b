"""Serve the test settings' Django site with the standard library's threaded WSGI server.

    python -m tests.client.wsgi_server PORT

For a gateway whose database does not answer (tests/client/conformance.py): unlike
``runserver``, it checks no migration at start, so it starts with the database down and
every request that needs the database answers 503 ``database_unavailable``.
"""

from __future__ import annotations

import sys
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from django.core.wsgi import get_wsgi_application


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def main(port: int) -> None:
    application = get_wsgi_application()
    server = make_server(
        "127.0.0.1", port, application, server_class=_ThreadingWSGIServer,
        handler_class=_QuietHandler,
    )  # fmt: skip
    server.serve_forever()


if __name__ == "__main__":
    main(int(sys.argv[1]))
