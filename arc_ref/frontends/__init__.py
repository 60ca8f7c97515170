"""The front ends of `arc-ref` (DESIGN.md, layer "arc-ref front ends"): the only part of arc_ref that reads
command lines, standard streams and sockets.

- `cli`: `arc-ref replay | budgets`, and the subcommand table (the `arc-ref` entry point);
- `store_cli`: `arc-ref inspect | export | copy` of a durable store;
- `mcp_server`: `arc-ref mcp STORE`, the store's tools over MCP's stdio transport;
- `proxy`: `arc-ref proxy`, the OpenAI-compatible proxy in front of any agent;
- `exit_status`: the one table of exit statuses of every subcommand (spec/trace.md §8).

The pure core is the set of top-level modules of `arc_ref` (no I/O); durability is `arc_ref.persist`, the
Session `arc_ref.session`.
"""
