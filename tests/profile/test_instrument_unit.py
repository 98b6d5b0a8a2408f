"""Pieces of the in-process recorder that need no child process: call-site resolution and the step model."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from infradoctor.profile.instrument import Recorder


def test_user_frame_prefers_the_users_code_over_installed_packages(tmp_path: Path, monkeypatch) -> None:
    lib = tmp_path / "site-packages"
    lib.mkdir()
    (lib / "fakepipeline.py").write_text(textwrap.dedent("""
        import sys

        def run(callback):
            return callback(sys._getframe())
    """), encoding="utf-8")
    monkeypatch.syspath_prepend(str(lib))
    import fakepipeline

    rec = Recorder(str(tmp_path), "main", [])
    real = rec.installed_dirs
    rec.installed_dirs = (*real, str(lib) + "/")

    def user_code():
        return fakepipeline.run(rec.user_frame), sys._getframe().f_lineno

    frame, line = user_code()
    assert frame.f_code.co_filename == __file__ and frame.f_code.co_name == "user_code"
    # with nothing of the user's own further out, the innermost non-torch frame is the answer
    rec.installed_dirs = (*real, str(lib) + "/", str(Path(__file__).parent) + "/")
    rec.installed_code.clear()
    frame, _ = user_code()
    assert frame.f_code.co_filename.endswith("fakepipeline.py")


def test_step_boundaries_follow_the_strongest_marker(tmp_path: Path) -> None:
    rec = Recorder(str(tmp_path), "main", [])
    t = 0.0
    # forward-only steps: a boundary before each call of the model
    for _ in range(3):
        rec.boundary("forward", t, before=True)
        rec.step.forwards += 1
        t += 1.0
    assert rec.mode == "forward" and rec.steps_total == 2
    # a DataLoader appears: steps now start at each batch
    rec.boundary("dataloader", t, before=True)
    rec.step.batches += 1
    rec.boundary("optimizer", t + 0.5, before=False)  # training: steps end after optimizer.step()
    assert rec.mode == "optimizer" and rec.steps_total == 4
    rec.boundary("dataloader", t + 1.0, before=True)  # weaker marker: no boundary any more
    assert rec.steps_total == 4
    durations = [round(r["t1"] - r["t0"], 3) for r in rec.step_buffer]
    assert durations == [1.0, 1.0, 1.0, 0.5]


def test_a_site_listed_twice_in_one_step_counts_its_span_once(tmp_path: Path) -> None:
    # two server threads read at the same line at once: both see it unstarted and list it in the step
    from infradoctor.profile.instrument import SyncSiteStats as _SiteStats

    rec = Recorder(str(tmp_path), "main", [])
    site = _SiteStats("tolist", sys._getframe().f_code, 1)
    rec.boundary("forward", 1000.0, before=True)
    rec.step.forwards += 1
    site.first, site.last = 1000.1, 1000.3
    rec.step.active_sites.extend([site, site])
    rec.boundary("forward", 1001.0, before=True)
    assert abs(site.span - 0.2) < 1e-9 and site.steps == 1  # not 0.2 + (1000.3 + 1.0) from the second listing
