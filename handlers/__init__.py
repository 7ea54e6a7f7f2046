"""Request handlers, one module per concept; each module ends with its `routes`, joined in handlers.routes.

Kept empty on purpose: the embedded upstream imports handlers.base for the
JSON error path, and must not pay for numpy and scikit-learn doing so.
"""
