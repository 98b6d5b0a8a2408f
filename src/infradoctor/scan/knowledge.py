"""What the scan rules know about libraries: qualified names of blocking calls, model loaders, web frameworks.

Every table here is data, not logic, so a rule's reach is visible in one place. Names are fully qualified after
import-alias resolution (``import torch as t; t.load`` is ``torch.load``).
"""

from __future__ import annotations

import re

TORCH_ROOTS = frozenset(
    {
        "torch", "torchvision", "torchaudio", "torchtext", "transformers", "diffusers", "timm", "lightning",
        "pytorch_lightning", "sentence_transformers", "accelerate", "peft", "vllm", "ultralytics",
    }
)
"""Top-level modules whose import marks a file as PyTorch code (the torch-specific rules only run there)."""

WEB_FRAMEWORK_ROOTS = {
    "fastapi": "fastapi",
    "starlette": "starlette",
    "flask": "flask",
    "aiohttp": "aiohttp",
    "ray": "ray-serve",
    "sanic": "sanic",
    "quart": "quart",
    "litestar": "litestar",
}
"""Top-level modules of web frameworks whose route decorators mark request handlers."""

APP_CONSTRUCTORS = frozenset(
    {
        "fastapi.FastAPI", "fastapi.APIRouter", "fastapi.routing.APIRouter", "starlette.applications.Starlette",
        "starlette.routing.Router", "flask.Flask", "flask.Blueprint", "aiohttp.web.Application",
        "aiohttp.web.RouteTableDef", "aiohttp.web.RouteDef", "sanic.Sanic", "quart.Quart", "quart.Blueprint",
        "litestar.Litestar", "litestar.Router",
    }
)
"""Calls that build an app or router: a variable bound to one makes ``@var.get(...)`` a route decorator."""

ROUTE_DECORATORS = frozenset(
    {"get", "post", "put", "delete", "patch", "head", "options", "trace", "route", "api_route", "websocket", "view"}
)
"""Attribute names of route decorators (``@app.post("/predict")``)."""

REGISTER_METHODS = frozenset(
    {
        "add_route", "add_api_route", "add_url_rule", "add_get", "add_post", "add_put", "add_delete", "add_patch",
        "add_websocket_route", "add_api_websocket_route",
    }
)
"""Method names that register a handler function passed as an argument (``app.router.add_post("/p", handler)``)."""

ROUTE_FACTORIES = frozenset(
    {
        "starlette.routing.Route", "starlette.routing.WebSocketRoute", "fastapi.routing.APIRoute",
        "aiohttp.web.get", "aiohttp.web.post", "aiohttp.web.put", "aiohttp.web.delete", "aiohttp.web.patch",
        "aiohttp.web.route", "aiohttp.web.view",
    }
)
"""Calls that build a route from a handler function (``Route("/p", endpoint=handler)``)."""

HANDLER_KEYWORDS = frozenset({"endpoint", "view_func", "handler"})
"""Keyword arguments through which a registration passes the handler function."""

RAY_SERVE_DECORATORS = frozenset({"ray.serve.deployment", "ray.serve.ingress", "ray.serve.batch"})
"""Decorators that make a class's methods (or a function) Ray Serve request handlers."""

MODEL_LOADERS = frozenset(
    {
        "torch.load", "torch.jit.load", "torch.hub.load", "torch.export.load", "torch.package.PackageImporter",
        "transformers.pipeline", "sentence_transformers.SentenceTransformer", "timm.create_model",
        "onnxruntime.InferenceSession", "joblib.load", "tensorflow.keras.models.load_model",
        "keras.models.load_model", "keras.saving.load_model", "tensorflow.saved_model.load",
        "ultralytics.YOLO", "vllm.LLM", "diffusers.DiffusionPipeline.from_pretrained",
        "safetensors.torch.load_file", "torch.hub.load_state_dict_from_url",
    }
)
"""Qualified names of calls that build or load a model (besides any ``*.from_pretrained`` and torchvision models)."""

MODEL_LOADER_PREFIXES = ("torchvision.models.",)
"""Qualified-name prefixes of model builders."""

