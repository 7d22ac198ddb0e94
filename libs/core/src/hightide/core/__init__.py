"""hightide.core: the rules as pure objects. Never does I/O, reads a clock or draws randomness."""
