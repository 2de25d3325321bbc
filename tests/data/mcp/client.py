"""A real MCP client (the Python SDK's stdio_client and ClientSession) for tests/mcp.rs.

Usage: client.py STEPS_JSON -- SERVER_COMMAND [ARG...]

STEPS_JSON is a list of steps, each one of
  {"tools": true}                              tools/list
  {"call": NAME, "arguments": {...}}           tools/call
  {"read": URI}                                resources/read
  {"resources": true}                          resources/list and resources/templates/list
  {"cancel_wait": {...}, "during": [STEPS]}    a `wait` call with a progress callback; once it
                                               has reported progress twice the `during` steps
                                               run while it still waits ({"ping": true} too),
                                               then it is cancelled (the SDK sends
                                               notifications/cancelled)
  {"burst": N, "call": NAME, "arguments": {}}  N calls at once (after "after_ms" ms)
The script starts the server with the command given, initializes a session, runs the steps in
order and prints one JSON document: the negotiated protocol version, the server's name, and each
step's answer (a tool's isError, text and structuredContent; a read's contents or its error).
"""

import asyncio
import json
import sys
import time

import anyio

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


def text_of(content):
    return "".join(getattr(item, "text", "") for item in content)


async def step(session, spec):
    if spec.get("tools"):
        listed = await session.list_tools()
        return {
            "tools": [
                {"name": t.name, "inputSchema": t.input_schema if hasattr(t, "input_schema") else t.inputSchema}
                for t in listed.tools
            ]
        }
    if spec.get("resources"):
        fixed = await session.list_resources()
        templates = await session.list_resource_templates()
        return {
            "resources": [str(r.uri) for r in fixed.resources],
            "templates": [
                getattr(t, "uri_template", None) or getattr(t, "uriTemplate", None)
                for t in templates.resource_templates
            ],
        }
    if "cancel_wait" in spec:
        return await cancel_wait(session, spec)
    if "burst" in spec:
        await anyio.sleep(spec.get("after_ms", 0) / 1000)
        calls = [step(session, {"call": spec["call"], "arguments": spec.get("arguments", {})}) for _ in range(spec["burst"])]
        return {"answers": list(await asyncio.gather(*calls))}
    if "call" in spec:
        try:
            result = await session.call_tool(spec["call"], spec.get("arguments", {}))
        except Exception as error:  # a JSON-RPC error (an unknown tool), as the SDK raises it
            return {"error": str(error)}
        structured = getattr(result, "structured_content", None)
        if structured is None:
            structured = getattr(result, "structuredContent", None)
        return {
            "isError": bool(getattr(result, "is_error", getattr(result, "isError", False))),
            "text": text_of(result.content),
            "structured": structured,
        }
    if "read" in spec:
        try:
            result = await session.read_resource(spec["read"])
        except Exception as error:  # the server's JSON-RPC error, as the SDK raises it
            return {"error": str(error)}
        return {"contents": [{"uri": str(c.uri), "text": getattr(c, "text", None)} for c in result.contents]}
    raise ValueError(f"unknown step {spec}")


async def cancel_wait(session, spec):
    progress = []

    async def on_progress(value, total, message):
        progress.append({"progress": value, "total": total, "message": message})

    started = time.monotonic()
    outcome = {"answered": False}
    during = []
    async with anyio.create_task_group() as group:
        scope = anyio.CancelScope()

        async def waiting():
            with scope:
                await session.call_tool("wait", spec["cancel_wait"], 600, on_progress)
                outcome["answered"] = True

        group.start_soon(waiting)
        while len(progress) < 2:
            if time.monotonic() - started > 30:
                scope.cancel()
                return {"error": "no progress within 30 s", "progress": progress}
            await anyio.sleep(0.05)
        for inner in spec.get("during", []):
            at = time.monotonic()
            if inner.get("ping"):
                await session.send_ping()
                got = {"pong": True}
            else:
                got = await step(session, inner)
            got["ms"] = int((time.monotonic() - at) * 1000)
            during.append(got)
        scope.cancel()
    return {"progress": progress, "during": during, "answered": outcome["answered"], "ms": int((time.monotonic() - started) * 1000)}


async def main():
    steps = json.loads(sys.argv[1])
    assert sys.argv[2] == "--"
    command, args = sys.argv[3], sys.argv[4:]
    server = StdioServerParameters(command=command, args=args)
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            answers = [await step(session, s) for s in steps]
    version = getattr(init, "protocol_version", None) or getattr(init, "protocolVersion", None)
    info = getattr(init, "server_info", None) or getattr(init, "serverInfo", None)
    print(json.dumps({"protocol": version, "server": info.name, "steps": answers}))


asyncio.run(main())
