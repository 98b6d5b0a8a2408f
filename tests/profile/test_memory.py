"""Memory growth: the leak site from sampled allocations, not only from model outputs."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from infradoctor.profile.launcher import ProfileOptions
from infradoctor.profile.result import profile_run
from infradoctor.profile.rules import RuleOptions

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

EMBEDDINGS = """
    import torch

    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512)).eval()
    x = torch.randn(40000, 64)
    store = []
    with torch.inference_mode():
        for start in range(0, len(x), 100):
            emb = model(x[start : start + 100])
            store.append(torch.nn.functional.normalize(emb, dim=1))
    print(len(store))
"""


def test_growth_points_at_the_line_whose_tensors_are_kept(tmp_path: Path) -> None:
    script = tmp_path / "embed.py"
    script.write_text(textwrap.dedent(EMBEDDINGS), encoding="utf-8")
    result = profile_run([sys.executable, str(script)], ProfileOptions(stdout=-3), RuleOptions(cwd=str(tmp_path)),
                         timeout_s=100)
    assert result.exit_status == 0 and not result.errors
    top = result.ranked()[0]
    assert top.code == "P007"
    kept_line = textwrap.dedent(EMBEDDINGS).splitlines().index(
        "        store.append(torch.nn.functional.normalize(emb, dim=1))") + 1
    assert top.location is not None and (top.location.file, top.location.line) == ("embed.py", kept_line)
    assert top.evidence["still_alive"] >= 1
    assert 150 <= top.evidence["growth_kb_per_step"] <= 500  # 100 x 512 floats (200 KiB) kept per step, plus heap slack



def test_a_model_built_per_call_is_freed_at_once_under_the_profiler(tmp_path: Path) -> None:
    # The forward wrapper must not make each model a reference cycle: with the cyclic GC off, every model built
    # and dropped is freed by reference counting (a server building a model per request would otherwise grow).
    script = tmp_path / "per_call.py"
    script.write_text(textwrap.dedent("""
        import gc, inspect, sys, weakref
        import torch

        gc.disable()
        refs = []
        for _ in range(60):
            model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
            model(torch.randn(2, 32))
            refs.append(weakref.ref(model))
        del model
        alive = sum(r() is not None for r in refs)
        probe = torch.nn.Linear(4, 4)
        probe(torch.randn(1, 4))
        params = list(inspect.signature(probe.forward).parameters)
        print("alive", alive, "params", params, file=sys.stderr)
        sys.exit(0 if alive == 0 and params == ["input"] else 1)
    """))
    result = profile_run([sys.executable, str(script)], ProfileOptions(), RuleOptions(cwd=str(tmp_path)))
    assert result.exit_status == 0
    assert result.metrics["steps"]["forwards"] >= 50  # the models were instrumented


def test_forked_loader_workers_do_not_multiply_peak_memory(tmp_path: Path) -> None:
    # issue 18: 300 MB built before the DataLoader forks 2 workers is shared with them (copy on write); summing RSS
    # over the tree counted it three times. peak_rss_mb is the main process's; the tree's PSS counts shared pages once.
    script = tmp_path / "forked.py"
    script.write_text(textwrap.dedent("""
        import time, torch
        from torch.utils.data import DataLoader, Dataset

        big = torch.ones(75_000_000)  # 300 MB, written: resident in the parent before the fork

        class Slow(Dataset):
            def __len__(self):
                return 96
            def __getitem__(self, i):
                time.sleep(0.02)
                return torch.zeros(4)

        if __name__ == "__main__":
            model = torch.nn.Linear(4, 1)
            loader = DataLoader(Slow(), batch_size=8, num_workers=2, multiprocessing_context="fork")
            with torch.no_grad():
                for x in loader:
                    model(x)
            print(float(big[0]))
    """), encoding="utf-8")
    result = profile_run([sys.executable, str(script)], ProfileOptions(sample_interval_s=0.1),
                         RuleOptions(cwd=str(tmp_path)), timeout_s=100)
    assert result.exit_status == 0, result.errors
    memory = result.metrics["memory"]
    assert memory["child_processes"] >= 2
    # the same process alone, without the profiler or workers: torch and the 300 MB (a CUDA build of torch keeps
    # ~500 MB more of library pages resident than the CPU build, so the bounds are relative to this)
    alone = subprocess.run([sys.executable, "-c", "import resource, torch; big = torch.ones(75_000_000); "
                            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"],
                           capture_output=True, text=True, timeout=60, check=True)
    base_mb = int(alone.stdout.split()[-1]) * 1024 / 1e6
    # the main process: the 300 MB once, not once per worker (CPU build: base 550, peak about 540)
    assert 300 <= memory["peak_rss_mb"] < base_mb + 200, base_mb
    # the tree's PSS counts the shared pages once (summed RSS: three times the base, about 1,600 MB)
    assert memory["peak_tree_pss_mb"] is not None and memory["peak_tree_pss_mb"] < base_mb + 400, base_mb
    assert result.metrics["headline"]["peak_tree_pss_mb"] == memory["peak_tree_pss_mb"]
