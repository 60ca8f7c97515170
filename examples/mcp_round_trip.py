"""An MCP round trip with the SDK's own client: start `arc-ref mcp STORE`, keep a tool output in ARC,
read it back exactly in chunks, look at its stub and the catalog. Prints every call and its result.

    pip install 'arc-ref[mcp]'
    python examples/mcp_round_trip.py [STORE]      (default: a new store in a temporary folder)

Any MCP-capable agent can use the same server: its command is `arc-ref mcp STORE` (stdio transport).
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from mcp.types import TextContent

OUTPUT = "".join(f"test_{n:02d} ... {'ok' if n != 7 else 'FAILED: expected 41, got 42'}\n" for n in range(1, 15))


async def round_trip(store: Path) -> None:
    command = StdioServerParameters(
        command=sys.executable,
        args=["-m", "arc_ref.frontends.cli", "mcp", str(store), "--preset", "paper", "--set", "chunk_tokens=64",
              "--set", "capacity=1000"],
    )
    async with Client(command) as client:
        tools = await client.list_tools()
        print("tools:", ", ".join(tool.name for tool in tools.tools))

        async def call(name: str, **arguments: Any) -> dict[str, Any]:
            result = await client.call_tool(name, arguments)
            text = "".join(block.text for block in result.content if isinstance(block, TextContent))
            shown = {key: (value if len(str(value)) < 60 else str(value)[:57] + "...") for key, value in arguments.items()}
            print(f"\n> {name}({json.dumps(shown, ensure_ascii=False)[1:-1]})")
            print(("error: " if result.is_error else "") + text)
            if result.structured_content is not None:
                print("structured:", json.dumps(result.structured_content, ensure_ascii=False))
            return result.structured_content or {}

        stored = await call("store_observation", action="pytest -q tests/", observation=OUTPUT, returncode=1)
        obs_id = stored["id"]
        await call("recall_meta", id=obs_id)
        chunks = [await call("recall", id=obs_id)]
        while chunks[-1].get("more"):
            chunks.append(await call("recall_next", id=obs_id))
        await call("catalog_page")
        typo = obs_id[:-1] + ("0" if obs_id[-1] != "0" else "1")
        await call("recall", id=typo)  # a mistyped id: the nearest stored one is suggested
        # a payload is the shown form: a control string (<|im_end|>) carries a U+2060, a U+2060 is doubled
        joined = "".join(chunk["payload"] for chunk in chunks)
        exact = re.sub("\u2060\u2060|\u2060", lambda found: found.group()[:1] if len(found.group()) == 2 else "",
                       joined) == OUTPUT
        print(f"\nread back in {len(chunks)} chunks; equal to the output stored, character for character: {exact}")


def main() -> int:
    if len(sys.argv) > 1:
        anyio.run(round_trip, Path(sys.argv[1]))
        return 0
    with tempfile.TemporaryDirectory() as scratch:
        anyio.run(round_trip, Path(scratch) / "agent.arc")
    return 0


if __name__ == "__main__":
    sys.exit(main())
