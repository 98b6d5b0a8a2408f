# main.py
# Reduced from harshit-033/dental_detection@0c1c17b18094b5897c3d3e8bc94721e1f08fd7da:main.py (a public FastAPI
# model server). Kept: FastAPI app, global model loaded once in an @app.on_event("startup") handler with
# torch.load of the whole pickled model + model.eval(); POST /predict as an `async def` endpoint that converts
# the request list with torch.tensor(...).float(), runs the model under torch.no_grad() and returns
# out.cpu().numpy().tolist(); HTTPException on errors.
# Changed: torch.load(..., weights_only=False) (torch >= 2.6 refuses a pickled module otherwise); the served
#   model is the MNIST Net from netdef.py (the repository's model.pt is not public), written to the temp dir by
#   netdef.ensure_model_file() when missing, MODEL_PATH defaults there; a GET / health route for the profiler's
#   readiness poll; the corpus starts it with `python -m uvicorn --app-dir fastapi_server main:app --port 18731`
#   and posts request.json (one 1x1x28x28 image).
import os

import torch
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

from netdef import Net, ensure_model_file  # noqa: F401  (Net must be importable for torch.load)

app = FastAPI()
model = None
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class PredictRequest(BaseModel):
    inputs: list  # adapt this to your model input format


@app.on_event("startup")
async def load_model():
    """Load the PyTorch model when the app starts"""
    global model
    model_path = os.environ.get("MODEL_PATH", ensure_model_file())  # Use env variable if provided
    if not os.path.exists(model_path):
        raise FileNotFoundError(f"Model file not found at {model_path}")

    # If your model is saved as full model
    model = torch.load(model_path, map_location=device, weights_only=False)

    model.eval()
    print(f"Model loaded from {model_path} on {device}")


@app.get("/")
async def health():
    return {"ok": model is not None}


@app.post("/predict")
async def predict(req: PredictRequest):
    """Run prediction on incoming data"""
    global model
    if model is None:
        raise HTTPException(status_code=500, detail="Model not loaded")

    try:
        # Convert input list to tensor (adapt this to your model's input shape)
        x = torch.tensor(req.inputs).float().to(device)
        with torch.no_grad():
            out = model(x)
        return {"result": out.cpu().numpy().tolist()}
    except Exception as e:
        raise HTTPException(status_code=400, detail=str(e))
