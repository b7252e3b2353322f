"""Memory as tools: one catalog (catalog.py) offered to the chat model (chat/tools.py) and to MCP clients
(mcp.py: `jarvis mcp` over stdio, streamable HTTP at /mcp)."""