MODEL_LOADER_METHODS = frozenset({"from_pretrained", "load_state_dict", "from_single_file", "load_model"})
"""Method names that load weights whatever the receiver (``AutoModel.from_pretrained``, ``m.load_state_dict``,
``keras.models.load_model``, ``utils.load_model``)."""

MODEL_LOADER_FUNCTIONS = frozenset({"load_model"})
"""Plain function names that load a model wherever they come from (``from utils import load_model``)."""

MODEL_PRODUCERS = frozenset(
    {
        "torch.jit.load", "torch.jit.script", "torch.jit.trace", "torch.hub.load", "torch.compile",
        "torch.export.load", "torch.nn.Sequential", "torch.nn.DataParallel",
        "torch.nn.parallel.DistributedDataParallel", "timm.create_model", "transformers.pipeline",
        "sentence_transformers.SentenceTransformer", "ultralytics.YOLO",
    }
)
"""Calls whose result is a model: a variable assigned from one is a model for the model-call rules."""

PIPELINE_PRODUCERS = frozenset({"transformers.pipeline", "sentence_transformers.SentenceTransformer", "vllm.LLM"})
"""Model wrappers that already run without autograd (C004 does not ask them for no_grad)."""

MODEL_NAME_RE = re.compile(
    r"^(model|net|network|llm|classifier|backbone|[a-z0-9_]*_model|model_[a-z0-9_]+|[a-z0-9_]*_net|"
    r"[a-z0-9_]*_classifier)$"
)
"""Variable names that are taken for models when their assignment is not in the file (``self.model``)."""

FUNCTION_VERB_RE = re.compile(
    r"^_*(load|build|get|create|make|init|initialize|train|save|export|to|convert|prepare|is|has|set|update|"
    r"register|extract|add|wrap|run|fit|compile|quantize|fuse|freeze|copy|clone|check|validate|print|log)_"
)
"""Names like ``load_model``/``build_net``: functions about a model, not the model (a call is not a forward)."""

NOT_MODEL_NAMES = frozenset({"model_name", "model_id", "model_path", "model_dir", "model_type", "model_config",
                             "model_file", "model_kwargs", "model_args", "model_cls", "model_class", "model_fn",
                             "model_url", "model_version", "model_names", "model_ids", "model_paths"})
"""Names that match :data:`MODEL_NAME_RE` but name something about a model, not the model."""

MODULE_BASES = frozenset({"Module", "LightningModule", "PreTrainedModel", "nn.Module", "torch.nn.Module"})
"""Base-class names that make a class defined in the file a model class."""

GRAD_DISABLERS = frozenset(
    {
        "torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad", "torch.autograd.grad_mode.no_grad",
        "torch.autograd.grad_mode.inference_mode", "torch.autograd.inference_mode",
    }
)
"""Context managers and decorators under which autograd records nothing."""

OFFLOADERS = frozenset(
    {
        "asyncio.to_thread", "anyio.to_thread.run_sync", "starlette.concurrency.run_in_threadpool",
        "fastapi.concurrency.run_in_threadpool", "asgiref.sync.sync_to_async", "trio.to_thread.run_sync",
    }
)
"""Qualified names of calls that run their callable argument in a worker thread."""

OFFLOAD_METHODS = frozenset({"run_in_executor", "submit", "to_thread", "run_sync", "run_in_threadpool", "apply_async"})
"""Method names that run their callable argument elsewhere (``loop.run_in_executor``, ``pool.submit``)."""

TASK_SPAWNERS = frozenset({"create_task", "gather", "ensure_future", "wait_for", "shield", "wait", "as_completed",
                           "run_coroutine_threadsafe", "start_soon"})
"""Calls whose direct call arguments are coroutines, not blocking calls."""

