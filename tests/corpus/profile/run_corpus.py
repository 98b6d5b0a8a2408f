"""Run `infradoctor profile` over the corpus in expected.json and judge each result against it.

Usage (from anywhere; one profile run at a time):
    python run_corpus.py [NAME ...] [--src DIR] [--out DIR] [--judge-only] [--overhead N] [--record DIR]

--src      the infradoctor source to profile with (default: this checkout's src)
--out      where prof-<name>.json / .log go (default: /tmp)
--judge-only  do not run, judge the JSON files already in --out
--overhead N  also time each unmodified non-server script N times with and without the profiler, interleaved
              (median wall seconds and median CPU seconds of the process tree)
--record DIR  also keep each run's evidence bundle (profile --save-evidence), gzipped, in DIR: the recorded
              corpus that tests/profile/test_corpus.py judges with today's rules (recorded/ here)

Verdicts per expected finding: correct, wrong-line, too-low, missed. Per other finding: false (forbidden),
acceptable, unexpected (not covered by expected.json: judge it by hand). The judge reads only the result JSON.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable
SEV = {"info": 0, "low": 1, "medium": 2, "high": 3, "critical": 4}


def load_expected():
    with open(os.path.join(HERE, "expected.json")) as f:
        return json.load(f)["scripts"]


def workload_argv(e):
    return [PY] + (e["argv"] if "argv" in e else [e["script"]] + e.get("args", []))


def run_one(name, e, src, out, record=None):
    env = dict(os.environ, PYTHONPATH=src, **e.get("env", {}))
    jpath = os.path.join(out, "prof-%s.json" % name)
    extra = ["--save-evidence", os.path.join(out, "evidence-%s.json" % name)] if record else []
    cmd = [PY, "-m", "infradoctor", "profile", "--no-store", "--json", jpath] + extra + e.get("profile_args", []) + ["--"] + workload_argv(e)
    t0 = time.monotonic()
    with open(os.path.join(out, "prof-%s.log" % name), "w") as log:
        rc = subprocess.call(cmd, cwd=HERE, env=env, stdout=log, stderr=subprocess.STDOUT)
    if record:
        save_recording(name, os.path.join(out, "evidence-%s.json" % name), record)
    return rc, time.monotonic() - t0


def save_recording(name, evidence_path, record_dir):
    """Keep a run's evidence bundle as regression data: gzipped, with the folder it was recorded in (so that a
    test can point the recorded source paths at this checkout's copy of the corpus)."""
    import gzip

    try:
        with open(evidence_path) as f:
            bundle = json.load(f)
    except (OSError, ValueError) as exc:
        print("  no evidence for %s: %s" % (name, exc))
        return
    bundle["recorded_root"] = HERE
    bundle["profile"].setdefault("cwd", HERE)  # the workloads run from this folder (relative source paths)
    os.makedirs(record_dir, exist_ok=True)
    with gzip.open(os.path.join(record_dir, "%s.json.gz" % name), "wt", compresslevel=9) as f:
        json.dump(bundle, f, separators=(",", ":"))


