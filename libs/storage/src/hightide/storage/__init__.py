"""hightide.storage: the partition log on disk, laid out and behaving like Kafka's."""
