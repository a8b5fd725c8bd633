"""HTTP API of the control plane (FastAPI): `scheduler api` serves it."""
