"""The shell every Hightide service shares: config, logging, NATS connection, request/reply, metrics, health
and readiness, graceful shutdown. Room: libs/runtime. It holds no protocol rules (those live in libs/core)."""
