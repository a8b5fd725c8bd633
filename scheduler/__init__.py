"""Kafka-native, multi-tenant distributed job scheduler."""
