"""hightide.audit: the history's rules as pure functions over events. Never does I/O."""
