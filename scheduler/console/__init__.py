"""The operator console served by `scheduler api` at /ui (server-rendered pages over the control plane)."""
