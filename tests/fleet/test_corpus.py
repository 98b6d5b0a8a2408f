"""The recorded expositions of tests/corpus/metrics, served as recorded to a real Prometheus, read by fleet.

Expected per file (what the recordings hold, read by hand from them):

- ``kube-state-metrics-pod-test-wants.prom``: containers waiting in CrashLoopBackOff (ns3/pod3), ImagePullBackOff
  (ns4/pod4), ErrImagePull (ns5/pod5), CreateContainerConfigError (ns7/pod7) -> N014; ContainerCreating (ns2/pod2)
  is normal; the OOMKilled and DeadlineExceeded terminations of pod6/pod7 come with no restart in the window (the
  counters are flat), so they are not counted as restarts; ns2/pod2 is not ready (N014, with the crash loops of
  the same unscheduled pods). A second kube-state-metrics target serves the same recording with one change: ns1/pod1
  (which requests 1 ``nvidia_com_gpu``) in phase Pending instead of Running -> N016.
- ``node-exporter-e2e-fixture-trimmed.prom``: no MemAvailable (the fixture's meminfo predates it): free + cached
  + buffers = 1.21 of 3.83 GB; swap 1.06 of 4.29 GB used; CPU counters that never move give no utilisation (not
  "100% busy"); nothing to find.
- ``dcgm-exporter-datadog-fixture-t4.prom``: idle T4s (clock event reasons 1 = idle only), Xid 0, no ECC fields:
  nothing to find, ECC reported as not collected.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

import pytest

from tests.conftest import validate_result
from tests.fleet.dcgm_exporter import dcgm_exporter, text_exporter
from tests.fleet.history import CORPUS
from tests.fleet.servers import prometheus
from tests.fleet.test_live import _targets_up

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def test_recorded_expositions(tmp_path: Path, cli) -> None:
    from infradoctor.procs import wait_until

    ksm = (CORPUS / "kube-state-metrics-pod-test-wants.prom").read_text(encoding="utf-8")
    node = (CORPUS / "node-exporter-e2e-fixture-trimmed.prom").read_text(encoding="utf-8")
    with contextlib.ExitStack() as stack:
        pending = ksm.replace('phase="Pending",pod="pod1",uid="uid1"} 0', 'phase="Pending",pod="pod1",uid="uid1"} 1')
        pending = pending.replace('phase="Running",pod="pod1",uid="uid1"} 1', 'phase="Running",pod="pod1",uid="uid1"} 0')
        assert pending.count("} 1\n") == ksm.count("} 1\n")  # one phase moved, nothing else
        ports = {"ksm": stack.enter_context(text_exporter(ksm)), "node": stack.enter_context(text_exporter(node)),
                 "dcgm": stack.enter_context(dcgm_exporter("t4-node")),
                 "ksm-pending": stack.enter_context(text_exporter(pending))}
        targets = [("ksm", f"127.0.0.1:{ports['ksm']}", 1.0, "ksm:8080"),
                   ("ksm", f"127.0.0.1:{ports['ksm-pending']}", 1.0, "ksm-b:8080"),
                   ("node", f"127.0.0.1:{ports['node']}", 1.0, "t4-node:9100"),
                   ("dcgm", f"127.0.0.1:{ports['dcgm']}", 1.0, "t4-node:9400")]
        prom = stack.enter_context(prometheus(tmp_path, scrape=targets))
        assert wait_until(lambda: _targets_up(prom.url) == len(targets), timeout=30)
        time.sleep(12)  # pods count as not ready / Pending after half the 20 s window
        out = tmp_path / "corpus.json"
        done = cli("fleet", "--prometheus", prom.url, "--window", "20s", "--step", "1s", "--json", str(out))
    assert done.exit_code == 0, done.stderr
    data = json.loads(out.read_text())
    validate_result(data)
    restarts = [f for f in data["findings"] if f["code"] == "N014"]
    assert len(restarts) == 1 and restarts[0]["evidence"]["node"] == "(node unknown)"  # the test pods are unscheduled
    assert sorted(c["container"] for c in restarts[0]["evidence"]["top"]) == [
        "ns3/pod3/container4", "ns4/pod4/container5", "ns5/pod5/container6", "ns7/pod7/container8"]
    assert restarts[0]["severity"] == "high"
    assert restarts[0]["evidence"]["not_ready"] == ["ns2/pod2"]
    pending_gpu = next(f for f in data["findings"] if f["code"] == "N016")
    assert pending_gpu["evidence"]["pods"] == ["ns1/pod1 (1 GPU)"] and pending_gpu["severity"] == "medium"
    assert {f["code"] for f in data["findings"]} == {"N014", "N016"}  # idle T4s and a quiet host: nothing else
    metrics = data["metrics"]
    assert metrics["containers"]["restarts"] == 0 and metrics["containers"]["oom_killed"] == []
    assert metrics["containers"]["not_ready"] == ["ns2/pod2"]
    assert metrics["containers"]["pending_gpu_pods"] == ["ns1/pod1"]
    row = next(r for r in metrics["nodes"] if r["node"] == "t4-node")
    assert row["cpu_util_pct"] is None  # counters that never move: unknown, not 100% busy
    assert row["mem_available_pct"] == pytest.approx(100 * (2.30883328e8 + 9.53229312e8 + 2.256896e7) / 3.831959552e9,
                                                     abs=0.1)
    assert "ECC errors not collected" in " ".join(e["message"] for e in data["errors"])
