"""The shell every Hightide service shares: config, logging, NATS connection, request/reply, metrics, health
and readiness, graceful shutdown. Room: libs/runtime. It holds no protocol rules (those live in libs/core).

It also imports structlog first, the way every process of ours meets it: as installed in the images, without
`rich`. structlog's dev and tracebacks modules import rich at their own import when it is installed, and only the
development environment has it (import-linter's dependency): there that import was about 15% of a service's or
the CLI's start-up imports, paid by every process the test tiers start, for exception renderings that the
images, which have no rich, never make. Hidden for the length of that one import only: rich stays importable
for anything else in the process."""

import sys as _sys

if "structlog" not in _sys.modules:
    _rich_was_absent = "rich" not in _sys.modules
    if _rich_was_absent:
        _sys.modules["rich"] = None  # type: ignore[assignment]  # `import rich` raises ImportError: structlog's fallback
    try:
        import structlog as _structlog  # noqa: F401  # structlog.dev and structlog.tracebacks with rich = None
    finally:
        if _rich_was_absent:
            del _sys.modules["rich"]
