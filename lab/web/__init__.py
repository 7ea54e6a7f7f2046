"""The web plumbing every Tornado server of the lab stands on: JSON answers and errors, strict queries, the HTTP
server subclass and each request's lifecycle (the handlers in handlers/ sit on it)."""
