"""What a name holds: value-kind inference over one file.

Every rule that asks "is this a model?" asks here. A name's kind comes from what was assigned to it: a local
assignment earlier in the function, ``self.<attr>`` assigned in any method of the class or of a base class in the
same file (also through a helper: ``self.pipeline = self._initialize_pipeline()`` takes the helper's ``return``), a
module global (assigned at module level, under ``if __name__ == "__main__":`` or through ``global``), or a
parameter's annotation. Kinds:

- :data:`MODEL`: a torch ``nn.Module`` (a subclass defined in the file, torchvision/timm builders,
  ``from_pretrained`` of a model class, ``torch.jit.load``/``torch.compile`` results, ``X().eval()``);
- :data:`PIPELINE`: an object that runs a model and manages autograd itself (HF ``pipeline``, diffusers pipelines,
  ``SentenceTransformer``, vLLM, ``*Predictor.from_pretrained``);
- :data:`FOREIGN`: a model of another framework (Keras, ONNX Runtime, faster-whisper, fastembed, scikit-learn);
- :data:`NAMED`: not resolved, but a parameter or alias named like a model (``model``, ``text_encoder``);
- :data:`NOT_MODEL`: known not to be a model: pydantic models, tokenizers, processors, configs, lambdas, functions,
  literals and containers;
- data-flow kinds for the loop rules: a model output or loss (they carry the autograd graph), pinned memory, a
  (pinned) DataLoader, a CUDA device, a host tensor, an app, an accelerator object, the pieces of a batch cut with
  ``torch.chunk``/``split``/``unbind``, a synchronous network client (boto3, ``requests.Session``).

``None`` means unknown; callers then judge by the name alone, as before this module existed.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from infradoctor.scan import knowledge as K
from infradoctor.scan.index import ClassInfo, FileIndex, FunctionInfo, Value
from infradoctor.scan.syntax import dotted, is_const, is_model_name, keyword, mentions_cuda

MODEL = "model"
PIPELINE = "pipeline"
FOREIGN = "foreign"
NAMED = "named"
NOT_MODEL = "not_model"
OUTPUT = "model_output"
LOSS = "loss"
PINNED = "pinned"
PINNED_LOADER = "pinned_loader"
LOADER = "loader"
CUDA = "cuda"
HOST = "host_tensor"
APP = "app"
ACCELERATOR = "accelerator"
SPLIT = "batch_pieces"
SYNC_CLIENT = "sync_client"
NONE_CONST = "none"

MODEL_KINDS = frozenset({MODEL, PIPELINE, FOREIGN})
"""Kinds whose calls run a model (they block an event loop)."""
GRAPH_KINDS = frozenset({OUTPUT, LOSS})
"""Kinds that carry an autograd graph."""
_PRIORITY = (MODEL, PIPELINE, FOREIGN, NAMED, CUDA, PINNED_LOADER, LOADER, ACCELERATOR, APP)
_BUILTIN_TYPES = frozenset({"str", "int", "float", "bool", "bytes", "dict", "list", "tuple", "set", "Dict", "List",
                            "Tuple", "Set", "Any", "Callable", "Iterable", "Iterator", "Sequence", "Mapping",
                            "Request", "Response", "UploadFile", "WebSocket", "Path", "ndarray", "Image"})
_WRAPPERS = frozenset({"torch.compile", "torch.jit.script", "torch.jit.trace"})
_MOVES = frozenset({"to", "cuda", "eval", "half", "float", "bfloat16", "train", "requires_grad_", "double",
                    "share_memory", "to_empty", "float16"})


class Env(Protocol):
    """Where local names are looked up for one evaluation."""

    @property
    def cls(self) -> ClassInfo | None:
        """The class whose ``self`` is in scope."""

    def local(self, name: str) -> tuple[bool, str | None]:
        """(found, kind) of a name bound in the function(s) being evaluated."""


@dataclass(frozen=True)
class ClassCategory:
    """What a class of the file is, through its bases in the file."""

    module: bool = False
    """An ``nn.Module`` (or LightningModule, PreTrainedModel) subclass."""
    pydantic: bool = False
    """A pydantic model (data, not a network)."""
    lightning: bool = False
    """A LightningModule (the Trainer drives it)."""
    trains: bool = False
    """It has ``training_step``/``configure_optimizers`` (a LightningModule that trains)."""
    handler: str | None = None
    """Serving framework when the class is a request handler class (TorchServe, LitServe, BentoML, ...)."""
    handler_methods: frozenset[str] = frozenset()
    """Its per-request methods."""
    external_bases: bool = False
    """Some base class is not defined in this file (what it assigns is not visible)."""


class _ModuleEnv:
    cls = None

    def local(self, name: str) -> tuple[bool, str | None]:
        return False, None


class FunctionEnv:
    """Names as seen from inside an indexed function (its assignments taken together, not in order)."""

    def __init__(self, values: Values, fn: FunctionInfo) -> None:
        self.values = values
        self.fn = fn
        owner, parent = fn.cls, fn.parent
        while owner is None and parent is not None:
            owner, parent = parent.cls, parent.parent
        self._cls = owner

    @property
    def cls(self) -> ClassInfo | None:
        """The class of the method (or of the method a nested def is in)."""
        return self._cls

    def local(self, name: str) -> tuple[bool, str | None]:
        """(found, kind) from the function's own assignments and parameters, then the enclosing functions'."""
        fn: FunctionInfo | None = self.fn
        while fn is not None:
            if name in fn.globals:
                return False, None
            found, kind = self.values.local_kind(fn, name)
            if found:
                return True, kind
            fn = fn.parent
        return False, None


MODULE_ENV = _ModuleEnv()


def combine(kinds: Iterable[str | None]) -> str | None:
    """One kind for a name assigned several times: a model wins; unknown beats "not a model"."""
    seen = [k for k in kinds if k != NONE_CONST]
    if not seen:
        return NOT_MODEL
    for kind in _PRIORITY:
        if kind in seen:
            return kind
    if None in seen:
        return None
    first = seen[0]
    return first if all(k == first for k in seen) else NOT_MODEL


class Values:
    """Value-kind inference for one file (memoised; safe against recursive definitions)."""

    def __init__(self, index: FileIndex) -> None:
        self.index = index
        self.aliases = index.aliases
        self._cache: dict[tuple[object, ...], str | None] = {}
        self._active: set[tuple[object, ...]] = set()
        self._categories: dict[str, ClassCategory] = {}

    # -- names --------------------------------------------------------------------------------------------------
    def resolve(self, key: str | None) -> str | None:
        """Qualified name of a dotted name through the file's imports, or None when not imported."""
        if not key:
            return None
        head, _, rest = key.partition(".")
        target = self.aliases.get(head)
        if target is None or head in self.index.shadowed:
            return self.index.star_resolve(key) if self.index.star_modules else None
        return f"{target}.{rest}" if rest else target

    def _memo(self, key: tuple[object, ...], compute: object) -> str | None:
        if key in self._cache:
            return self._cache[key]
        if key in self._active:
            return None
        self._active.add(key)
        try:
            value = compute()  # type: ignore[operator]
        finally:
            self._active.discard(key)
        self._cache[key] = value
        return value  # type: ignore[no-any-return]

    def local_kind(self, fn: FunctionInfo, name: str) -> tuple[bool, str | None]:
        """(found, kind) of a name assigned in ``fn`` or one of its parameters."""
        assigned = fn.assigns.get(name)
        if assigned is not None:
            env = FunctionEnv(self, fn)
            return True, self._memo(("local", id(fn), name), lambda: self.combine_values(assigned, env))
        if name in fn.params:
            return True, self.param_kind(name, fn.params[name], fn)
        return False, None

    def combine_values(self, values: Iterable[Value], env: Env) -> str | None:
        """The combined kind of several assigned values."""
        return combine(self.infer(v, env) if v is not None else None for v in values)

    def param_kind(self, name: str, annotation: ast.expr | None, fn: FunctionInfo | None = None) -> str | None:
        """A parameter's kind: from its annotation, else from its name (``model`` is :data:`NAMED`)."""
        if name in ("self", "cls") and fn is not None and fn.cls is not None:
            return NOT_MODEL
        if annotation is not None:
            kind = self.annotation_kind(annotation)
            if kind is not None:
                return kind
        low = name.lower()
        if low in K.NOT_MODEL_NAMES or low.endswith(("_fn", "_func", "_factory", "_builder")):
            return NOT_MODEL
        return NAMED if is_model_name(name) else None

    def annotation_kind(self, annotation: ast.expr) -> str | None:
        """The kind an annotation promises (``nn.Module`` -> model, a pydantic class or ``str`` -> not a model)."""
        if isinstance(annotation, ast.Subscript):  # Optional[X], list[X]
            outer = dotted(annotation.value) or ""
            if outer.rsplit(".", 1)[-1] in ("Optional", "Union", "Annotated"):
                inner = annotation.slice.elts[0] if isinstance(annotation.slice, ast.Tuple) else annotation.slice
                return self.annotation_kind(inner)
            return NOT_MODEL
        if isinstance(annotation, ast.BinOp):  # X | None
            return self.annotation_kind(annotation.left)
        if isinstance(annotation, ast.Constant):
            return None
        key = dotted(annotation)
        if key is None:
            return None
        last = key.rsplit(".", 1)[-1]
        qual = self.resolve(key) or key
        if last in _BUILTIN_TYPES or K.NOT_MODEL_CLASS_RE.search(last) or qual in K.PYDANTIC_BASES:
            return NOT_MODEL
        if last in self.index.classes:
            category = self.category(last)
            if category.module:
                return MODEL
            if category.pydantic:
                return NOT_MODEL
            return None
        if qual.startswith("torch.nn.") or last in K.MODULE_BASES or last.endswith(("PreTrainedModel", "Module")):
            return MODEL
        if K.PIPELINE_CLASS_RE.search(last):
            return PIPELINE
        return None

    # -- classes ------------------------------------------------------------------------------------------------
    def category(self, name: str) -> ClassCategory:
        """What a class of the file is (through its bases defined in the file)."""
        found = self._categories.get(name)
        if found is not None:
            return found
        self._categories[name] = ClassCategory()  # a recursive base chain ends here
        info = self.index.classes.get(name)
        if info is None:
            return self._categories[name]
        module = pydantic = lightning = external = False
        handler: str | None = None
        methods: frozenset[str] = frozenset()
        for base in info.bases:
            last = base.rsplit(".", 1)[-1]
            if base in self.index.classes and base != name:
                inner = self.category(base)
                module |= inner.module
                pydantic |= inner.pydantic
                lightning |= inner.lightning
                external |= inner.external_bases
                if inner.handler and handler is None:
                    handler, methods = inner.handler, inner.handler_methods
                continue
            if base == "object":
                continue
            external = True
            qual = self.resolve(base) or base
            if qual in K.PYDANTIC_BASES or last in ("BaseModel", "BaseSettings", "RootModel", "SQLModel") and not (
                    qual.startswith("torch")):
                pydantic = True
            elif qual in ("torch.nn.Module", "torch.nn.modules.module.Module") or qual.startswith("torch.nn.") or (
                    last in K.MODULE_BASES or last.endswith(("PreTrainedModel", "Module"))):
                module = True
                lightning |= "Lightning" in last
            framework = K.HANDLER_BASES.get(qual)
            if framework is None:
                for prefix, base_qual in K.HANDLER_BASE_PREFIXES.items():
                    if qual.startswith(prefix):
                        framework = K.HANDLER_BASES[base_qual]
            if framework is not None and handler is None:
                handler, methods = framework
        trains = any(m in K.TRAINING_CLASS_METHODS for m in info.methods) or (
            any(self.category(b).trains for b in info.bases if b in self.index.classes and b != name))
        if handler is None:
            handler, methods = self._duck_handler(info)
        found = ClassCategory(module, pydantic, lightning, trains, handler, methods, external)
        self._categories[name] = found
        return found

    @staticmethod
    def _duck_handler(info: ClassInfo) -> tuple[str | None, frozenset[str]]:
        """A TorchServe handler written as a plain class, or a Triton Python backend model."""
        handle = info.methods.get("handle")
        if "initialize" in info.methods and handle is not None and len(handle.params) >= 3:
            return "torchserve", frozenset({"handle", "inference", "preprocess", "postprocess"})
        if info.name == K.TRITON_CLASS and "execute" in info.methods:
            return "triton", frozenset({"execute"})
        return None, frozenset()

    def attr_kind(self, cls: ClassInfo, attr: str) -> str | None:
        """What ``self.<attr>`` holds in a class: its assignments here or in base classes of the file."""
        return self._memo(("attr", id(cls), attr), lambda: self._attr_kind(cls, attr))

    def _attr_kind(self, cls: ClassInfo, attr: str) -> str | None:
        assigned = cls.attrs.get(attr)
        if assigned is not None:
            kinds = []
            for value, fn in assigned:
                env: Env = FunctionEnv(self, fn) if fn is not None else MODULE_ENV
                kinds.append(self.infer(value, env) if value is not None else None)
            kind = combine(kinds)
            if kind in (None, NAMED) and f"self.{attr}" in self.index_module_evidence:
                return MODEL
            return kind
        for base in cls.bases:
            info = self.index.classes.get(base)
            if info is not None and info is not cls:
                kind = self.attr_kind(info, attr)
                if kind is not None or attr in info.attrs:
                    return kind
        category = self.category(cls.name)
        if category.handler and attr in K.FRAMEWORK_MODEL_ATTRS.get(category.handler, ()):
            return MODEL
        if f"self.{attr}" in self.index_module_evidence:
            return MODEL
        if category.external_bases or category.module:
            return NOT_MODEL  # set, if at all, by a class in another file: do not assume a model
        return None

    @property
    def index_module_evidence(self) -> set[str]:
        """Names on which an ``nn.Module``-only method is called in the file (``self.model.eval()``)."""
        return self.index.module_evidence

    def method(self, cls: ClassInfo | None, name: str) -> FunctionInfo | None:
        """A method of a class of the file, looked up through its bases in the file."""
        seen: set[int] = set()
        while cls is not None and id(cls) not in seen:
            seen.add(id(cls))
            found = cls.methods.get(name)
            if found is not None:
                return found
            cls = next((self.index.classes[b] for b in cls.bases if b in self.index.classes), None)
        return None

    def return_kind(self, fn: FunctionInfo) -> str | None:
        """What a function of the file returns."""
        if fn.generator or not fn.returns:
            return None if fn.generator else NOT_MODEL

        def compute() -> str | None:
            env = FunctionEnv(self, fn)
            return combine(self.infer(v, env) for v in fn.returns)

        return self._memo(("return", id(fn)), compute)

    def module_kind(self, name: str) -> str | None:
        """What a module global holds (assigned at module level, under ``__main__`` or through ``global``)."""
        assigned = self.index.module_assigns.get(name)
        if assigned is None:
            if name in self.index.classes or name in self.index.functions:
                return NOT_MODEL
            return None
        return self._memo(("module", name), lambda: self.combine_values(assigned, MODULE_ENV))

    # -- expressions --------------------------------------------------------------------------------------------
    def key_kind(self, key: str, env: Env) -> str | None:
        """The kind of a dotted name (``model``, ``self.pipeline``, ``self.model.encoder``)."""
        head, _, rest = key.partition(".")
        if not rest:
            found, kind = env.local(head)
            if found:
                return kind
            return self.module_kind(head)
        if head in ("self", "cls"):
            cls = env.cls
            if cls is None:
                return None
            attr, _, more = rest.partition(".")
            kind = self.attr_kind(cls, attr)
            return kind if not more else _attribute_of(kind, more)
        found, kind = env.local(head)
        if not found:
            kind = self.module_kind(head)
        return _attribute_of(kind, rest)

    def infer(self, node: ast.expr, env: Env) -> str | None:
        """The kind of an expression's value."""
        if isinstance(node, ast.Call):
            return self.infer_call(node, env)
        if isinstance(node, (ast.Name, ast.Attribute)):
            key = dotted(node)
            if key is None:
                return None
            kind = self.key_kind(key, env)
            if kind is None and isinstance(node, ast.Attribute) and node.attr == "device":
                base = self.key_kind(dotted(node.value) or "", env) if dotted(node.value) else None
                if base in (ACCELERATOR, MODEL):
                    return CUDA if base == ACCELERATOR else None
            if kind is None:
                low = key.rsplit(".", 1)[-1].lower()
                if low in K.NOT_MODEL_NAMES or low.endswith(("_fn", "_func")):
                    return NOT_MODEL
                if is_model_name(key):
                    return NAMED
            return kind
        if isinstance(node, ast.Constant):
            if node.value is None:
                return NONE_CONST
            return CUDA if isinstance(node.value, str) and "cuda" in node.value else NOT_MODEL
        if isinstance(node, ast.IfExp):
            if mentions_cuda(node):
                return CUDA
            return combine((self.infer(node.body, env), self.infer(node.orelse, env)))
        if isinstance(node, (ast.Lambda, ast.JoinedStr, ast.List, ast.Tuple, ast.Dict, ast.Set, ast.ListComp,
                             ast.DictComp, ast.SetComp, ast.GeneratorExp, ast.Compare, ast.BoolOp)):
            return NOT_MODEL
        if isinstance(node, ast.Subscript):
            base = self.infer(node.value, env)
            return base if base in GRAPH_KINDS or base == PINNED else None
        if isinstance(node, ast.Await):
            return None
        return None

    def infer_call(self, node: ast.Call, env: Env) -> str | None:  # noqa: C901
        """The kind of a call's result."""
        func = node.func
        key = dotted(func)
        qual = self.resolve(key)
        name = func.attr if isinstance(func, ast.Attribute) else (func.id if isinstance(func, ast.Name) else "")
        if qual is not None:
            if qual in _WRAPPERS:  # torch.compile(fn) is a function, torch.compile(model) a model
                return self._wrapped_kind(node, env)
            kind = self.producer_kind(qual, node)
            if kind is not None:
                return kind
        if name in ("from_pretrained", "from_single_file", "from_config", "from_pipe") and isinstance(
                func, ast.Attribute):
            return self.pretrained_kind(func.value)
        if isinstance(func, ast.Name) and func.id in self.index.classes and func.id not in self.index.shadowed:
            category = self.category(func.id)
            if category.module:
                return MODEL
            if category.pydantic:
                return NOT_MODEL
            return None
        if isinstance(func, ast.Attribute):
            receiver = func.value
            if name in _MOVES:
                inner = self.infer(receiver, env)
                if inner in MODEL_KINDS or inner == NAMED or inner in GRAPH_KINDS:
                    return inner
                if name == "eval" and inner is None:
                    return MODEL
                if name in ("to", "cuda") and inner is None and isinstance(receiver, ast.Call):
                    built = dotted(receiver.func) or ""
                    last = built.rsplit(".", 1)[-1]
                    if last[:1].isupper() and not (self.resolve(built) or "").startswith(("torch.", "numpy.")):
                        return MODEL
                return None
            if name == "pin_memory":
                return PINNED
            if name in K.BATCH_SPLIT_METHODS:
                return SPLIT
            if name in ("cpu", "numpy", "tolist", "item", "detach"):
                return HOST if name != "detach" else None
            if key and key.startswith(("self.", "cls.")) and key.count(".") == 1 and env.cls is not None:
                method = self.method(env.cls, name)
                if method is not None:
                    return self.return_kind(method)
        elif isinstance(func, ast.Name):
            fn = self.index.functions.get(func.id)
            if fn is not None and func.id not in self.index.shadowed:
                return self.return_kind(fn)
            if func.id in ("float", "int", "str", "len", "bool", "list", "dict", "tuple"):
                return NOT_MODEL
        if name in K.MODEL_LOADER_FUNCTIONS:
            return NAMED  # `bento_model.load_model()`, `utils.load_model(path)`: a model, of unknown kind
        if name and K.LOSS_FUNCTION_RE.search(name) and not name[:1].isupper():
            return LOSS
        return None

    def producer_kind(self, qual: str, node: ast.Call) -> str | None:
        """The kind of what a library call returns, by its qualified name."""
        last = qual.rsplit(".", 1)[-1]
        if qual == "torch.device":
            return CUDA if any(mentions_cuda(a) for a in node.args) else None
        if qual in K.CUDA_PROVIDERS:
            return CUDA
        if qual in K.ACCELERATOR_OBJECTS:
            return ACCELERATOR
        if qual in K.APP_CONSTRUCTORS:
            return APP
        if qual in K.DATALOADERS:
            kw = keyword(node, "pin_memory")
            return PINNED_LOADER if kw is not None and is_const(kw.value, True) else LOADER
        if qual in K.PIPELINE_PRODUCERS or (qual.startswith(K.PIPELINE_PRODUCER_PREFIXES)
                                            and K.PIPELINE_CLASS_RE.search(last)):
            return PIPELINE
        if qual in K.FOREIGN_MODEL_PRODUCERS or qual.startswith(K.FOREIGN_MODEL_PREFIXES):
            return FOREIGN
        if qual in K.MODEL_PRODUCERS or (qual.startswith(K.MODEL_LOADER_PREFIXES) and last[:1].islower()
                                         and "Weights" not in qual):
            return MODEL
        if qual.startswith("torch.nn.") and last[:1].isupper() and last not in ("Parameter", "ParameterList",
                                                                                 "ParameterDict"):
            return NOT_MODEL if K.FUNCTIONAL_LAYER_RE.search(last) else MODEL
        if qual in K.BATCH_SPLITTERS:
            return SPLIT
        if qual in K.SYNC_CLIENTS or (qual.startswith("boto3.") and last in ("client", "resource")):
            return SYNC_CLIENT
        if qual in K.HOST_TENSOR_FACTORIES:
            return HOST if keyword(node, "device") is None else None
        if qual in ("functools.partial", "operator.itemgetter"):
            return NOT_MODEL
        if qual.startswith("transformers.") and K.NOT_MODEL_CLASS_RE.search(last):
            return NOT_MODEL
        return None

    def _wrapped_kind(self, node: ast.Call, env: Env) -> str | None:
        """The kind of ``torch.compile(x)``/``torch.jit.script(x)``: a function stays a function, else a model."""
        if not node.args:
            return None
        arg = node.args[0]
        if isinstance(arg, ast.Lambda):
            return NOT_MODEL
        key = dotted(arg)
        if key is not None:
            head, _, rest = key.partition(".")
            if key in self.index.functions or (head in ("self", "cls") and env.cls is not None
                                               and self.method(env.cls, rest) is not None):
                return NOT_MODEL
        inner = self.infer(arg, env)
        return inner if inner in MODEL_KINDS or inner == NOT_MODEL else MODEL

    def pretrained_kind(self, receiver: ast.expr) -> str | None:
        """What ``X.from_pretrained(...)`` returns, by the class ``X``."""
        key = dotted(receiver) or ""
        last = key.rsplit(".", 1)[-1]
        qual = self.resolve(key) or key
        if K.NOT_MODEL_CLASS_RE.search(last):
            return NOT_MODEL
        if K.PIPELINE_CLASS_RE.search(last) or qual.startswith("sentence_transformers."):
            return PIPELINE
        if qual.startswith(K.FOREIGN_MODEL_PREFIXES):
            return FOREIGN
        return MODEL


def _attribute_of(kind: str | None, rest: str) -> str | None:
    """The kind of an attribute of a value: a model's sub-module is a model, a pydantic field is not one."""
    if kind == NOT_MODEL:
        return NOT_MODEL
    if kind in (MODEL, PIPELINE):
        last = rest.rsplit(".", 1)[-1]
        if last in ("config", "device", "dtype", "names", "training", "tokenizer", "processor", "scheduler"):
            return NOT_MODEL
        return MODEL
    if kind in (ACCELERATOR,) and rest == "device":
        return CUDA
    if kind in GRAPH_KINDS:
        if rest == "loss":
            return LOSS
        if rest in ("logits", "last_hidden_state", "pooler_output", "hidden_states"):
            return OUTPUT
    return None