BLOCKING_CALLS = {
    "time.sleep": "time.sleep() blocks the event loop; use await asyncio.sleep()",
    "urllib.request.urlopen": "urllib.request.urlopen() is synchronous network I/O",
    "urllib.request.urlretrieve": "urllib.request.urlretrieve() is synchronous network I/O",
    "subprocess.run": "subprocess.run() waits for the child process",
    "subprocess.call": "subprocess.call() waits for the child process",
    "subprocess.check_call": "subprocess.check_call() waits for the child process",
    "subprocess.check_output": "subprocess.check_output() waits for the child process",
    "subprocess.getoutput": "subprocess.getoutput() waits for the child process",
    "os.system": "os.system() waits for the child process",
    "os.popen": "os.popen() runs a shell synchronously",
    "os.wait": "os.wait() blocks", "os.waitpid": "os.waitpid() blocks",
    "shutil.copy": "shutil.copy() is synchronous file I/O", "shutil.copyfile": "shutil.copyfile() is file I/O",
    "shutil.copytree": "shutil.copytree() is file I/O", "shutil.rmtree": "shutil.rmtree() is file I/O",
    "shutil.move": "shutil.move() is file I/O",
    "torch.cuda.synchronize": "torch.cuda.synchronize() waits for the GPU",
    "torch.load": "torch.load() reads and unpickles a file",
    "pickle.load": "pickle.load() reads a file", "json.load": "json.load() reads a file",
    "socket.create_connection": "socket.create_connection() blocks",
    "builtins.open": "open() is synchronous file I/O", "builtins.input": "input() blocks on stdin",
}
"""Qualified name -> why it blocks the event loop (C003)."""

BLOCKING_MODULES = {
    "requests": "requests is synchronous HTTP; use httpx.AsyncClient or aiohttp",
    "httpx": "httpx's module-level functions are synchronous; use httpx.AsyncClient",
    "urllib3": "urllib3 is synchronous HTTP",
}
"""Modules all of whose calls block (``requests.get``, ``requests.Session().post`` through a variable excluded)."""

HTTPX_ASYNC = frozenset({"httpx.AsyncClient", "httpx.AsyncHTTPTransport", "httpx.Timeout", "httpx.Limits",
                         "httpx.URL", "httpx.Headers", "httpx.Request", "httpx.Response", "requests.Request",
                         "requests.Response", "requests.exceptions", "requests.codes", "httpx.HTTPError",
                         "httpx.HTTPStatusError", "requests.RequestException", "requests.HTTPError"})
"""Names in :data:`BLOCKING_MODULES` that do not block."""

BLOCKING_METHODS = {
    "read_text": "Path.read_text() is synchronous file I/O",
    "read_bytes": "Path.read_bytes() is synchronous file I/O",
    "write_text": "Path.write_text() is synchronous file I/O",
    "write_bytes": "Path.write_bytes() is synchronous file I/O",
    "synchronize": "synchronize() waits for the GPU",
    "cuda": ".cuda() copies to the GPU synchronously",
}
"""Method names that block whatever the receiver (C003)."""

DATALOADERS = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})
"""Qualified names of the PyTorch DataLoader."""

NOT_FORWARD_NAME_RE = re.compile(
    r"(^|_)(loss|losses|criterion|bce\w*|mse|nll|l1|l2|kl_div|cross_entropy|focal|sigmoid|softmax|relu|gelu|"
    r"activation|act|dropout|pool|upsample|pad|padding|padder)(_|$)", re.I)
"""Modules called like models that are losses or activations (``self.BCEcls(...)``, ``self.wh_bin_sigmoid(x)``):
work on the device (a loop calling one is hot), not a model forward."""

FUNCTIONAL_LAYER_RE = re.compile(
    r"(Loss|Pad[123]d|Pool[123]d|Dropout[123]?d?|Softmax[123]?d?|Softmin|ReLU\d?|GELU|SiLU|Sigmoid|Tanh|Identity|"
    r"Flatten|Unflatten|Upsample\w*|Fold|Unfold|PixelShuffle|PixelUnshuffle|ZeroPad\w*|CosineSimilarity)$")
"""``torch.nn`` classes that are functions with no weights (losses, padding, pooling, activations): not models."""

LOSS_FUNCTION_RE = re.compile(r"(loss|criterion|cross_entropy|nll|mse|l1|bce|kl_div)", re.I)
"""Callee names whose result is a loss tensor that carries the autograd graph."""

DETACHERS = frozenset({"detach", "item", "cpu", "tolist", "numpy", "detach_", "float", "int", "clone_detach"})
"""Method or builtin names that drop the autograd graph (or copy to host) before a value is kept."""

HOST_SYNCS = frozenset({"item", "cpu", "numpy", "tolist"})
"""Tensor methods that copy to the host and wait for the device (C006)."""

