"""The database tools the agent queries (the project scan, SQL under a policy), served
in-process or as an MCP server."""
