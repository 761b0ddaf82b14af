"""Start the controller process: `python -m controller.run --config FILE`.

os-ken 4.x no longer ships `osken-manager`, so this is the launcher: it binds OpenFlow to
loopback only and runs `controller.app` with os-ken's native (thread) hub.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

os.environ.setdefault("OSKEN_HUB_TYPE", "native")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", required=True, help="JSON: fabric, status, events, detect_ms, port")
    args = parser.parse_args(argv)
    with open(args.config) as fh:
        settings = json.load(fh)

    from os_ken import cfg
    from os_ken.base.app_manager import AppManager

    from controller import app

    app.SETTINGS.update(settings)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    cfg.CONF(args=["--ofp-listen-host", "127.0.0.1",
                   "--ofp-tcp-listen-port", str(settings["port"])], project="os_ken")
    AppManager.run_apps(["controller.app"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
