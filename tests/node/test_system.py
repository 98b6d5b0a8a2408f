"""The host probe on this machine: real CPU window, memory, disks, fds, and TCP sockets made for the test."""

from __future__ import annotations

import os
import socket
import threading

import psutil

from infradoctor.node.evidence import NodeEvidence
from infradoctor.node.expect import probe_expectation
from infradoctor.node.rules import NodeOptions, n009_socket_exhaustion
from infradoctor.node.system import paths_in_use, probe_disks, probe_fds, probe_host, probe_sockets

from .builders import evidence


def test_probe_host_uses_the_injected_window() -> None:
    slept: list[float] = []
    host, notes = probe_host(window_s=0.25, sleep=slept.append)
    assert slept == [0.25]
    cpu = host.cpu
    assert cpu.logical_cores >= 1 and 1 <= cpu.usable_cores <= cpu.logical_cores
    assert len(cpu.per_core_pct) == cpu.logical_cores
    assert all(0.0 <= v <= 100.0 for v in cpu.per_core_pct)
    assert host.memory.total_bytes > host.memory.available_bytes > 0
    assert host.top_rss and host.top_rss[0].rss_bytes >= host.top_rss[-1].rss_bytes
    assert all(n.source.startswith("host.") for n in notes)


def test_disks_include_root_and_the_paths_in_use(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    assert paths_in_use()["HF_HOME"] == str(tmp_path)
    disks = probe_disks()
    root = [d for d in disks if d.mountpoint == "/"]
    assert root and root[0].total_bytes > 0 and 0.0 <= root[0].used_fraction <= 1.0
    assert any("HF_HOME" in d.why for d in disks)
    assert len({d.mountpoint for d in disks}) == len(disks)


def test_open_files_are_counted(tmp_path) -> None:
    before = probe_fds()
    handles = [open(tmp_path / f"f{i}", "w") for i in range(40)]  # noqa: SIM115 - held open on purpose
    try:
        during = probe_fds()
    finally:
        for handle in handles:
            handle.close()
    assert during.process_open is not None and before.process_open is not None
    assert during.process_open >= before.process_open + 40
    assert during.process_soft_limit is None or during.process_soft_limit > during.process_open


def make_time_wait(count: int) -> int:
    """Open and close ``count`` loopback connections, client side first, leaving TIME_WAIT sockets behind."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(count)
    port = server.getsockname()[1]
    accepted: list[socket.socket] = []

    def accept() -> None:
        for _ in range(count):
            conn, _ = server.accept()
            accepted.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    for _ in range(count):
        client = socket.create_connection(("127.0.0.1", port), timeout=5)
        client.close()  # the active closer keeps TIME_WAIT
    thread.join(timeout=10)
    for conn in accepted:
        conn.close()
    server.close()
    return port


def test_time_wait_sockets_are_counted_and_judged() -> None:
    port = make_time_wait(60)
    sockets = probe_sockets()
    # other work on this machine opens and expires sockets too; ours stay in TIME_WAIT for about 60 s
    ours = [c for c in psutil.net_connections("tcp")
            if c.status == psutil.CONN_TIME_WAIT and c.raddr and c.raddr.port == port]
    assert len(ours) >= 50
    assert sockets.time_wait >= len(ours)
    assert sockets.ephemeral_range_size and sockets.ephemeral_range_size > 1000
    assert sockets.ephemeral_ports_in_use >= len(ours)
    host = evidence().host
    assert host is not None
    ev: NodeEvidence = evidence(host=host.__class__(**{**host.__dict__, "sockets": sockets}))
    strict = NodeOptions(thresholds={"N009.TIME_WAIT_FRACTION": 40 / sockets.ephemeral_range_size})
    (finding,) = n009_socket_exhaustion.check(ev, strict)
    assert finding.evidence["tcp_by_state"]["TIME_WAIT"] == sockets.time_wait
    assert n009_socket_exhaustion.check(ev, NodeOptions()) == [] or sockets.time_wait > 14000


def test_expectation_reads_injected_paths(tmp_path) -> None:
    (tmp_path / "nvidia0").write_text("")
    modules = tmp_path / "modules"
    modules.write_text("nvidia_uvm 1 0 - Live 0x0\nnvidia 5 1 nvidia_uvm, Live 0x0\n")
    version = tmp_path / "version"
    version.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.90.07\n")
    found = probe_expectation({"CUDA_VISIBLE_DEVICES": "0,1"}, dev_glob=str(tmp_path / "nvidia[0-9]*"),
                              modules_file=str(modules), version_file=str(version))
    assert found.device_nodes == (str(tmp_path / "nvidia0"),) and found.driver_loaded
    assert found.driver_version_file.endswith("550.90.07")
    assert len(found.reasons) == 3
    nothing = probe_expectation({}, dev_glob=str(tmp_path / "none*"), modules_file=str(tmp_path / "x"),
                                version_file=str(tmp_path / "y"))
    assert nothing.reasons == ()
    only_uvm = tmp_path / "m2"
    only_uvm.write_text("nvidia_uvm 1 0 - Live 0x0\n")
    assert not probe_expectation({}, dev_glob="/nonexistent*", modules_file=str(only_uvm),
                                 version_file=str(tmp_path / "y")).driver_loaded
    assert os.path.exists(modules)


def test_a_mount_that_does_not_answer_is_skipped_with_a_note(monkeypatch) -> None:
    import threading

    import psutil

    from infradoctor.node import system

    release = threading.Event()
    real_usage = psutil.disk_usage

    def hanging_usage(path):  # a stale NFS mount: statvfs never returns
        if path == "/":
            release.wait(5)
        return real_usage(path)

    monkeypatch.setattr(system.psutil, "disk_usage", hanging_usage)
    notes: list = []
    try:
        disks = system.probe_disks(notes=notes, timeout_s=0.2)
    finally:
        release.set()
    assert "/" not in {d.mountpoint for d in disks}
    assert any("/ did not answer" in n.message for n in notes)