def wall(argv, env):
    """Wall seconds and CPU seconds (user + sys of the whole process tree that was waited for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    subprocess.call(argv, cwd=HERE, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return time.monotonic() - t0, cpu


def overhead(name, e, src, out, n):
    env_plain = dict(os.environ, **e.get("env", {}))
    env_plain.pop("PYTHONPATH", None)
    env_prof = dict(os.environ, PYTHONPATH=src, **e.get("env", {}))
    jpath = os.path.join(out, "prof-%s-overhead.json" % name)
    prof = [PY, "-m", "infradoctor", "profile", "--no-store", "--quiet", "--json", jpath, "--"] + workload_argv(e)
    plain, profd, plain_cpu, profd_cpu = [], [], [], []
    for _ in range(n):  # interleaved, so that background load hits both alike
        w, c = wall(workload_argv(e), env_plain)
        plain.append(w)
        plain_cpu.append(c)
        w, c = wall(prof, env_prof)
        profd.append(w)
        profd_cpu.append(c)
    med = statistics.median
    return {"plain_s": plain, "profiled_s": profd, "plain_median_s": med(plain), "profiled_median_s": med(profd),
            "ratio": med(profd) / med(plain),
            "plain_cpu_s": plain_cpu, "profiled_cpu_s": profd_cpu, "plain_cpu_median_s": med(plain_cpu),
            "profiled_cpu_median_s": med(profd_cpu), "cpu_ratio": med(profd_cpu) / med(plain_cpu)}


def _loc(f):
    loc = f.get("location") or {}
    return os.path.basename(loc.get("file") or ""), loc.get("line")


def judge(name, e, result):
    findings = result.get("findings", [])
    base = os.path.basename(e["script"])
    used = set()
    rows = []
    for x in e.get("expected", []):
        files = {base} | ({os.path.basename(x["also_ok_file"])} if x.get("also_ok_file") else set())
        lines = {x["line"]} | set(x.get("also_ok_lines", []))
        same = [i for i, f in enumerate(findings) if f["code"] == x["code"]]
        hit = [i for i in same if _loc(findings[i])[0] in files and _loc(findings[i])[1] in lines]
        if hit:
            i = hit[0]
            used.add(i)
            ok = SEV[findings[i]["severity"]] >= SEV[x.get("severity_at_least", "info")]
            rows.append((x["code"], "correct" if ok else "too-low", findings[i]["severity"], "%s:%s" % _loc(findings[i]), x["line"]))
        elif same:
            i = same[0]
            used.add(i)
            rows.append((x["code"], "wrong-line", findings[i]["severity"], "%s:%s" % _loc(findings[i]), x["line"]))
        else:
            rows.append((x["code"], "missed", "", "", x["line"]))
    for i, f in enumerate(findings):
        if i in used:
            continue
        verdict = "unexpected"
        for fb in e.get("forbidden", []):
            if "code" in fb and fb["code"] != f["code"]:
                continue
            if "model_class" in fb or "advice" in fb:
                continue
            if "severity" in fb and (f["severity"] != fb["severity"] or f["code"] in fb.get("except_codes", [])):
                continue
            if "severity_at_least" in fb and SEV[f["severity"]] < SEV[fb["severity_at_least"]]:
                continue
            verdict = "false"
            break
        if verdict == "unexpected":
            for a in e.get("acceptable", []):
                if a["code"] != f["code"]:
                    continue
                if "line" in a and _loc(f)[1] not in {a["line"]} | set(a.get("also_ok_lines", [])):
                    continue
                if "severity_at_most" in a and SEV[f["severity"]] > SEV[a["severity_at_most"]]:
                    continue
                verdict = "acceptable"
                break
        rows.append((f["code"], verdict, f["severity"], "%s:%s" % _loc(f), None))
    # model identification and advice checks
    modules = result.get("metrics", {}).get("model", {}).get("modules", [])
    notes = []
    for fb in e.get("forbidden", []):
        if "model_class" in fb and any(m.get("class") == fb["model_class"] for m in modules):
            notes.append("forbidden model class reported: %s" % fb["model_class"])
        if "advice" in fb and any(fb["advice"] in (f.get("fix") or "") for f in findings):
            notes.append("forbidden advice given: %s" % fb["advice"])
    want = e.get("model", {}).get("class")
    if want and not any(m.get("class") == want for m in modules):
        notes.append("model %s not identified" % want)
    return rows, modules, notes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="*")
    ap.add_argument("--src", default=os.path.join(HERE, "..", "..", "..", "src"))
    ap.add_argument("--out", default="/tmp")
    ap.add_argument("--judge-only", action="store_true")
    ap.add_argument("--overhead", type=int, default=0)
    ap.add_argument("--record", metavar="DIR", help="also keep each run's evidence, gzipped, in DIR (regression data)")
    a = ap.parse_args()
    scripts = load_expected()
    names = a.names or list(scripts)
    summary = {}
    report = {}
    for name in names:
        e = scripts[name]
        entry = {}
        if not a.judge_only:
            rc, secs = run_one(name, e, os.path.abspath(a.src), a.out, a.record)
            entry.update(rc=rc, wall_s=round(secs, 1))
            print("ran %s rc=%s %.1fs" % (name, rc, secs), flush=True)
        if a.overhead and e["variant_of"] is None and e["kind"] != "server":
            entry["overhead"] = overhead(name, e, os.path.abspath(a.src), a.out, a.overhead)
            o = entry["overhead"]
            print("  overhead %s: wall %.2fx (median %.1f / %.1f s; runs %s / %s), CPU %.2fx (median %.1f / %.1f s)" % (
                name, o["ratio"], o["profiled_median_s"], o["plain_median_s"],
                [round(x, 1) for x in o["profiled_s"]], [round(x, 1) for x in o["plain_s"]],
                o["cpu_ratio"], o["profiled_cpu_median_s"], o["plain_cpu_median_s"]), flush=True)
        report[name] = entry
        try:
            with open(os.path.join(a.out, "prof-%s.json" % name)) as f:
                result = json.load(f)
        except (OSError, ValueError) as exc:
            print("  no result for %s: %s" % (name, exc))
            continue
        rows, modules, notes = judge(name, e, result)
        entry.update(rows=rows, notes=notes,
                     modules=[{k: m.get(k) for k in ("class", "params", "calls", "batch_size", "grad_calls",
                                                      "unused_grad_calls", "train_mode_calls", "site")} for m in modules])
        print("== %s" % name)
        for m in entry["modules"]:
            print("   model %(class)s params=%(params)s calls=%(calls)s batch=%(batch_size)s grad=%(grad_calls)s "
                  "unused_grad=%(unused_grad_calls)s train_mode=%(train_mode_calls)s" % m)
        for r in rows:
            print("   %-5s %-10s %-8s at %-32s expected line %s" % r)
            summary.setdefault(r[0], {}).setdefault(r[1], 0)
            summary[r[0]][r[1]] += 1
        for n in notes:
            print("   NOTE", n)
    print("\nper code:")
    kinds = ["correct", "wrong-line", "too-low", "missed", "false", "unexpected", "acceptable"]
    print("code  " + " ".join("%10s" % k for k in kinds))
    for code in sorted(summary):
        print("%-5s " % code + " ".join("%10d" % summary[code].get(k, 0) for k in kinds))
    with open(os.path.join(a.out, "corpus-report.json"), "w") as f:
        json.dump({"report": report, "summary": summary}, f, indent=1)


if __name__ == "__main__":
    main()
