"""The recorder on real PyTorch programs (CPU): call sites, the fate of autograd graphs, data-loading transforms,
models that appear late, the batch dimension and sequential calls. Each program runs under the profiler as a
user's script would."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from infradoctor.profile.evidence import CallSite, ModuleUse, ProfileEvidence
from infradoctor.profile.launcher import ProfileOptions
from infradoctor.profile.result import profile_run
from infradoctor.profile.rules import RuleOptions
from infradoctor.result import Result

pytest.importorskip("torch")
pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def run(tmp_path: Path, source: str) -> tuple[Result, ProfileEvidence, Path]:
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(source), encoding="utf-8")
    bundles: list[dict[str, Any]] = []
    result = profile_run([sys.executable, str(script)], ProfileOptions(cwd=str(tmp_path)),
                         RuleOptions(cwd=str(tmp_path)), timeout_s=150, on_evidence=bundles.append)
    assert result.exit_status == 0, result.errors
    return result, ProfileEvidence.from_dict(bundles[0]["profile"]), script


def line_of(script: Path, marker: str) -> int:
    return next(i for i, text in enumerate(script.read_text().splitlines(), 1) if text.rstrip().endswith(marker))


def model(evidence: ProfileEvidence, cls: str) -> ModuleUse:
    return next(m for m in evidence.modules if m.cls == cls)


def site(module: ModuleUse, line: int) -> CallSite:
    return next(c for c in module.call_sites if c.line == line)


def found(result: Result, code: str) -> list[Any]:
    return [f for f in result.findings if f.code == code]


TRAIN_AND_EVALUATE = """
    import torch
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Dropout(0.1), torch.nn.Linear(256, 4))
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randint(0, 4, (32,))
    kept = []
    for epoch in range(2):
        net.train()
        for _ in range(20):
            loss = torch.nn.functional.cross_entropy(net(x), y)  # TRAIN
            opt.zero_grad()
            loss.backward()
            opt.step()
        net.eval()
        for _ in range(15):
            out = net(x)  # EVAL
            kept.append(out)  # KEEP
"""


def test_evaluation_inside_training_is_judged_at_its_own_line(tmp_path: Path) -> None:
    result, evidence, script = run(tmp_path, TRAIN_AND_EVALUATE)
    net = model(evidence, "Sequential")
    train, evaluate = site(net, line_of(script, "# TRAIN")), site(net, line_of(script, "# EVAL"))
    # the training calls' graphs were used by a backward; the evaluation calls' graphs never were, and the list
    # kept them alive across later calls
    assert (train.calls, train.used_graphs, train.unused_grad_calls) == (40, 40, 0)
    assert (evaluate.calls, evaluate.used_graphs, evaluate.unused_grad_calls) == (30, 0, 30)
    assert evaluate.kept_graphs >= 24 and evaluate.kept_peak == 30
    assert evaluate.train_mode_calls == 0 and evaluate.train_mode_inference_calls == 0  # eval() was called
    [p003] = found(result, "P003")
    assert p003.location is not None and p003.location.line == line_of(script, "# EVAL")
    assert not found(result, "P004")
    # P007 names the line that keeps the outputs, when what they held is measurable; else nothing is claimed
    for p007 in found(result, "P007"):
        assert p007.location is not None and p007.location.line == line_of(script, "# KEEP")


def test_transforms_in_data_loading_are_not_the_model(tmp_path: Path) -> None:
    result, evidence, script = run(tmp_path, """
        import torch
        from torch.utils.data import DataLoader, Dataset

        class Normalize(torch.nn.Module):
            def forward(self, x):
                return (x - 0.5) / 0.25

        class Images(Dataset):
            def __init__(self):
                self.transform = Normalize()
            def __len__(self):
                return 640
            def __getitem__(self, i):
                return self.transform(torch.rand(1, 28, 28)), i % 10

        net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
        opt = torch.optim.SGD(net.parameters(), lr=0.01)
        for x, y in DataLoader(Images(), batch_size=64):
            loss = torch.nn.functional.cross_entropy(net(x), y)  # TRAIN
            opt.zero_grad()
            loss.backward()
            opt.step()
    """)
    assert [m.cls for m in evidence.modules] == ["Sequential"]  # 640 transform calls: data loading, not a model
    assert evidence.data_modules == {"Normalize": 640}
    net = model(evidence, "Sequential")
    assert net.calls == 10 and site(net, line_of(script, "# TRAIN")).median_batch() == 64
    phases = result.metrics["steps"]["phase_fraction"]
    assert sum(phases.values()) <= 1.01  # the transform's time is data wait, not also forward


def test_models_that_appear_late_are_counted(tmp_path: Path) -> None:
    # after many calls the discovery hooks are dropped; a copy made then (deepcopy, torch.load of a whole
    # module) must still be seen
    result, evidence, script = run(tmp_path, """
        import copy, io, torch
        net = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Dropout(0.1), torch.nn.Linear(64, 2))
        with torch.no_grad():
            for _ in range(120):
                net(torch.randn(8, 16))
        scorer = copy.deepcopy(net)
        buffer = io.BytesIO()
        torch.save(net, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer, weights_only=False)
        with torch.no_grad():
            for _ in range(30):
                scorer(torch.randn(1, 16))  # COPY
                loaded(torch.randn(1, 16))  # LOADED
    """)
    net = model(evidence, "Sequential")
    assert net.calls == 180
    assert site(net, line_of(script, "# COPY")).calls == 30
    assert site(net, line_of(script, "# LOADED")).calls == 30


def test_sequence_first_batches_and_sequential_decoding(tmp_path: Path) -> None:
    result, evidence, script = run(tmp_path, """
        import torch

        class LM(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = torch.nn.Embedding(50, 32)
                self.rnn = torch.nn.LSTM(32, 64)  # sequence first, as in pytorch/examples' word language model
                self.out = torch.nn.Linear(64, 50)
            def forward(self, tokens, hidden=None):
                output, hidden = self.rnn(self.embed(tokens), hidden)
                return self.out(output), hidden

        lm = LM().eval()
        with torch.no_grad():
            for _ in range(30):
                lm(torch.randint(0, 50, (35, 20)))  # BATCHED
            token, hidden = torch.zeros(1, 1, dtype=torch.long), None
            for _ in range(60):
                logits, hidden = lm(token, hidden)  # DECODE
                token = logits[-1].argmax(dim=-1, keepdim=True)
            for _ in range(40):
                lm(torch.randint(0, 50, (5, 1)))  # PER-SAMPLE
    """)
    lm = model(evidence, "LM")
    assert lm.batch_dim == 1
    assert site(lm, line_of(script, "# BATCHED")).median_batch() == 20  # not 35, the sequence length
    decode = site(lm, line_of(script, "# DECODE"))
    assert decode.median_batch() == 1 and decode.sequential_calls >= 59  # the state comes back each call
    per_sample = site(lm, line_of(script, "# PER-SAMPLE"))
    assert per_sample.sequential_calls == 0
    # one stream decoded step by step cannot be batched: P002 only for the independent batch-1 calls
    assert [f.location.line for f in found(result, "P002") if f.location] == [line_of(script, "# PER-SAMPLE")]
