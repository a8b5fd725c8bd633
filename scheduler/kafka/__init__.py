"""Kafka plumbing shared by the engine, the worker SDK and the control plane."""
