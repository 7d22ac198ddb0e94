"""Test support: the `hightide` command in a process of its own, without paying the interpreter's start and the
CLI's imports on every call (the test tiers' process start-up cost).

The e2e and compat tiers run `hightide ...` hundreds of times, most of them inside polls (`cluster status
--json`, `topic describe`); each run used to start a Python interpreter and import `hightide.client.cli` (0.7 s of
CPU, about 10 s of wall time at load 24 on 2 cores), CPU that the cluster under test was waiting for.
Here a fork server (`multiprocessing`'s `forkserver`, started once per pytest process, the CLI imported in it)
forks a fresh process per call, and that process does what `python -m hightide.client.cli <args>` does after its
imports: `sys.exit(main(args))` with stdin, stdout, stderr, the environment and the working directory of a
subprocess, its output captured. Each call is still a process of its own (a crash, `os._exit`, a signal or a
leaked thread stays in it); the exit code, the output and a traceback on stderr are what a subprocess would give.
`HIGHTIDE_TEST_CLI_SUBPROCESS=1` runs a real `python -m hightide.client.cli` instead (to compare the two).
"""

from __future__ import annotations

import atexit
import functools
import locale
import multiprocessing
import os
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Sequence
from multiprocessing.context import ForkServerContext
from pathlib import Path

from hightide.client import cli

SUBPROCESS_FLAG = "HIGHTIDE_TEST_CLI_SUBPROCESS"
PRELOADED = ["support.cli_process"]  # and with it hightide.client.cli


@functools.cache
def _fork_server() -> ForkServerContext:
    """The fork server's context; the server itself starts at the first call (one per pytest process)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOADED)
    return context


def _cli_main(args: list[str], environ: dict[str, str], cwd: str, stdin: str, stdout: str, stderr: str) -> None:
    """In the forked process: `python -m hightide.client.cli <args>` from its `sys.exit(main())` on."""
    os.environ.clear()
    os.environ.update(environ)
    os.chdir(cwd)
    for fd, path, flags in ((0, stdin, os.O_RDONLY), (1, stdout, os.O_WRONLY), (2, stderr, os.O_WRONLY)):
        opened = os.open(path, flags)
        os.dup2(opened, fd)
        os.close(opened)
    sys.stdin = open(0, encoding=locale.getpreferredencoding(False), closefd=False)  # noqa: SIM115
    sys.argv = [cli.__file__, *args]
    try:
        code = cli.main(args)
    except SystemExit:
        raise
    except BaseException:  # what the interpreter prints for an uncaught exception, and its exit code
        traceback.print_exc()
        code = 1
    finally:
        atexit._run_exitfuncs()  # the interpreter's exit runs them; the fork server's children end in os._exit
        sys.stdout.flush()
        sys.stderr.flush()
    raise SystemExit(code)


def run_cli(
    args: Sequence[str], *, timeout: float, stdin: str | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """`python -m hightide.client.cli <args>`, as `subprocess.run(capture_output=True, text=True)` gives it."""
    command = [sys.executable, "-m", "hightide.client.cli", *args]
    if os.environ.get(SUBPROCESS_FLAG) == "1":
        return subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, input=stdin, check=False, cwd=cwd
        )
    encoding = locale.getpreferredencoding(False)
    with tempfile.TemporaryDirectory(prefix="hightide-cli-") as scratch:
        files = {name: Path(scratch) / name for name in ("stdin", "stdout", "stderr")}
        files["stdin"].write_text(stdin or "", encoding=encoding)
        files["stdout"].touch()
        files["stderr"].touch()
        process = _fork_server().Process(
            target=_cli_main,
            args=(
                list(args),
                dict(os.environ),
                str(cwd or Path.cwd()),
                *(str(files[n]) for n in ("stdin", "stdout", "stderr")),
            ),
            name="hightide-cli",
        )
        process.start()
        process.join(timeout)
        if process.exitcode is None:
            process.kill()
            process.join()
            raise subprocess.TimeoutExpired(command, timeout)
        code = process.exitcode
        process.close()
        out = files["stdout"].read_text(encoding=encoding)
        err = files["stderr"].read_text(encoding=encoding)
    return subprocess.CompletedProcess(command, code, out, err)
