"""A real queueing model server for the telemetry tests: its queue, batcher and KV budget fill and drain under load.

It runs as its own process (aiohttp). Requests wait in a FIFO queue; a scheduler loop runs one step every
``--step-ms``: each running request produces one token, and waiting requests are admitted while the running batch
is under ``--max-batch`` and the KV budget (``--kv-blocks``, one block per ``--block-tokens`` tokens of prompt
plus output) has room. When a running request needs a new block and none is free, the youngest running request is
preempted: its blocks are freed and it goes back to the front of the queue (its tokens are recomputed later), as
vLLM's scheduler does. ``/metrics`` serves the state under one server's names, written in its exposition shape
(tests/corpus/metrics): ``vllm`` (V1: ``kv_cache_usage_perc``), ``vllm-v0`` (``gpu_cache_usage_perc``), ``tgi``
or ``triton``. ``POST /predict`` (or ``/v1/completions``) answers when the request finished; with ``"stream":
true`` it streams one server-sent event per token (OpenAI completion chunks) so clients can time the first token.
"""

SCRIPT = r'''
import argparse
import asyncio
import json
import time

from aiohttp import web

p = argparse.ArgumentParser()
p.add_argument("port", type=int)
p.add_argument("--flavour", default="vllm", choices=["vllm", "vllm-v0", "tgi", "triton"])
p.add_argument("--step-ms", type=float, default=10.0)
p.add_argument("--max-batch", type=int, default=8)
p.add_argument("--kv-blocks", type=int, default=64)
p.add_argument("--block-tokens", type=int, default=16)
p.add_argument("--prompt-tokens", type=int, default=32)
p.add_argument("--output-tokens", type=int, default=16)
args = p.parse_args()


class Request:
    def __init__(self, stream):
        self.arrived = time.monotonic()
        self.admitted = None
        self.first_token = None
        self.tokens = 0
        self.blocks = 0
        self.done = asyncio.Event()
        self.queue = asyncio.Queue() if stream else None


waiting = []
running = []
state = {"preemptions": 0, "finished": 0, "queue_s": 0.0, "queued": 0, "ttft_s": 0.0, "ttft_n": 0,
         "e2e_s": 0.0, "executions": 0, "items": 0, "generated": 0}
used_blocks = 0


def blocks_for(tokens):
    return -(-tokens // args.block_tokens)


async def scheduler():
    global used_blocks
    while True:
        await asyncio.sleep(args.step_ms / 1000.0)
        while waiting and len(running) < args.max_batch:
            need = blocks_for(args.prompt_tokens + waiting[0].tokens + 1)
            if used_blocks + need > args.kv_blocks:
                break
            req = waiting.pop(0)
            req.blocks = need
            used_blocks += need
            if req.admitted is None:
                req.admitted = time.monotonic()
                state["queue_s"] += req.admitted - req.arrived
                state["queued"] += 1
            running.append(req)
        if not running:
            continue
        state["executions"] += 1
        state["items"] += len(running)
        for req in list(running):
            if req not in running:
                continue
            need = blocks_for(args.prompt_tokens + req.tokens + 1)
            while need > req.blocks:
                if used_blocks < args.kv_blocks:
                    req.blocks += 1
                    used_blocks += 1
                    continue
                victim = running[-1]  # the youngest gives its blocks back and waits again
                running.remove(victim)
                used_blocks -= victim.blocks
                victim.blocks = 0
                waiting.insert(0, victim)
                state["preemptions"] += 1
                if victim is req:
                    break
            if req not in running:
                continue
            req.tokens += 1
            state["generated"] += 1
            now = time.monotonic()
            if req.first_token is None:
                req.first_token = now
                state["ttft_s"] += now - req.arrived
                state["ttft_n"] += 1
            if req.queue is not None:
                req.queue.put_nowait(req.tokens)
            if req.tokens >= args.output_tokens:
                running.remove(req)
                used_blocks -= req.blocks
                state["finished"] += 1
                state["e2e_s"] += now - req.arrived
                req.done.set()
                if req.queue is not None:
                    req.queue.put_nowait(None)


async def predict(request):
    body = await request.read()
    stream = False
    if body:
        try:
            stream = bool(json.loads(body).get("stream"))
        except (ValueError, AttributeError):
            stream = False
    req = Request(stream)
    waiting.append(req)
    if not stream:
        await req.done.wait()
        return web.json_response({"choices": [{"text": "x" * req.tokens}]})
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    while True:
        item = await req.queue.get()
        if item is None:
            break
        chunk = {"id": "c", "object": "text_completion", "choices": [{"index": 0, "text": "x", "finish_reason": None}]}
        await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


def exposition():
    usage = used_blocks / args.kv_blocks
    m = 'model_name="tiny"'
    if args.flavour in ("vllm", "vllm-v0"):
        kv = "vllm:kv_cache_usage_perc" if args.flavour == "vllm" else "vllm:gpu_cache_usage_perc"
        lines = [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{{{m}}} {float(len(running))}",
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
            "# TYPE vllm:num_requests_waiting gauge", f"vllm:num_requests_waiting{{{m}}} {float(len(waiting))}",
            f"# TYPE {kv} gauge", f"{kv}{{{m}}} {usage}",
            "# TYPE vllm:num_preemptions_total counter", f"vllm:num_preemptions_total{{{m}}} {float(state['preemptions'])}",
            "# TYPE vllm:request_success_total counter",
            f'vllm:request_success_total{{finished_reason="length",{m}}} {float(state["finished"])}',
            "# TYPE vllm:generation_tokens_total counter", f"vllm:generation_tokens_total{{{m}}} {float(state['generated'])}",
            "# TYPE vllm:request_queue_time_seconds histogram",
            f'vllm:request_queue_time_seconds_bucket{{le="+Inf",{m}}} {float(state["queued"])}',
            f"vllm:request_queue_time_seconds_count{{{m}}} {float(state['queued'])}",
            f"vllm:request_queue_time_seconds_sum{{{m}}} {state['queue_s']}",
            "# TYPE vllm:time_to_first_token_seconds histogram",
            f'vllm:time_to_first_token_seconds_bucket{{le="+Inf",{m}}} {float(state["ttft_n"])}',
            f"vllm:time_to_first_token_seconds_count{{{m}}} {float(state['ttft_n'])}",
            f"vllm:time_to_first_token_seconds_sum{{{m}}} {state['ttft_s']}",
        ]
    elif args.flavour == "tgi":
        tokens = sum(args.prompt_tokens + r.tokens for r in running)
        lines = [
            "# TYPE tgi_queue_size gauge", f"tgi_queue_size {float(len(waiting))}",
            "# TYPE tgi_batch_current_size gauge", f"tgi_batch_current_size {float(len(running))}",
            "# TYPE tgi_batch_current_max_tokens gauge", f"tgi_batch_current_max_tokens {float(tokens)}",
            "# TYPE tgi_batch_max_total_tokens gauge",
            f"tgi_batch_max_total_tokens {float(args.kv_blocks * args.block_tokens)}",
            "# TYPE tgi_request_success counter", f"tgi_request_success {float(state['finished'])}",
            "# TYPE tgi_request_queue_duration histogram",
            f'tgi_request_queue_duration_bucket{{le="+Inf"}} {float(state["queued"])}',
            f"tgi_request_queue_duration_sum {state['queue_s']}",
            f"tgi_request_queue_duration_count {float(state['queued'])}",
        ]
    else:
        t = 'model="tiny",version="1"'
        lines = [
            "# TYPE nv_inference_request_success counter", f"nv_inference_request_success{{{t}}} {state['finished']}",
            "# TYPE nv_inference_request_failure counter", f"nv_inference_request_failure{{{t}}} 0",
            "# TYPE nv_inference_count counter", f"nv_inference_count{{{t}}} {state['items']}",
            "# TYPE nv_inference_exec_count counter", f"nv_inference_exec_count{{{t}}} {state['executions']}",
            "# TYPE nv_inference_queue_duration_us counter",
            f"nv_inference_queue_duration_us{{{t}}} {int(state['queue_s'] * 1e6)}",
            "# TYPE nv_inference_pending_request_count gauge",
            f"nv_inference_pending_request_count{{{t}}} {len(waiting)}",
        ]
    return "\n".join(lines) + "\n"


async def metrics(request):
    return web.Response(text=exposition(), content_type="text/plain")


async def health(request):
    return web.Response(text="ok")


async def start(app):
    app["scheduler"] = asyncio.get_running_loop().create_task(scheduler())


app = web.Application()
app.on_startup.append(start)
app.router.add_post("/predict", predict)
app.router.add_post("/v1/completions", predict)
app.router.add_get("/metrics", metrics)
app.router.add_get("/health", health)
web.run_app(app, host="127.0.0.1", port=args.port, print=None, access_log=None)
'''
