"""The local Kafka broker the project runs itself for development, tests and CI."""
