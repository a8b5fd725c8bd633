"""The control plane: the client library, tenants, ACLs and the CLI commands over them."""
