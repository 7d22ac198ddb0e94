"""hightide.client: the hightide CLI and the client library."""
