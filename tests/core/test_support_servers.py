import urllib.request
from pathlib import Path

import pytest

from infradoctor.procs import wait_until
from tests.support.servers import haproxy, nginx, python_server

BACKEND = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class H(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Served-By", f"127.0.0.1:{sys.argv[1]}")
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


@pytest.mark.integration
def test_nginx_and_haproxy_front_a_real_backend(tmp_path: Path) -> None:
    with python_server(BACKEND, tmp_path) as backend:
        nginx_conf = f"""
    access_log {{prefix}}/access.log;
    upstream app {{ server 127.0.0.1:{backend.port}; }}
    server {{ listen 127.0.0.1:{{port}}; location / {{ proxy_pass http://app; }} }}
"""
        with nginx(nginx_conf, tmp_path) as router:
            with urllib.request.urlopen(router.url + "/x", timeout=5) as resp:
                assert resp.status == 200 and resp.headers["X-Served-By"].endswith(str(backend.port))
            # the router writes its log line after the response reached the client: poll for it (bounded)
            assert wait_until(lambda: "GET /x" in router.log_text(), timeout=15), router.log_text()
        assert router.log == tmp_path / f"nginx_{router.port}" / "access.log"
        hap_conf = f"""
frontend fe
    bind 127.0.0.1:{{port}}
    default_backend be
backend be
    server b1 127.0.0.1:{backend.port}
"""
        with haproxy(hap_conf, tmp_path) as router:
            with urllib.request.urlopen(router.url + "/y", timeout=5) as resp:
                assert resp.status == 200
            assert wait_until(lambda: "GET /y" in router.log_text(), timeout=15), router.log_text()