INFERENCE_FUNCTION_RE = re.compile(
    r"(^|_)(predict|prediction|predictions|infer|inference|evaluate|evaluation|eval|serve|validate|"
    r"validation|classify|embed|score)(_|$)"
)
"""Function names that say "inference" (C004 asks these for no_grad)."""

TRAINING_METHODS = frozenset({"backward", "zero_grad", "clip_grad_norm_"})
"""Method names that mark a function as training code."""

DTYPE_PREFIX = "torch."
"""``.to(torch.float16)`` is a dtype cast, not a device copy."""

LOADER_NAME_RE = re.compile(r"(loader|batches|(^|_)dl$|(^|_)batch(es)?($|_))", re.I)
"""Iterables that yield batches, not samples (C007 does not flag loops over them)."""


# -- what a name holds (value kinds) --------------------------------------------------------------------------------
PIPELINE_CLASS_RE = re.compile(r"(Pipeline|Predictor|PipelineFor\w*)$|^AutoPipelineFor")
"""``from_pretrained`` classes whose objects run a model and manage autograd themselves (diffusers pipelines,
``SAM2ImagePredictor``, pyannote ``Pipeline``)."""

NOT_MODEL_CLASS_RE = re.compile(
    r"(Tokenizer(Fast)?|Processor|FeatureExtractor|ImageProcessor|Config|Configuration|GenerationConfig|Scheduler|"
    r"Streamer|Vocab|Vocabulary|Dataset|Args|Arguments|Settings)$"
)
"""``from_pretrained`` (or constructor) classes whose objects are not models: tokenizers, processors, configs."""

FOREIGN_MODEL_PRODUCERS = frozenset(
    {
        "faster_whisper.WhisperModel", "fastembed.TextEmbedding", "fastembed.ImageEmbedding",
        "fastembed.SparseTextEmbedding", "onnxruntime.InferenceSession", "tensorflow.keras.models.load_model",
        "keras.models.load_model", "keras.saving.load_model", "tensorflow.saved_model.load", "ultralytics.YOLO",
        "ctranslate2.Generator", "ctranslate2.Translator", "llama_cpp.Llama", "tritonclient.http.InferenceServerClient",
        "xgboost.Booster", "lightgbm.Booster", "paddleocr.PaddleOCR", "easyocr.Reader", "spacy.load",
        "tensorflow.lite.Interpreter", "tflite_runtime.interpreter.Interpreter", "inspireface.InspireFaceSession",
        "insightface.app.FaceAnalysis", "insightface.model_zoo.get_model",
    }
)
"""Calls that build a model of another framework: its calls block an event loop, but autograd is not torch's."""

FOREIGN_MODEL_PREFIXES = ("pyannote.audio.pipelines.", "sklearn.", "keras.applications.",
                          "tensorflow.keras.applications.")
"""Qualified-name prefixes of other frameworks' model builders."""

PIPELINE_PRODUCER_PREFIXES = ("diffusers.",)
"""Libraries whose ``*Pipeline`` classes run models without autograd (``__call__`` is ``@torch.no_grad()``)."""

HOST_TENSOR_FACTORIES = frozenset(
    {
        "torch.tensor", "torch.as_tensor", "torch.from_numpy", "torch.Tensor", "torch.FloatTensor",
        "torch.LongTensor", "torch.zeros", "torch.ones", "torch.arange", "torch.empty", "torch.full",
        "torch.linspace", "torch.rand", "torch.randn",
    }
)
"""Tensor factories that build on the host unless given ``device=`` (reading them back needs no device sync)."""

PYDANTIC_BASES = frozenset(
    {
        "pydantic.BaseModel", "pydantic.main.BaseModel", "pydantic.v1.BaseModel", "pydantic.RootModel",
        "pydantic.BaseSettings", "pydantic_settings.BaseSettings", "sqlmodel.SQLModel", "pydantic.dataclasses",
        "langchain_core.pydantic_v1.BaseModel", "langchain.pydantic_v1.BaseModel",
    }
)
"""Base classes of pydantic models (data classes, not neural networks)."""

