"""Sick servers for the load tests: source text for tests.support.servers.python_server (port in argv[1]).

The sleeps that the timing assertions are derived from are constants here, substituted into the scripts, so a
test states its bounds in terms of what the server was told to do (e.g. TTFT >= 0.9 * TTFT_S).
"""

TTFT_S = 0.1
"""The chat endpoint sleeps this long before the first token."""
ITL_S = 0.05
"""... and this long between tokens."""
SLOT_S = 0.05
"""/bounded holds one of its 2 slots this long: capacity 2 / SLOT_S = 40 req/s."""
SLOTS = 2
"""/bounded's slot count."""
WORK_S = 0.05
"""/blocking and /threaded sleep this long: service time is sleep-dominated, so CPU contention cannot hide
whether requests overlap."""

AIOHTTP_SICK = r"""
import asyncio, json, random, sys, time
from aiohttp import web

rng = random.Random(7)
bounded = asyncio.Semaphore(__SLOTS__)
counters = {"stall": 0, "cold": 0}

async def root(request):
    return web.Response(text="ok")

async def fixed(request):
    await asyncio.sleep(float(request.query.get("ms", "20")) / 1000.0)
    return web.Response(text="fixed")

async def bounded_handler(request):
    async with bounded:  # capacity 2, unbounded queue in front of it
        await asyncio.sleep(__SLOT_S__)
    return web.Response(text="done")

async def flaky(request):
    if rng.random() < 0.2:
        return web.Response(status=503, text="busy")
    return web.Response(text="ok")

async def reset(request):
    request.transport.abort()
    await asyncio.sleep(0.01)
    return web.Response(text="never")

async def stall(request):
    counters["stall"] += 1
    if counters["stall"] % 5 == 0:
        await asyncio.sleep(2.0)
    else:
        await asyncio.sleep(0.01)
    return web.Response(text="ok")

async def cold(request):
    counters["cold"] += 1
    await asyncio.sleep(0.6 if counters["cold"] == 1 else 0.005)
    return web.Response(text="ok")

async def timing(request):
    await asyncio.sleep(0.02)
    return web.Response(text="ok", headers={"Server-Timing": 'db;dur=5.5, infer;desc="model";dur=12, total;dur=20'})

async def chat(request):
    body = await request.json()
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    abort = request.query.get("abort") == "1"
    await asyncio.sleep(__TTFT_S__)  # time to first token
    for i in range(5):
        if i:
            await asyncio.sleep(__ITL_S__)  # inter-token latency
        chunk = {"choices": [{"index": 0, "delta": {"content": f"tok{i} "}}]}
        await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        if abort and i == 1:
            request.transport.abort()
            return response
    usage = {"choices": [], "usage": {"completion_tokens": 5}}
    await response.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
    await response.write_eof()
    return response

async def echo(request):
    if request.headers.get("X-Test") != "yes":
        return web.Response(status=401, text="no header")
    try:
        json.loads(await request.read())
    except ValueError:
        return web.Response(status=400, text="bad json")
    return web.Response(text="ok")

async def reset_every(request):
    # counts the requests it saw (per `key`, read back from /seen) and resets every n-th connection mid-request
    key = request.query.get("key", "default")
    counters[key] = counters.get(key, 0) + 1
    if counters[key] % int(request.query.get("n", "50")) == 0:
        request.transport.abort()
        await asyncio.sleep(0.01)
    return web.Response(text="ok")

async def seen(request):
    return web.Response(text=str(counters.get(request.query.get("key", "default"), 0)))

async def close(request):
    response = web.Response(text="bye")
    response.force_close()  # Connection: close after every response
    return response

app = web.Application()
app.add_routes([web.get("/", root), web.get("/fixed", fixed), web.get("/bounded", bounded_handler),
                web.get("/flaky", flaky), web.get("/reset", reset), web.get("/stall", stall),
                web.get("/cold", cold), web.get("/timing", timing), web.post("/v1/chat/completions", chat),
                web.post("/echo", echo), web.get("/close", close), web.get("/reset_every", reset_every),
                web.get("/seen", seen)])
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
"""
for _name, _value in {"__SLOTS__": SLOTS, "__SLOT_S__": SLOT_S, "__TTFT_S__": TTFT_S, "__ITL_S__": ITL_S}.items():
    AIOHTTP_SICK = AIOHTTP_SICK.replace(_name, repr(_value))

FASTAPI_SERIALIZED = r"""
import sys, time
import uvicorn
from fastapi import FastAPI

app = FastAPI()

@app.get("/")
async def root():
    return {"ok": True}

@app.get("/blocking")
async def blocking():
    time.sleep(__WORK_S__)  # blocking work inside async def: the event loop serves one request at a time
    return {"ok": True}

@app.get("/threaded")
def threaded():
    time.sleep(__WORK_S__)  # plain def: runs in the thread pool, requests overlap
    return {"ok": True}

uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""
FASTAPI_SERIALIZED = FASTAPI_SERIALIZED.replace("__WORK_S__", repr(WORK_S))
