"""hightide.protocol: the vocabulary shared by every room: wire formats, error codes, event types. No logic."""
