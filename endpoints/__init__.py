"""The host side: the sans-IO protocol core (protocol/) and the agents around it (host/).

A process started with MRCLAB_NATIVE=1 (host agents, endpoints/native.py) loads the compiled
build of the modules it runs per packet wherever that build matches their source."""

import os

if os.environ.get("MRCLAB_NATIVE") == "1":
    from endpoints import native

    native.install()
