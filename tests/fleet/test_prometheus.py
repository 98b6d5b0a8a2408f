"""``infradoctor fleet`` against a real Prometheus over a backfilled TSDB (promtool create-blocks-from openmetrics).

The history (tests/fleet/history.py) is built on the recorded dcgm-exporter, node_exporter and kube-state-metrics
expositions: 8 nodes x 4 T4 GPUs, one hour, with node-03 GPU 2 overheating and throttling from 40% of the window,
node-05 GPU 0 reporting Xid 79 from 60%, node-06 running out of RAM from 70% and its pod OOM-killed, and node-07's
dcgm-exporter gone before the window. Every other node is healthy and must stay without findings.
"""

from __future__ import annotations

import json
import math
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from infradoctor.fleet.alerts import AlertRule, Baseline, alert_rules, render_rules
from infradoctor.fleet.evidence import Window
from infradoctor.fleet.run import FleetOptions, run
from infradoctor.fleet.window import make_window
from infradoctor.procs import free_port
from infradoctor.report.html import HtmlRenderer
from infradoctor.report.markdown import MarkdownRenderer
from infradoctor.report.present.fleet import timeline_chart
from infradoctor.result import Result
from tests.conftest import validate_result
from tests.fleet.faults import Faults, fault_proxy
from tests.fleet.history import Fleet, Sick
from tests.fleet.servers import Prometheus, backfill, prometheus
from tests.support.servers import require_binary

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def fleet_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Prometheus, Fleet]]:
    tmp = tmp_path_factory.mktemp("fleet")
    end = float(int(time.time()) - 600)
    fleet = Fleet(start=end - 3600, end=end)
    data, samples = backfill(fleet, tmp)
    assert samples > 100_000
    with prometheus(tmp, data=data) as prom:
        yield prom, fleet


def _run(url: str, fleet: Fleet, **kwargs: object) -> object:
    window = make_window(fleet.end, window="1h", end=str(fleet.end))
    return run(FleetOptions(prometheus=url, window=window, **kwargs))  # type: ignore[arg-type]