PYDANTIC_METHODS = frozenset(
    {
        "model_validate", "model_validate_json", "model_validate_strings", "model_dump", "model_dump_json",
        "model_copy", "model_construct", "model_json_schema", "model_post_init", "model_rebuild",
        "model_parametrized_name", "model_fields", "model_computed_fields", "model_config", "model_extra",
        "model_fields_set",
    }
)
"""Pydantic v2 methods: ``model_`` in a method name does not make a call a model forward."""

MODULE_METHODS = frozenset(
    {
        "eval", "load_state_dict", "parameters", "named_parameters", "named_modules", "modules", "children",
        "named_children", "register_forward_hook", "register_forward_pre_hook", "register_buffer",
        "requires_grad_", "get_submodule", "state_dict", "buffers", "named_buffers", "half", "bfloat16",
        "share_memory", "apply", "to_empty", "zero_grad",
    }
)
"""``nn.Module`` methods: calling one on an object whose assignment is not visible says it is a module."""

MODULE_EVIDENCE_METHODS = frozenset(
    {"eval", "load_state_dict", "parameters", "named_parameters", "named_modules", "modules", "children",
     "register_forward_hook", "register_forward_pre_hook", "requires_grad_", "get_submodule"}
)
"""The subset of :data:`MODULE_METHODS` that only modules have (optimizers have ``state_dict``/``zero_grad``)."""

HOUSEKEEPING_METHODS = MODULE_METHODS | frozenset(
    {
        "to", "cuda", "cpu", "float", "double", "train", "type", "save_pretrained", "push_to_hub",
        "resize_token_embeddings", "get_input_embeddings", "get_output_embeddings", "set_input_embeddings",
        "tie_weights", "gradient_checkpointing_enable", "gradient_checkpointing_disable", "num_parameters",
        "enable_model_cpu_offload", "enable_sequential_cpu_offload", "enable_xformers_memory_efficient_attention",
        "enable_attention_slicing", "set_adapter", "merge_and_unload", "print_trainable_parameters",
        "get_config", "get_params", "set_params", "compile", "summary", "save", "get_inputs", "get_outputs",
        "get_providers", "set_progress_bar_config", "register_modules", "keys", "items", "values", "get",
    }
)
"""Methods of a model object that do not run it (moving, configuring, saving): no model work in async def."""

FORWARD_METHOD_RE = re.compile(r"^(forward|get_\w+_features|encode(_\w+)?|embed(_\w+)?|infer|inference)$")
"""Methods of a torch model that run a forward (C004 asks them for no_grad, like ``model(x)``)."""

NAMED_FORWARD_RE = re.compile(r"^(forward|get_\w+_features|encode_(image|text|images|texts))$")
"""Forward methods that count even when the model is known only by its name (``self.model.get_text_features``)."""

BLOCKING_MODEL_METHODS = frozenset(
    {"generate", "predict", "chat", "chat_stream", "stream_chat", "transcribe", "encode", "embed", "caption",
     "query", "detect", "infer", "inference", "forward", "generate_content", "predict_proba", "run"}
)
"""Methods that run a model when the receiver is only named like one (its assignment is not visible)."""

LIGHTNING_GRAD_FREE_HOOKS = frozenset({"validation_step", "test_step", "predict_step", "on_validation_epoch_end",
                                       "on_test_epoch_end", "validation_epoch_end", "test_epoch_end"})
"""LightningModule hooks the Trainer runs with autograd off."""

TRAINING_CLASS_METHODS = frozenset({"training_step", "configure_optimizers"})
"""Methods that make a class (a LightningModule) training code: the Trainer calls backward and step."""

TRAINER_FITS = frozenset({"fit", "train"})
"""``trainer.fit(...)``/``trainer.train()``: a framework runs the training loop."""

