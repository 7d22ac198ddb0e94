#!/usr/bin/python3
"""`hightide-probe PATH`: the containers' health check (room: infra). Exit 0 iff GET http://127.0.0.1:PORT/PATH
answers 200, where PORT is $HIGHTIDE_HTTP_PORT (the service's --http-port). Standard library only: it runs in
every image, the NATS one included, before or without the venv."""

import os
import sys
import urllib.error
import urllib.request


def main() -> int:
    path = sys.argv[1] if len(sys.argv) > 1 else "/healthz"
    port = os.environ.get("HIGHTIDE_HTTP_PORT", "9404")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
            return 0 if response.status == 200 else 1
    except (urllib.error.URLError, OSError) as error:
        print(f"hightide-probe: {path}: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
