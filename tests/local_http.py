"""What the tests of the HTTP clients share: a server on 127.0.0.1, on a free port, answering with a handler class."""

from __future__ import annotations

import threading
from http.server import ThreadingHTTPServer


class LocalServer:
    """Serves ``handler`` from construction until ``close()`` (or the end of a ``with`` block); ``url`` is
    ``http://127.0.0.1:PORT`` followed by ``path``. Subclasses build their handler, then call this."""

    def __init__(self, handler: type, path: str = ""):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"
        # polled every 0.05 s for the stop request: shutdown() waits for the next poll (0.5 s by default)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
