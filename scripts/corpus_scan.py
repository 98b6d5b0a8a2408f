#!/usr/bin/env python3
"""Run `infradoctor scan` over the real-world corpus and measure it against the judgements.

The corpus is listed in tests/corpus/scan/repos.json (repository, pinned commit, kind, optional sub-paths). Each
repository must already be mirrored as a bare git directory under /work/.mirror/<owner>+<name>/repo (the session's
`fetch` tool brings it); repositories without a mirror are skipped and said so. The pinned commit is extracted (Python
and launcher files only; objects the snapshot lacks are skipped) into a cache directory, then scanned with the
interpreter and PYTHONPATH given (so the frozen baseline and the live code can be compared).

The findings are matched by (file, line, code) against tests/corpus/scan/judgements/<owner>__<name>.csv
(`file,line,code,verdict,reason`; verdict true | false | debatable). Hits of rules that were sampled and deliberately
left unjudged are listed in unsampled.csv (`repo,file,line,code`) and counted apart from new, unjudged hits. Places
where a rule should fire but did not are in misses.csv (`repo,file,line,code,reason`); the script reports which are
still missed, and the recall on the code read by hand (repositories marked `read_by_hand` in repos.json: misses
found, and hits ever judged true of the codes the misses are about, still reported). With `--sample N`, rules with
more than N hits also get their precision on the seeded sample of N (the judged figure for those rules).

Examples:
    scripts/corpus_scan.py --python .venv/bin/python --pythonpath /work/baseline/src --json /tmp/baseline.json
    scripts/corpus_scan.py --pythonpath src --only karpathy/nanoGPT
    scripts/corpus_scan.py --pythonpath src --runs 2          # scan twice and report any difference
    scripts/corpus_scan.py --pythonpath src --set held-out-2  # only the second held-out set
    scripts/corpus_scan.py --pythonpath /work/baseline/src --sample 40 --seed 15   # print the seeded sample
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus" / "scan"
VERDICTS = ("true", "false", "debatable")
# what is extracted from a snapshot: the files `scan` reads (Python, and launchers for C013) and project configuration
TEXT_SUFFIXES = (".py", ".sh", ".yaml", ".yml", ".toml", ".cfg", ".ini", ".conf")
TEXT_PREFIXES = ("Dockerfile", "Procfile", "dockerfile")
MAX_BLOB = 4 * 1024 * 1024

Key = tuple[str, int, str]  # (file relative to the repository root, line, code)


def slug(repo: str) -> str:
    return repo.replace("/", "__")


def wanted(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.endswith(TEXT_SUFFIXES) or name.startswith(TEXT_PREFIXES)


def extract(git_dir: Path, commit: str, into: Path) -> int:
    """Write the wanted files of `commit` under `into`; returns how many were written (missing objects skipped)."""
    marker = into / ".corpus-commit"
    if marker.is_file() and marker.read_text().strip() == commit:
        return -1
    if into.exists():
        subprocess.run(["rm", "-rf", "--", str(into)], check=True)
    into.mkdir(parents=True)
    listing = subprocess.run(["git", f"--git-dir={git_dir}", "ls-tree", "-r", "-z", "--long", commit],
                             check=True, capture_output=True).stdout
    entries: list[tuple[str, str]] = []
    for raw in listing.split(b"\0"):
        if not raw:
            continue
        meta, _, name = raw.partition(b"\t")
        mode, kind, sha, size = meta.split()
        path = name.decode("utf-8", "surrogateescape")
        if kind != b"blob" or mode == b"120000" or not size.isdigit() or int(size) >= MAX_BLOB or not wanted(path):
            continue
        entries.append((sha.decode(), path))
    if not entries:
        marker.write_text(commit + "\n")
        return 0
    batch = subprocess.run(["git", f"--git-dir={git_dir}", "cat-file", "--batch"], check=True, capture_output=True,
                           input="".join(sha + "\n" for sha, _ in entries).encode()).stdout
    written, pos = 0, 0
    for _sha, path in entries:
        end = batch.index(b"\n", pos)
        header = batch[pos:end].split()
        pos = end + 1
        if len(header) < 3 or header[1] == b"missing":
            continue
        size = int(header[2])
        data = batch[pos:pos + size]
        pos += size + 1
        target = into / path
        if ".." in Path(path).parts:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        written += 1
    marker.write_text(commit + "\n")
    return written


def python_lines(root: Path, paths: list[str]) -> int:
    total = 0
    for base in [root / p for p in paths] or [root]:
        files = [base] if base.is_file() else base.rglob("*.py")
        for f in files:
            with contextlib.suppress(OSError):
                total += f.read_bytes().count(b"\n")
    return total


def scan_env(pythonpath: str | None) -> dict[str, str]:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return env


def scan_flags(python: str, pythonpath: str | None) -> list[str]:
    """The flags this version of scan takes that keep the run clean: no stored run, no project config, no summary."""
    proc = subprocess.run([python, "-m", "infradoctor", "scan", "--help"], env=scan_env(pythonpath),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"`infradoctor scan --help` failed: {proc.stderr.strip()[-1000:]}")
    return [flag for flag in ("--no-store", "--no-config", "--quiet") if flag in proc.stdout]


def run_scan(python: str, pythonpath: str | None, targets: list[Path],
             extra: list[str]) -> tuple[dict[str, Any], float]:
    env = scan_env(pythonpath)
    with tempfile.TemporaryDirectory(prefix="corpus-scan-") as tmp:
        out = Path(tmp) / "scan.json"
        cmd = [python, "-m", "infradoctor", "scan", "--format", "json", "--output", str(out), *extra,
               *map(str, targets)]
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if proc.returncode not in (0, 1) or not out.is_file():
            raise RuntimeError(f"scan exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
        return json.loads(out.read_text()), wall


def finding_keys(result: dict[str, Any], root: Path) -> list[tuple[Key, dict[str, Any]]]:
    keyed = []
    prefix = str(root) + os.sep
    for f in result.get("findings", []):
        loc = f.get("location") or {}
        file = str(loc.get("file", ""))
        if file.startswith(prefix):
            file = file[len(prefix):]
        keyed.append(((file, int(loc.get("line") or 0), str(f.get("code"))), f))
    return keyed


def read_csv(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with path.open(newline="") as fh:
        return [row for row in csv.DictReader(fh) if any((v or "").strip() for v in row.values())]


def load_judgements(repo: str) -> dict[Key, dict[str, str]]:
    judged: dict[Key, dict[str, str]] = {}
    for row in read_csv(CORPUS / "judgements" / f"{slug(repo)}.csv"):
        verdict = row["verdict"].strip()
        if verdict not in VERDICTS:
            raise SystemExit(f"{repo}: bad verdict {verdict!r} in {row}")
        judged[(row["file"].strip(), int(row["line"]), row["code"].strip())] = row
    return judged


def _recall(misses: list[dict[str, str]], judged: dict[str, dict[Key, dict[str, str]]],
            found: dict[str, set[Key]], read_by_hand: set[str]) -> dict[str, Any] | None:
    """Recall on the code read by hand: misses found, and hits ever judged true (of the codes the misses are
    about, in the repositories read by hand) still reported."""
    scanned = read_by_hand & set(found)
    if not scanned:
        return None
    codes = sorted({m["code"].strip() for m in misses})
    miss_keys = {(m["repo"], m["file"].strip(), int(m["line"]), m["code"].strip()) for m in misses
                 if m["repo"] in scanned}
    true_keys = {(repo, *key) for repo in scanned for key, row in judged.get(repo, {}).items()
                 if row["verdict"].strip() == "true" and key[2] in codes}
    true_keys -= miss_keys
    misses_found = sum(1 for k in miss_keys if k[1:] in found[k[0]])
    judged_found = sum(1 for k in true_keys if k[1:] in found[k[0]])
    positives = len(miss_keys) + len(true_keys)
    hits = misses_found + judged_found
    return {"codes": codes, "positives": positives, "found": hits, "recall": hits / positives if positives else 0.0,
            "misses": len(miss_keys), "misses_found": misses_found, "judged_true": len(true_keys),
            "judged_found": judged_found}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", default=str(ROOT / ".venv" / "bin" / "python"), help="interpreter that runs scan")
    ap.add_argument("--pythonpath", default=str(ROOT / "src"), help="PYTHONPATH for scan ('' keeps the environment's)")
    ap.add_argument("--only", action="append", default=[], metavar="REPO", help="only this owner/name (repeatable)")
    ap.add_argument("--set", action="append", default=[], dest="sets", metavar="SET",
                    help="only repositories of this set in the corpus list (development, held-out, held-out-2)")
    ap.add_argument("--json", metavar="OUT", help="write the whole comparison as JSON to OUT")
    ap.add_argument("--repos", default=str(CORPUS / "repos.json"), help="corpus list (default: %(default)s)")
    ap.add_argument("--mirror-root", default="/work/.mirror", help="where the bare mirrors are")
    ap.add_argument("--cache", default="/tmp/corpus-scan", help="where snapshots are extracted")
    ap.add_argument("--select", help="passed to scan --select")
    ap.add_argument("--runs", type=int, default=1, help="scan each repository N times and report differences")
    ap.add_argument("--miss-window", type=int, default=0,
                    help="a miss counts as found when a hit of its code is within N lines (default 0: same line)")
    ap.add_argument("--sample", type=int, default=0, metavar="N",
                    help="print, per rule with more than N hits, a seeded sample of N hits (sorted first)")
    ap.add_argument("--seed", type=int, default=15, help="seed of the sample (default 15)")
    ap.add_argument("--max-unjudged", type=int, default=200, help="list at most this many unjudged hits")
    ap.add_argument("--update-lines", action="store_true",
                    help="rewrite python_lines in the corpus list from the extracted snapshots")
    args = ap.parse_args(argv)

    repos = json.loads(Path(args.repos).read_text())
    if args.only:
        repos = [r for r in repos if r["repo"] in args.only]
        if not repos:
            raise SystemExit(f"none of {args.only} is in {args.repos}")
    if args.sets:
        repos = [r for r in repos if r.get("set", "development") in args.sets]
        if not repos:
            raise SystemExit(f"no repository of set {args.sets} in {args.repos}")
    extra = scan_flags(args.python, args.pythonpath or None)
    if args.select:
        extra += ["--select", args.select]
    unsampled = {(r["repo"], r["file"], int(r["line"]), r["code"]) for r in read_csv(CORPUS / "unsampled.csv")}
    misses = read_csv(CORPUS / "misses.csv")

    per_rule: dict[str, Counter[str]] = defaultdict(Counter)
    per_rule_repos: dict[str, set[str]] = defaultdict(set)
    unjudged: list[dict[str, Any]] = []
    stale: list[dict[str, Any]] = []
    hits_all: list[tuple[str, Key, int]] = []
    repo_rows: list[dict[str, Any]] = []
    nondeterministic: list[str] = []
    found_by_repo: dict[str, set[Key]] = {}
    judgements_by_repo: dict[str, dict[Key, dict[str, str]]] = {}
    read_by_hand = {r["repo"] for r in repos if r.get("read_by_hand")}
    total_lines = 0
    total_wall = 0.0
    total_scan_s = 0.0
    for entry in repos:
        repo, commit = entry["repo"], entry["commit"]
        git_dir = Path(args.mirror_root) / repo.replace("/", "+") / "repo"
        if (git_dir / ".git").is_dir():  # a snapshot that came as a work tree
            git_dir = git_dir / ".git"
        if not git_dir.is_dir():
            print(f"skip {repo}: no mirror at {git_dir}", file=sys.stderr)
            repo_rows.append({"repo": repo, "skipped": "no mirror"})
            continue
        root = Path(args.cache) / slug(repo)
        extract(git_dir, commit, root)
        if args.update_lines:
            entry["python_lines"] = python_lines(root, entry.get("paths") or [])
        targets = [root / p for p in entry.get("paths") or []] or [root]
        results = []
        for _ in range(max(1, args.runs)):
            results.append(run_scan(args.python, args.pythonpath or None, targets, extra))
        result, wall = results[0]
        keyed = finding_keys(result, root)
        if len(results) > 1:
            first = sorted(k for k, _ in keyed)
            for other, _w in results[1:]:
                again = sorted(k for k, _ in finding_keys(other, root))
                if again != first:
                    diff = sorted(set(first) ^ set(again)) or ["same set, different multiplicity"]
                    nondeterministic.append(f"{repo}: {diff[:10]}")
        head = result["metrics"]["headline"]
        lines = int(head.get("lines_scanned") or 0)
        total_lines += lines
        total_wall += wall
        total_scan_s += float(result.get("duration_s") or 0.0)
        judged = load_judgements(repo)
        judgements_by_repo[repo] = judged
        seen: set[Key] = set()
        counts: Counter[str] = Counter()
        for key, finding in keyed:
            seen.add(key)
            code = key[2]
            per_rule[code]["hits"] += 1
            per_rule_repos[code].add(repo)
            counts[code] += 1
            hits_all.append((repo, key, int((finding.get("location") or {}).get("column") or 0)))
            row = judged.get(key)
            if row is not None:
                per_rule[code][row["verdict"].strip()] += 1
            elif (repo, *key) in unsampled:
                per_rule[code]["unsampled"] += 1
            else:
                per_rule[code]["unjudged"] += 1
                unjudged.append({"repo": repo, "file": key[0], "line": key[1], "code": code,
                                 "title": finding.get("title", ""),
                                 "source": (finding.get("evidence") or {}).get("source", "")})
        for key, row in judged.items():
            if key not in seen:
                stale.append({"repo": repo, "file": key[0], "line": key[1], "code": key[2],
                              "verdict": row["verdict"], "reason": row.get("reason", "")})
        found_by_repo[repo] = seen
        repo_rows.append({"repo": repo, "kind": entry.get("kind"), "files": head.get("files_scanned"),
                          "lines": lines, "wall_s": round(wall, 3),
                          "lines_per_s_wall": round(lines / wall) if wall else 0,
                          "lines_per_s_scan": head.get("lines_per_s"), "file_problems": head.get("file_problems"),
                          "errors": len(result.get("errors") or []), "by_code": dict(sorted(counts.items()))})

    still_missed, now_found = [], []
    for m in misses:
        repo = m["repo"]
        if repo not in found_by_repo:
            continue
        line, code, file = int(m["line"]), m["code"].strip(), m["file"].strip()
        hit = any(k[0] == file and k[2] == code and abs(k[1] - line) <= args.miss_window for k in found_by_repo[repo])
        (now_found if hit else still_missed).append(m)

    rules = []
    for code in sorted(per_rule):
        c = per_rule[code]
        decided = c["true"] + c["false"]
        rules.append({"code": code, "hits": c["hits"], "repos": len(per_rule_repos[code]), "true": c["true"],
                      "false": c["false"], "debatable": c["debatable"], "unsampled": c["unsampled"],
                      "unjudged": c["unjudged"], "precision": round(c["true"] / decided, 3) if decided else None})

    print(f"{'repo':52} {'lines':>7} {'wall s':>7} {'lines/s':>8}  findings")
    for r in repo_rows:
        if "skipped" in r:
            print(f"{r['repo']:52} skipped: {r['skipped']}")
            continue
        codes = " ".join(f"{k}:{v}" for k, v in r["by_code"].items())
        print(f"{r['repo']:52} {r['lines']:>7} {r['wall_s']:>7.2f} {r['lines_per_s_wall']:>8}  {codes}")
    rate = round(total_lines / total_wall) if total_wall else 0
    scan_rate = round(total_lines / total_scan_s) if total_scan_s else 0
    print(f"{'total':52} {total_lines:>7} {total_wall:>7.2f} {rate:>8}  (wall clock of the scan process)")
    print(f"{'total, scan duration_s only':52} {total_lines:>7} {total_scan_s:>7.2f} {scan_rate:>8}  "
          "(the result's own duration, without interpreter start)\n")
    print(f"{'rule':5} {'hits':>5} {'repos':>5} {'true':>5} {'false':>5} {'debat':>5} {'unsmp':>5} {'unjdg':>5} "
          f"{'precision':>9}")
    for r in rules:
        p = "-" if r["precision"] is None else f"{100 * r['precision']:.0f}%"
        print(f"{r['code']:5} {r['hits']:>5} {r['repos']:>5} {r['true']:>5} {r['false']:>5} {r['debatable']:>5} "
              f"{r['unsampled']:>5} {r['unjudged']:>5} {p:>9}")
    if unjudged:
        print(f"\nunjudged hits ({len(unjudged)}; judge them in judgements/<owner>__<name>.csv):")
        for u in unjudged[:args.max_unjudged]:
            print(f"  {u['repo']}:{u['file']}:{u['line']}: {u['code']} {u['title'][:100]}")
        if len(unjudged) > args.max_unjudged:
            print(f"  ... {len(unjudged) - args.max_unjudged} more (--max-unjudged)")
    if stale:
        print(f"\njudged hits no longer reported ({len(stale)}; fixed false positives, or lost true ones):")
        for s in stale:
            print(f"  {s['repo']}:{s['file']}:{s['line']}: {s['code']} was {s['verdict']}: {s['reason'][:90]}")
    if misses:
        checked = len(still_missed) + len(now_found)
        print(f"\nmisses: {len(now_found)} of {checked} now found, {len(still_missed)} still missed")
        for m in still_missed:
            print(f"  {m['repo']}:{m['file']}:{m['line']}: {m['code']} {m['reason'][:100]}")
    recall = _recall(misses, judgements_by_repo, found_by_repo, read_by_hand)
    if recall is not None:
        print(f"\nrecall on the code read by hand ({len(read_by_hand & set(found_by_repo))} repositories, codes "
              f"{', '.join(recall['codes'])}): {recall['found']} of {recall['positives']} known positives reported "
              f"({100 * recall['recall']:.0f}%): {recall['misses_found']} of {recall['misses']} misses, "
              f"{recall['judged_found']} of {recall['judged_true']} hits judged true")
    if nondeterministic:
        print("\nNONDETERMINISTIC between runs:")
        for n in nondeterministic:
            print(f"  {n}")
    elif args.runs > 1:
        print(f"\n{args.runs} runs per repository gave the same findings")

    sample: dict[str, list[dict[str, Any]]] = {}
    sample_precision: dict[str, dict[str, Any]] = {}
    if args.sample:
        by_code: dict[str, list[tuple[str, Key, int]]] = defaultdict(list)
        for h in hits_all:
            by_code[h[1][2]].append(h)
        for code, hits in sorted(by_code.items()):
            if len(hits) <= args.sample:
                continue
            ordered = sorted(hits, key=lambda h: (h[0], h[1][0], h[1][1], h[2]))
            picked = random.Random(args.seed).sample(ordered, args.sample)
            sample[code] = [{"repo": r, "file": k[0], "line": k[1], "code": k[2]} for r, k, _c in
                            sorted(picked, key=lambda h: (h[0], h[1][0], h[1][1], h[2]))]
            print(f"\nsample of {args.sample} of {len(hits)} {code} hits (random.Random({args.seed})):")
            for s in sample[code]:
                print(f"  {s['repo']}:{s['file']}:{s['line']}")
        if sample:
            print(f"\nprecision on the seeded sample (rules with more than {args.sample} hits):")
            print(f"{'rule':5} {'sample':>6} {'true':>5} {'false':>5} {'debat':>5} {'unjdg':>5} {'precision':>9}")
            for code, picked_rows in sample.items():
                c: Counter[str] = Counter()
                for row in picked_rows:
                    verdict = judgements_by_repo[row["repo"]].get((row["file"], row["line"], code))
                    c[verdict["verdict"] if verdict else "unjudged"] += 1
                decided = c["true"] + c["false"]
                p = f"{100 * c['true'] / decided:.0f}%" if decided else "-"
                sample_precision[code] = {**c, "precision": round(c["true"] / decided, 3) if decided else None}
                print(f"{code:5} {len(picked_rows):>6} {c['true']:>5} {c['false']:>5} {c['debatable']:>5} "
                      f"{c['unjudged']:>5} {p:>9}")
                for row in picked_rows:
                    if (row["file"], row["line"], code) not in judgements_by_repo[row["repo"]]:
                        print(f"  unjudged in the sample: {row['repo']}:{row['file']}:{row['line']}")

    if args.update_lines and not args.only:
        Path(args.repos).write_text(json.dumps(repos, indent=1) + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "python": args.python, "pythonpath": args.pythonpath, "repos": repo_rows, "rules": rules,
            "lines": total_lines, "wall_s": round(total_wall, 3), "lines_per_s": rate,
            "scan_s": round(total_scan_s, 3), "scan_lines_per_s": scan_rate, "unjudged": unjudged,
            "stale": stale, "misses_still_missed": still_missed, "misses_now_found": now_found,
            "nondeterministic": nondeterministic, "sample": sample, "sample_precision": sample_precision,
            "recall": recall}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
