"""A real MCP client (the Python SDK's stdio_client and ClientSession) for tests/mcp.rs.

Usage: client.py STEPS_JSON -- SERVER_COMMAND [ARG...]

STEPS_JSON is a list of steps, each one of
  {"tools": true}                              tools/list
  {"call": NAME, "arguments": {...}}           tools/call
  {"read": URI}                                resources/read
  {"resources": true}                          resources/list and resources/templates/list
The script starts the server with the command given, initializes a session, runs the steps in
order and prints one JSON document: the negotiated protocol version, the server's name, and each
step's answer (a tool's isError, text and structuredContent; a read's contents or its error).
"""

import asyncio
import json
import sys

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
