"""Inference service (as first written): FastAPI, model loaded inside the handler, async def endpoint."""

import os
import sys

import torch
import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel

from common import build_model

torch.set_num_threads(1)
HIDDEN = 2048  # a mid-sized classifier head: ~4.7M parameters
WEIGHTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "classifier-weights.pt")
torch.save(build_model(hidden=HIDDEN).state_dict(), WEIGHTS)

app = FastAPI()


class Request(BaseModel):
    inputs: list[list[float]]


@app.get("/health")
async def health():
    return {"status": "ok"}


@app.post("/predict")
async def predict(request: Request):
    model = build_model(hidden=HIDDEN)
    model.load_state_dict(torch.load(WEIGHTS))
    features = torch.tensor(request.inputs)
    logits = model(features)
    return {"labels": logits.argmax(dim=1).tolist()}


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
