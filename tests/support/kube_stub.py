"""kubectl's own parsing of a `kubectl label|taint node NODE ...` line, without a cluster: an API
server stub that answers discovery and GET of any Node (no PATCH: the lines run with
--dry-run=client, so kubectl applies the label or taint itself and prints the Node it would send)."""
from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="no kubectl (Debian's kubernetes-client)")
DISCOVERY = {
    "/version": {"major": "1", "minor": "32", "gitVersion": "v1.32.0"},
    "/api": {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []},
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": []},
    "/api/v1": {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
        {"name": "nodes", "singularName": "node", "namespaced": False, "kind": "Node",
         "verbs": ["get", "list", "patch", "update"]}]},
}


class _Nodes(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        path = self.path.split("?", 1)[0]
        body = DISCOVERY.get(path)
        if body is None and path.startswith("/api/v1/nodes/"):
            body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": path.rsplit("/", 1)[1]}}
        data = json.dumps(body or {"kind": "Status", "code": 404}).encode()
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@contextmanager
def api_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Nodes)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def dry_run(line: str, server: str) -> subprocess.CompletedProcess:
    """The line as kubectl runs it, against the stub, printing the Node it would send."""
    words = shlex.split(line)
    assert words[0] == "kubectl", line
    return subprocess.run([KUBECTL, f"--server={server}", "--kubeconfig=/dev/null", *words[1:],
                           "--dry-run=client", "-o", "json"], capture_output=True, text=True, timeout=60)


def script_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
