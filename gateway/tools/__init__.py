"""Memory as tools: one catalog offered to the chat model (chat/tools.py) and to MCP clients (mcp.py:
`jarvis mcp` over stdio, streamable HTTP at /mcp). specs.py holds the tools as data (names, descriptions),
catalog.py derives their parameters from the registered methods and runs them."""
