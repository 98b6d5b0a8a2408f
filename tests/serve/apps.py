"""Real FastAPI + PyTorch (CPU) server scripts for the integration tests; each takes its port as argv[1]."""

from __future__ import annotations

from pathlib import Path

COMMON = """
import asyncio, logging, os, sys, time
from pathlib import Path

import torch
import uvicorn
from fastapi import FastAPI
from fastapi.responses import StreamingResponse

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


@app.get("/stream")
async def stream() -> StreamingResponse:
    with stage("prefill"):
        await asyncio.sleep(0.02)

    async def tokens():
        for i in range(3):
            with stage("decode"):
                await asyncio.sleep(0.01)
            yield f"tok{i} "

    return StreamingResponse(tokens(), media_type="text/plain")


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



def marked_line(path: Path, marker: str) -> int:
    """1-based number of the line of ``path`` that ends with ``# marker``."""
    for number, text in enumerate(path.read_text().splitlines(), 1):
        if text.rstrip().endswith(f"# {marker}"):
            return number
    raise AssertionError(f"{marker} not in {path}")


# Servers for `profile --load-url`: plain FastAPI + torch apps, not instrumented by the user; argv[1] is the port.

SERVER_HEAD = """
import asyncio, io, sys, time

import torch
import uvicorn
from fastapi import FastAPI

torch.manual_seed(0)
torch.set_num_threads(1)
app = FastAPI()


@app.get("/")
def root() -> dict:
    return {"ok": True}
"""

SERVER_TAIL = """

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def server(body: str) -> str:
    """A complete single-process server script around ``body`` (which defines the endpoints)."""
    return SERVER_HEAD + body + SERVER_TAIL


MODEL_PER_REQUEST = server('''
def build() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))


buffer = io.BytesIO()
torch.save(build().state_dict(), buffer)
WEIGHTS = buffer.getvalue()


@app.post("/predict")
def predict(body: dict) -> dict:
    model = build()
    model.load_state_dict(torch.load(io.BytesIO(WEIGHTS), weights_only=True))  # LOAD-LINE
    model.eval()
    with torch.inference_mode():
        return {"y": float(model(torch.tensor(body["x"]).reshape(1, 64)).sum())}
''')

# The model work: a small forward pass plus 50 ms the host thread waits (as it waits for a GPU), GIL released.
_WORK = '''
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).eval()
x = torch.ones(4, 64)


def infer() -> float:
    with torch.inference_mode():
        y = model(x)
    time.sleep(0.05)  # BLOCKING-LINE
    return float(y.sum())
'''

BLOCKING_ASYNC_SERVER = server(_WORK + '''

@app.get("/predict")
async def predict() -> dict:
    return {"y": infer()}  # ENDPOINT-LINE
''')

SHORT_BLOCKS_SERVER = server('''
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).eval()


@app.get("/predict")
async def predict() -> dict:
    # 20 ms per request, never a 100 ms stall
    time.sleep(0.02)  # SHORT-BLOCK-LINE
    with torch.inference_mode():
        y = model(torch.ones(1, 64))
    return {"y": float(y.sum())}
''')

BLOCKING_SYNC_SERVER = server(_WORK + '''

@app.get("/predict")
def predict() -> dict:
    return {"y": infer()}
''')

SLOTS = 4

FIXED_SLOTS_SERVER = server(f'''
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).eval()
slots = asyncio.Semaphore({SLOTS})  # {SLOTS} requests at a time; the rest wait in an unbounded queue


@app.get("/predict")
async def predict() -> dict:
    async with slots:
        with torch.inference_mode():
            y = model(torch.ones(1, 64))
        await asyncio.sleep(0.1)
    return {{"y": float(y.sum())}}
''')

LAZY_INIT_SERVER = server('''
model = None


def get_model() -> torch.nn.Module:
    global model
    if model is None:  # built on the first request, not at start-up
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).eval()
        time.sleep(1.0)  # stands for reading weights and warming up
    return model


@app.get("/predict")
def predict() -> dict:
    with torch.inference_mode():
        y = get_model()(torch.ones(1, 64))
    time.sleep(0.01)
    return {"y": float(y.sum())}
''')

MULTI_WORKER_SERVER = """
import os, sys
from pathlib import Path

import torch
import uvicorn
from fastapi import FastAPI

torch.manual_seed(0)
# Each worker process imports this module and builds its own copy of the model (~67 MB of weights; with
# TINY_MODEL=1 about 4 KB: nothing worth calling a copy).
WIDTH = 32 if os.environ.get("TINY_MODEL") == "1" else 4096
model = torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH)).eval()
app = FastAPI()


@app.get("/")
def root() -> dict:
    return {"pid": os.getpid()}


@app.get("/predict")
def predict() -> dict:
    with torch.inference_mode():
        return {"y": float(model(torch.ones(1, WIDTH)).sum())}


if __name__ == "__main__":
    uvicorn.run(f"{Path(__file__).stem}:app", host="127.0.0.1", port=int(sys.argv[1]), workers=2,
                app_dir=str(Path(__file__).parent), log_level="warning")
"""
