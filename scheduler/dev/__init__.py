"""Development helpers: the demo and the Maven cache of the local Kafka and Connect jars."""
