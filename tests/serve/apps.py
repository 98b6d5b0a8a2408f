"""Real FastAPI + PyTorch (CPU) server scripts for the integration tests; each takes its port as argv[1]."""

from __future__ import annotations

from pathlib import Path

COMMON = """
import asyncio, logging, os, sys, time
from pathlib import Path

import torch
import uvicorn
from fastapi import FastAPI

from infradoctor.serve import LoopLagMonitor, ServeMetrics, TimingMiddleware, stage

torch.manual_seed(0)
torch.set_num_threads(1)
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(name)s %(message)s")
"""

INSTRUMENTED = COMMON + """
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8)).eval()
app = FastAPI()
app.add_middleware(TimingMiddleware, metrics=ServeMetrics(), metrics_path="/metrics")


@app.get("/")
def root() -> dict:
    return {"ok": True}


@app.post("/predict")
async def predict(body: dict) -> dict:
    with stage("preprocess"):
        await asyncio.sleep(0.03)
        x = torch.tensor(body["x"], dtype=torch.float32).reshape(-1, 64)
    with stage("inference"):
        await asyncio.sleep(0.06)
        with torch.inference_mode():
            y = model(x)
    with stage("postprocess"):
        out = y.argmax(dim=1).tolist()
    return {"classes": out}


@app.post("/predict_sync")
def predict_sync(body: dict) -> dict:
    with stage("inference"):
        time.sleep(0.05)
        with torch.inference_mode():
            y = model(torch.tensor(body["x"], dtype=torch.float32).reshape(-1, 64))
    return {"classes": y.argmax(dim=1).tolist()}


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""

BLOCKING_TEMPLATE = COMMON + """
model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256)).eval()
x = torch.randn(32, 256)
monitor = LoopLagMonitor(interval_s=0.02, stall_threshold_s=0.08)
app = FastAPI()
app.add_middleware(TimingMiddleware, loop_monitor=monitor)


@app.get("/")
async def root() -> dict:
    return {"ok": True}


@app.get("/debug/loop")
async def loop_evidence() -> dict:
    return monitor.evidence().to_dict()


@app.post("/predict")
{KIND} predict() -> dict:
    deadline = time.perf_counter() + 0.2
    with torch.inference_mode():
        while time.perf_counter() < deadline:
            y = model(x)  # BLOCKING-LINE
    return {"sum": float(y.sum())}


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""

BLOCKING_ASYNC = BLOCKING_TEMPLATE.replace("{KIND}", "async def")
BLOCKING_SYNC = BLOCKING_TEMPLATE.replace("{KIND}", "def")

MULTI_WORKER = COMMON + """
# Each worker process imports this module and builds its own copy of the model (~134 MB of weights).
model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.Linear(4096, 4096)).eval()
app = FastAPI()


@app.get("/")
def root() -> dict:
    return {"pid": os.getpid()}


if __name__ == "__main__":
    uvicorn.run(f"{Path(__file__).stem}:app", host="127.0.0.1", port=int(sys.argv[1]), workers=2,
                app_dir=str(Path(__file__).parent), log_level="warning")
"""


def marked_line(path: Path, marker: str) -> int:
    """1-based number of the line of ``path`` that ends with ``# marker``."""
    for number, text in enumerate(path.read_text().splitlines(), 1):
        if text.rstrip().endswith(f"# {marker}"):
            return number
    raise AssertionError(f"{marker} not in {path}")