def test_the_sick_nodes_and_only_them(fleet_prometheus: tuple[Prometheus, Fleet], tmp_path: Path, cli) -> None:
    prom, fleet = fleet_prometheus
    sick = Sick()
    changes = tmp_path / "changes.txt"
    deploy = fleet.at(sick.hot_at) - 300
    changes.write_text(f"{fleet.start - 7200:.0f} old change\n{deploy:.0f} deploy vllm 0.6.3\n", encoding="utf-8")
    out = tmp_path / "fleet.json"
    done = cli("fleet", "--prometheus", prom.url, "--window", "1h", "--to", f"{fleet.end:.0f}", "--changes",
               str(changes), "--json", str(out))
    assert done.exit_code == 0, done.stderr
    data = json.loads(out.read_text())
    validate_result(data)
    found = {(f["code"], f["location"]["file"]) for f in data["findings"]}
    assert found == {
        ("N001", "node-05 GPU 0"), ("N003", "node-03 GPU 2"), ("N013", "node-03 GPU 2"), ("N013", "node-05 GPU 0"),
        ("N006", "node-06"), ("N014", "node-06"), ("N015", "node-03 GPU 2"),
    }
    by_code = {f["code"]: f for f in data["findings"]}
    assert by_code["N001"]["evidence"]["xid"] == 79 and by_code["N001"]["severity"] == "critical"
    assert set(by_code["N003"]["evidence"]["reasons"]) == {"sw_thermal_slowdown", "hw_thermal_slowdown"}
    assert by_code["N014"]["evidence"]["oom_killed"] == ["serving/vllm-6/server"]
    onset = by_code["N015"]["evidence"]
    assert onset["preceding_change"]["description"] == "deploy vllm 0.6.3"
    first = time.mktime(time.strptime(onset["first_bad"], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
    assert fleet.at(sick.hot_at) <= first <= fleet.at(sick.hot_at) + 2 * fleet.interval_s
    metrics = data["metrics"]
    assert metrics["headline"]["gpus"] == 28 and metrics["headline"]["nodes"] == 8
    rows = {row["node"]: row for row in metrics["nodes"]}
    assert rows["node-07"]["health"] == "unknown" and rows["node-07"]["absent"] == ["dcgm-exporter"]
    assert {n for n, r in rows.items() if r["health"] == "ok"} == {"node-00", "node-01", "node-02", "node-04"}
    errors = " | ".join(e["message"] for e in data["errors"])
    assert "no dcgm-exporter series for 1 of 8 nodes in the window: node-07" in errors
    assert "ECC errors not collected for 28 of 28 GPUs" in errors  # not in dcgm-exporter's default counters
    assert metrics["timeline"] and metrics["timeline"][-1]["name"].startswith("fleet median")
    assert "Fleet, worst first" in done.stdout and "node-05" in done.stdout
    result = Result.from_dict(data)
    html = HtmlRenderer().render([result])
    assert "Fleet, worst first" in html and "node-05 GPU 0" in html and "Evidence coverage" in html
    assert "| node-06 |" in MarkdownRenderer().render([result])
    svg = timeline_chart(result)
    assert svg.startswith("<svg") and "fleet median" in svg


def test_selector_scopes_every_query(fleet_prometheus: tuple[Prometheus, Fleet]) -> None:
    prom, fleet = fleet_prometheus
    result = _run(prom.url, fleet, selector='{instance=~"node-0[0-2]:.*"}')
    metrics = result.metrics  # type: ignore[attr-defined]
    assert metrics["headline"]["gpus"] == 12
    assert result.findings == ()  # type: ignore[attr-defined]


def test_prometheus_down_says_nothing_is_known(cli, tmp_path: Path) -> None:
    out = tmp_path / "down.json"
    done = cli("fleet", "--prometheus", f"http://127.0.0.1:{free_port()}", "--json", str(out))
    assert done.exit_code == 3
    data = json.loads(out.read_text())
    validate_result(data)
    assert data["findings"] == [] and data["metrics"]["prometheus"]["reachable"] is False
    assert "no evidence gathered" in data["errors"][0]["message"]


def test_failed_and_partial_queries_leave_evidence_absent(fleet_prometheus: tuple[Prometheus, Fleet]) -> None:
    prom, fleet = fleet_prometheus
    faults = Faults(fail_pattern=r"DCGM_FI_DEV_XID_ERRORS|node_memory_MemAvailable", warn_pattern=r"DCGM_FI_DEV_GPU_TEMP")
    with fault_proxy(prom.url, faults) as url:
        result = _run(url, fleet)
    codes = {f.code for f in result.findings}  # type: ignore[attr-defined]
    assert "N001" not in codes and "N006" not in codes  # their evidence is unknown, not healthy ...
    assert "N003" in codes and "N014" in codes  # ... and the rest is still judged
    messages = [e.message for e in result.errors]  # type: ignore[attr-defined]
    assert any("store gateway unavailable; GPU xid unknown" in m for m in messages)
    assert any("partial answer: remote store eu-1" in m for m in messages)
    assert any("host mem_available_bytes unknown" in m for m in messages)


def test_slow_prometheus_times_out_per_query(fleet_prometheus: tuple[Prometheus, Fleet]) -> None:
    prom, fleet = fleet_prometheus
    with fault_proxy(prom.url, Faults(delay_s=1.5)) as url:
        started = time.perf_counter()
        result = _run(url, fleet, timeout_s=0.5)
    assert time.perf_counter() - started < 10
    assert result.metrics["prometheus"]["reachable"] is False  # type: ignore[attr-defined]
    assert "timeout" in result.errors[0].message  # type: ignore[attr-defined]


def test_bearer_token_is_sent_and_never_stored(fleet_prometheus: tuple[Prometheus, Fleet], cli, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch, isolated_store: Path) -> None:
    prom, fleet = fleet_prometheus
    secret = "tok-4f9a1c0e2b7d-very-secret"
    faults = Faults(require_auth=f"Bearer {secret}")
    monkeypatch.setenv("INFRADOCTOR_PROMETHEUS_TOKEN", secret)
    out = tmp_path / "auth.json"
    with fault_proxy(prom.url, faults) as url:
        done = cli("fleet", "--prometheus", url, "--window", "1h", "--to", f"{fleet.end:.0f}", "--json", str(out))
    assert done.exit_code == 0 and faults.seen_auth and set(faults.seen_auth) == {f"Bearer {secret}"}
    assert json.loads(out.read_text())["target"]["auth_kind"] == "bearer"
    stored = "".join(p.read_text(errors="replace") for p in isolated_store.rglob("*") if p.is_file())
    assert secret not in out.read_text() and secret not in stored and secret not in done.stdout + done.stderr
    monkeypatch.delenv("INFRADOCTOR_PROMETHEUS_TOKEN")
    with fault_proxy(prom.url, faults) as url:
        refused = _run(url, fleet)
    assert "401" in " ".join(e.message for e in refused.errors)  # type: ignore[attr-defined]


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([require_binary("promtool"), *args], capture_output=True, text=True, timeout=120)


def test_alert_rules_from_a_healthy_baseline(fleet_prometheus: tuple[Prometheus, Fleet], cli, tmp_path: Path) -> None:
    prom, fleet = fleet_prometheus
    rules = tmp_path / "rules.yml"
    done = cli("fleet", "--prometheus", prom.url, "--window", "1h", "--to", f"{fleet.end:.0f}", "--no-store",
               "--quiet", "--emit-alert-rules", str(rules), "--baseline-from", f"{fleet.start - 3500:.0f}",
               "--baseline-to", f"{fleet.start - 700:.0f}")
    assert done.exit_code == 0, done.stderr
    check = _promtool("check", "rules", str(rules))
    assert check.returncode == 0, check.stdout + check.stderr
    text = rules.read_text()
    hot = next(line for line in text.splitlines() if "DCGM_FI_DEV_GPU_TEMP >" in line)
    limit = float(hot.rsplit(">", 1)[1])
    assert 64 + 8 - 1 < limit < 64 + 8 + 1  # the baseline's p99 (61 +- 3 C) plus the margin
    _unit_test_rules(rules, tmp_path, limit)


def _unit_test_rules(rules: Path, tmp_path: Path, hot_limit: float) -> None:
    """``promtool test rules``: the alerts fire for the series that break the rules and stay quiet otherwise."""
    gpu = 'instance="gpu-1:9400",gpu="{g}",modelName="Tesla T4",UUID="GPU-{g}"'
    hot = math.ceil(hot_limit) + 5
    lines = rules.read_text().splitlines()
    at = lines.index("      - alert: InfradoctorGpuHot")
    hot_threshold = next(line for line in lines[at:] if "threshold:" in line).split("threshold: ", 1)[1]
    tests = tmp_path / "rules_test.yml"
    tests.write_text(textwrap.dedent(f"""
        rule_files: [{rules.name}]
        evaluation_interval: 1m
        tests:
          - interval: 1m
            input_series:
              - series: 'DCGM_FI_DEV_XID_ERRORS{{{gpu.format(g=0)}}}'
                values: '0 0 0 79 79 79 79 79'
              - series: 'DCGM_FI_DEV_XID_ERRORS{{{gpu.format(g=1)}}}'
                values: '0x7'
              - series: 'DCGM_FI_DEV_GPU_TEMP{{{gpu.format(g=1)}}}'
                values: '60 60 {hot}x20'
              - series: 'DCGM_FI_DEV_GPU_TEMP{{{gpu.format(g=0)}}}'
                values: '{hot_limit - 5:g}x22'
              - series: 'node_memory_MemAvailable_bytes{{instance="gpu-1:9100"}}'
                values: '50e9 50e9 2e9x10'
              - series: 'node_memory_MemTotal_bytes{{instance="gpu-1:9100"}}'
                values: '100e9x12'
            alert_rule_test:
              - eval_time: 4m
                alertname: InfradoctorGpuXid
                exp_alerts:
                  - exp_labels: {{severity: critical, infradoctor_code: N001, instance: "gpu-1:9400", gpu: "0",
                                  modelName: "Tesla T4", UUID: "GPU-0"}}
                    exp_annotations:
                      summary: "GPU 0 on gpu-1:9400 reported Xid 79"
                      threshold: "any new Xid (DCGM_FI_DEV_XID_ERRORS holds the last Xid value)"
                      runbook: "infradoctor rules N001"
              - eval_time: 20m
                alertname: InfradoctorGpuXid
                exp_alerts: []
              - eval_time: 15m
                alertname: InfradoctorGpuHot
                exp_alerts:
                  - exp_labels: {{severity: warning, infradoctor_code: N013, instance: "gpu-1:9400", gpu: "1",
                                  modelName: "Tesla T4", UUID: "GPU-1"}}
                    exp_annotations:
                      summary: "GPU 1 on gpu-1:9400 at {hot} C"
                      threshold: {hot_threshold}
                      runbook: "infradoctor rules N013"
              - eval_time: 8m
                alertname: InfradoctorHostMemoryLow
                exp_alerts:
                  - exp_labels: {{severity: critical, infradoctor_code: N006, instance: "gpu-1:9100"}}
                    exp_annotations:
                      summary: "gpu-1:9100: only 2% of RAM available"
                      threshold: "N006 AVAILABLE_FRACTION = 0.1"
                      runbook: "infradoctor rules N006"
    """), encoding="utf-8")
    outcome = _promtool("test", "rules", str(tests))
    assert outcome.returncode == 0, outcome.stdout + outcome.stderr


def test_alert_rules_without_a_baseline_use_the_rules_defaults(tmp_path: Path) -> None:
    empty = Baseline(Window(0, 3600, 30))
    text = render_rules(alert_rules(empty, 'cluster="a"'))
    path = tmp_path / "rules.yml"
    path.write_text(text, encoding="utf-8")
    check = _promtool("check", "rules", str(path))
    assert check.returncode == 0, check.stdout + check.stderr
    assert "DCGM_FI_DEV_GPU_TEMP{cluster=\"a\"} > 85.0" in text and "InfradoctorServerQueue" not in text
    assert text.count('cluster="a"') >= 20



def _expected(rule: AlertRule, labels: dict[str, str], value: str = "", percent: str = "") -> dict[str, object]:
    """One alert as ``promtool test rules`` expects it: the rule's labels and its annotations filled in."""
    summary = rule.summary.replace("{{ $value | humanizePercentage }}", percent).replace("{{ $value }}", value)
    for key, text in labels.items():
        summary = summary.replace(f"{{{{ $labels.{key} }}}}", text)
    return {"exp_labels": {"severity": rule.severity, "infradoctor_code": rule.code, **labels},
            "exp_annotations": {"summary": summary, "threshold": rule.threshold,
                                "runbook": f"infradoctor rules {rule.code}"}}


def test_alert_rules_fire_for_ecc_throttling_stragglers_routers_and_queues(tmp_path: Path) -> None:
    """``promtool test rules`` over series that break each rule, beside series that must stay quiet: ECC,
    throttling (DCGM 3 and 4 names), stragglers, router 5xx and retries, router and server queues, rejections."""
    rules = {r.name: r for r in alert_rules(Baseline(Window(0, 3600, 30), temp_p99_c=70.0, queue_p99=4.0))}
    (tmp_path / "rules.yml").write_text(render_rules(list(rules.values())), encoding="utf-8")

    def gpu(node: int, index: int, model: str = "NVIDIA H100 80GB HBM3") -> dict[str, str]:
        return {"instance": f"gpu-{node}:9400", "gpu": str(index), "modelName": model, "UUID": f"GPU-{node}-{index}"}

    def series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
        return {"series": name + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}", "values": values}

    envoy = {"instance": "router-1:9901", "envoy_cluster_name": "models"}
    calm = {"instance": "router-9:9901", "envoy_cluster_name": "models"}
    ha = {"instance": "router-2:8404", "proxy": "be"}
    vllm, idle_vllm = {"instance": "gpu-4:8000", "model_name": "llama"}, {"instance": "gpu-5:8000", "model_name": "llama"}
    inputs = [
        series("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", gpu(1, 0), "0 0 0 1x17"),  # one uncorrectable error at 3m
        series("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", gpu(1, 1), "0x20"),
        series("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", gpu(2, 0), "72x20"),  # 0x48: HW slowdown + HW thermal
        series("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", gpu(2, 1), "1x20"),  # idle: not throttled
        series("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", gpu(2, 2), "8x20"),  # DCGM 4 name, HW slowdown
        *(series("DCGM_FI_DEV_SM_CLOCK", gpu(3, i), "1980x20") for i in range(3)),
        series("DCGM_FI_DEV_SM_CLOCK", gpu(3, 3), "1400x20"),  # busy and 29% below its peers' median
        series("DCGM_FI_DEV_SM_CLOCK", gpu(3, 4), "1400x20"),  # as slow, but idle: its clocks are not a fault
        *(series("DCGM_FI_DEV_GPU_UTIL", gpu(3, i), "90x20") for i in range(4)),
        series("DCGM_FI_DEV_GPU_UTIL", gpu(3, 4), "5x20"),
        series("envoy_cluster_upstream_rq_total", envoy, "0+100x20"),
        series("envoy_cluster_upstream_rq_xx", {**envoy, "envoy_response_code_class": "5"}, "0+10x20"),
        series("envoy_cluster_upstream_rq_retry", envoy, "0+20x20"),
        series("envoy_cluster_upstream_rq_pending_active", envoy, "3x20"),
        series("envoy_cluster_upstream_rq_pending_overflow", envoy, "0+2x20"),
        series("envoy_cluster_upstream_rq_total", calm, "0+100x20"),
        series("envoy_cluster_upstream_rq_xx", {**calm, "envoy_response_code_class": "5"}, "0x20"),
        series("envoy_cluster_upstream_rq_retry", calm, "0+1x20"),
        series("envoy_cluster_upstream_rq_pending_active", calm, "0 2 0 2 0 2 0 2 0 2 0 2 0 2 0 2 0 2 0 2"),
        series("envoy_cluster_upstream_rq_pending_overflow", calm, "0x20"),
        series("haproxy_backend_http_requests_total", ha, "0+100x20"),
        series("haproxy_backend_http_responses_total", {**ha, "code": "5xx"}, "0+5x20"),
        series("haproxy_backend_current_queue", ha, "0 0 4x18"),
        series("vllm:num_requests_waiting", vllm, "20x20"),  # the baseline's p99 was 4: the limit is 8
        series("vllm:num_requests_waiting", idle_vllm, "3x20"),
    ]
    cases = [
        (5, "InfradoctorGpuEccUncorrectable", [_expected(rules["InfradoctorGpuEccUncorrectable"], gpu(1, 0))]),
        (16, "InfradoctorGpuEccUncorrectable", []),  # nothing new in the last 10 minutes
        (12, "InfradoctorGpuThrottled", [_expected(rules["InfradoctorGpuThrottled"], gpu(2, 0))]),
        (12, "InfradoctorGpuThrottledDcgm4", [_expected(rules["InfradoctorGpuThrottledDcgm4"], gpu(2, 2))]),
        (5, "InfradoctorGpuThrottled", []),  # not yet for 10 minutes
        (16, "InfradoctorGpuStraggler", [_expected(rules["InfradoctorGpuStraggler"], gpu(3, 3), "1400")]),
        (12, "InfradoctorRouterErrors", [_expected(rules["InfradoctorRouterErrors"], envoy, percent="10%")]),
        (12, "InfradoctorRouterRetries", [_expected(rules["InfradoctorRouterRetries"], envoy, percent="20%")]),
        (12, "InfradoctorHaproxyErrors", [_expected(rules["InfradoctorHaproxyErrors"], ha, percent="5%")]),
        (12, "InfradoctorRouterQueue", [_expected(rules["InfradoctorRouterQueue"], envoy, "3")]),
        (8, "InfradoctorRouterQueue", []),
        (13, "InfradoctorHaproxyQueue", [_expected(rules["InfradoctorHaproxyQueue"], ha, "4")]),
        (6, "InfradoctorRouterRejected", [_expected(rules["InfradoctorRouterRejected"], envoy, "10")]),
        (12, "InfradoctorServerQueue", [_expected(rules["InfradoctorServerQueue"], vllm, "20")]),
    ]
    tests = {"rule_files": ["rules.yml"], "evaluation_interval": "1m",
             "tests": [{"interval": "1m", "input_series": inputs,
                        "alert_rule_test": [{"eval_time": f"{minute}m", "alertname": name, "exp_alerts": alerts}
                                            for minute, name, alerts in cases]}]}
    (tmp_path / "rules_test.yml").write_text(json.dumps(tests, indent=1), encoding="utf-8")  # JSON is YAML
    outcome = _promtool("test", "rules", str(tmp_path / "rules_test.yml"))
    assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    assert {r.code for r in rules.values()} >= {"N002", "N003", "N013", "S006", "R005", "R009", "R013", "S010"}
