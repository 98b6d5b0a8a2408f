"""Inference service after the fix: model loaded once at start-up, inference off the event loop."""

import os
import sys
from contextlib import asynccontextmanager

import torch
import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel

from common import build_model

torch.set_num_threads(1)
HIDDEN = 2048  # a mid-sized classifier head: ~4.7M parameters
WEIGHTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "classifier-weights.pt")
torch.save(build_model(hidden=HIDDEN).state_dict(), WEIGHTS)
state = {}


@asynccontextmanager
async def lifespan(app):
    model = build_model(hidden=HIDDEN)
    model.load_state_dict(torch.load(WEIGHTS, weights_only=True))
    state["model"] = model.eval()
    yield
    state.clear()


app = FastAPI(lifespan=lifespan)


class Request(BaseModel):
    inputs: list[list[float]]


@app.get("/health")
async def health():
    return {"status": "ok"}


@app.post("/predict")
def predict(request: Request):
    features = torch.tensor(request.inputs)
    with torch.inference_mode():
        logits = state["model"](features)
    return {"labels": logits.argmax(dim=1).tolist()}


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
