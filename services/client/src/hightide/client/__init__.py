"""hightide.client: the hightide CLI and the client library (CONTRACT.md: async Producer, Consumer, Admin)."""

from hightide.client.admin import Admin
from hightide.client.consumer import Consumer, ConsumerConfig, ConsumerRecord
from hightide.client.producer import Producer, ProducerConfig, RecordMetadata

__all__ = ["Admin", "Consumer", "ConsumerConfig", "ConsumerRecord", "Producer", "ProducerConfig", "RecordMetadata"]
