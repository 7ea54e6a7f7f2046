"""Request handlers, one module per concept; each module ends with its `routes`, joined in handlers.routes."""