EXPORTERS = frozenset(
    {"torch.onnx.export", "torch.jit.trace", "torch.jit.script", "torch.export.export", "torch.onnx.dynamo_export",
     "torch.jit.trace_module",
     # conversion to other runtimes: TF/Keras, TFLite, OpenVINO, ONNX, Core ML, TensorRT
     "tensorflow.lite.TFLiteConverter.from_keras_model", "tensorflow.lite.TFLiteConverter.from_saved_model",
     "tensorflow.lite.TFLiteConverter.from_concrete_functions", "tensorflow.saved_model.save",
     "tensorflow.keras.models.save_model", "keras.models.save_model", "keras.saving.save_model",
     "openvino.convert_model", "openvino.save_model", "openvino.serialize", "openvino.runtime.serialize",
     "openvino.tools.mo.convert_model", "onnx.save", "onnx.save_model", "onnxsim.simplify", "coremltools.convert",
     "tensorrt.Builder", "torch_tensorrt.compile", "tf2onnx.convert.from_keras", "onnx_tf.backend.prepare"}
)
"""Export and conversion calls: a forward next to one runs once for shapes or to check the converted model, not as
inference to speed up."""

HANDLER_BASES = {
    "ts.torch_handler.base_handler.BaseHandler": ("torchserve", frozenset({"handle", "inference", "preprocess",
                                                                           "postprocess", "predict"})),
    "litserve.LitAPI": ("litserve", frozenset({"predict", "decode_request", "encode_response", "batch", "unbatch"})),
    "litserve.api.LitAPI": ("litserve", frozenset({"predict", "decode_request", "encode_response", "batch",
                                                   "unbatch"})),
    "bentoml.Runnable": ("bentoml", frozenset()),
    "mlserver.MLModel": ("mlserver", frozenset({"predict"})),
    "kserve.Model": ("kserve", frozenset({"predict", "preprocess", "postprocess"})),
    "cog.BasePredictor": ("cog", frozenset({"predict"})),
}
"""Serving framework base classes -> (framework, the methods it calls per request)."""

HANDLER_BASE_PREFIXES = {"ts.torch_handler.": "ts.torch_handler.base_handler.BaseHandler"}
"""Modules whose classes all derive from a base in :data:`HANDLER_BASES` (TorchServe's ImageClassifier, ...)."""

FRAMEWORK_MODEL_ATTRS = {"torchserve": frozenset({"model"})}
"""Attributes a framework base class sets to a torch model (TorchServe's ``BaseHandler.initialize``)."""

REQUEST_METHOD_DECORATORS = frozenset({"bentoml.Runnable.method", "bentoml.api", "bentoml.task"})
"""Decorators that make a method a per-request handler (BentoML runnables and services)."""

TRITON_CLASS = "TritonPythonModel"
"""Triton's Python backend class: ``execute(self, requests)`` runs per batch of requests."""

TEST_FILE_RE = re.compile(r"(^|/)(test_[^/]*|[^/]*_test|conftest)\.py$")
"""Test modules (``test_*.py``, ``*_test.py``, ``conftest.py``): performance rules skip them. Other files under
``tests/`` (helpers, servers for end-to-end tests) are checked, but their ``test_*`` functions and fixtures are not."""

TEST_DIR_RE = re.compile(r"(^|/)([\w.-]*[-_])?(tests?|testing)/")
"""Folders of test code (``tests/``, ``integration-tests/``): a coroutine there serves traffic only if it is a route."""

GRAD_DISABLER_NAME_RE = re.compile(r"(inference_mode|no_grad)", re.I)
"""A decorator or context manager from another module named like one (``@smart_inference_mode()``)."""

MEMORY_PROBES = frozenset(
    {"torch.cuda.max_memory_allocated", "torch.cuda.memory_allocated", "torch.cuda.reset_peak_memory_stats",
     "torch.cuda.memory_reserved", "torch.cuda.max_memory_reserved", "torch.cuda.memory_summary",
     "torch.cuda.memory_stats", "torch.cuda.mem_get_info", "torch.cuda.reset_max_memory_allocated"}
)
"""Memory measurements: ``empty_cache`` next to one is part of measuring, not a fix (C012)."""

PROFILING_NAME_RE = re.compile(r"(profil|bench|measure|memory|mem_|_mem|cleanup|clean_up|clear|free|release|gc_)",
                               re.I)
"""Function names of profiling, benchmarking and cleanup helpers (C012 leaves their ``empty_cache`` alone)."""

CUDA_PROVIDERS = frozenset(
    {"torch.accelerator.current_accelerator", "torch.cuda.current_device", "torch.get_default_device"}
)
"""Calls whose result is the accelerator device."""

ACCELERATOR_OBJECTS = frozenset(
    {"accelerate.Accelerator", "lightning.Fabric", "lightning.fabric.Fabric", "lightning_fabric.Fabric",
     "pytorch_lightning.Trainer", "lightning.Trainer", "lightning.pytorch.Trainer",
     "pytorch_lightning.lite.LightningLite"}
)
"""Framework objects that move data to the accelerator (``accelerator.device``, ``fabric.device``)."""

TORCH_LOAD_WRAPPERS = {"ultralytics.utils.patches.torch_load": "ultralytics' torch_load()"}
"""Library functions that call ``torch.load`` with ``weights_only=False`` unless told otherwise (C014 treats them as
``torch.load`` with the unsafe default): qualified name -> how a message names it."""

BATCH_SPLITTERS = frozenset({"torch.chunk", "torch.split", "torch.tensor_split", "torch.unbind"})
"""Calls that cut a batch the code already holds into pieces: a loop over the pieces is a deliberate choice (a
backend with a fixed batch size, bounded memory), not per-sample work waiting to be batched (C007)."""

BATCH_SPLIT_METHODS = frozenset({"chunk", "tensor_split", "unbind"})
"""Tensor methods that cut a batch into pieces (``im.chunk(n)``); ``split`` is left out: strings have one."""

SYNC_CLIENTS = frozenset(
    {"boto3.client", "boto3.resource", "boto3.session.Session.client", "boto3.session.Session.resource",
     "requests.Session", "requests.sessions.Session", "httpx.Client", "urllib3.PoolManager",
     "huggingface_hub.InferenceClient"}
)
"""Constructors of synchronous network clients: a method call on the object does network I/O and blocks an event
loop (C003)."""

SYNC_CLIENT_SAFE_METHODS = frozenset({"close", "mount", "headers", "cookies", "meta", "exceptions", "get_paginator",
                                      "get_waiter", "can_paginate", "generate_presigned_url"})
"""Methods of such clients that do no network I/O."""

STARTUP_KEYWORDS = frozenset({"lifespan", "on_startup", "on_shutdown"})
"""Keywords of app constructors that name start-up and shutdown code (``FastAPI(lifespan=lifespan)``,
``Starlette(on_startup=[load])``): it runs before or after serving, not per request."""

STARTUP_EVENTS = frozenset({"startup", "shutdown", "before_server_start", "after_server_start",
                            "before_server_stop", "after_server_stop", "main_process_start"})
"""Event names of start-up and shutdown hooks (``@app.on_event("startup")``, Sanic listeners)."""

STARTUP_DECORATORS = frozenset({"before_serving", "after_serving", "before_server_start", "after_server_start",
                                "before_server_stop", "after_server_stop", "main_process_start", "on_startup",
                                "on_shutdown"})
"""Decorator attributes that register start-up and shutdown hooks (Quart ``@app.before_serving``, Sanic)."""

STARTUP_LISTS = frozenset({"on_startup", "on_shutdown", "on_cleanup", "cleanup_ctx"})
"""aiohttp's hook lists (``app.on_startup.append(load_model)``)."""


def known_qualname(qual: str) -> bool:
    """A qualified name the scan has knowledge of (a loader, a producer, a blocking call, a grad disabler ...)."""
    return qual in _KNOWN or qual.startswith(_KNOWN_PREFIXES)


_KNOWN = (MODEL_LOADERS | MODEL_PRODUCERS | PIPELINE_PRODUCERS | FOREIGN_MODEL_PRODUCERS | frozenset(BLOCKING_CALLS)
          | GRAD_DISABLERS | EXPORTERS | DATALOADERS | APP_CONSTRUCTORS | OFFLOADERS | ACCELERATOR_OBJECTS
          | RAY_SERVE_DECORATORS | ROUTE_FACTORIES | frozenset(TORCH_LOAD_WRAPPERS) | BATCH_SPLITTERS
          | SYNC_CLIENTS | HOST_TENSOR_FACTORIES)
_KNOWN_PREFIXES = (*MODEL_LOADER_PREFIXES, *FOREIGN_MODEL_PREFIXES, *PIPELINE_PRODUCER_PREFIXES, "torch.nn.",
                   "torch.cuda.")
