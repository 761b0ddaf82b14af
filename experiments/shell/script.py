"""The console's commands for scripts (`mrclab cli --script FILE`, `source FILE`): `sleep`
between steps, `wait` for flows to end, and `source` itself, which reaps background flows and
reports deaths after every line as the prompt does (Mininet's own `source` does not)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from experiments.api.flows import Flow
from experiments.api.testbed import Testbed
from experiments.shell.text import Usage, parse_positive

MAX_SLEEP_S = 3600.0
POLL_S = 0.25  # how often `wait` looks at the flows


class ScriptCommands:
    """A mixin of `MrcCli`: `source`, `sleep` and `wait`."""

    bed: Testbed
    ended: dict[int, str]

    # MrcCli's (annotations only: the lookup goes on to MrcCli's own and to Mininet's CLI)
    _say: Callable[[str], None]
    _args: Callable[[str, int | tuple[int, ...], str], list[str]]
    _flow: Callable[[str], Flow]
    _finish: Callable[..., None]
    onecmd: Callable[[str], bool]
    postcmd: Callable[[bool, str], bool]

    def do_source(self, line: str) -> None:
        """source FILE: run the commands in FILE, one a line (what `--script FILE` does); `exit`
        ends it, `#` starts a comment."""
        (name,) = self._args(line, 1, "source FILE")
        try:
            lines = Path(name).read_text().splitlines()
        except OSError as exc:
            raise Usage(f"cannot read {name}: {exc.strerror}") from None
        for text in lines:
            if not text.strip() or text.lstrip().startswith("#"):
                continue
            stop = self.onecmd(text)  # Mininet's source skips postcmd: reap and report here
            if self.postcmd(stop, text):
                break

    def do_wait(self, line: str) -> None:
        """wait [N]: until flow N (or every running flow) has ended, then say how it ended;
        for scripts (`send ... --background`, a fault, `wait`). Ctrl-C stops waiting."""
        args = self._args(line, (0, 1), "wait [N]")
        flows = [f for f in self.bed.flows if f.number not in self.ended]
        if args:
            flow = self._flow(args[0])
            if flow.number in self.ended:
                self._say(f"flow {flow.number} has already ended: {self.ended[flow.number]}")
                return
            flows = [flow]
        if not flows:
            self._say("no flow running: nothing to wait for")
            return
        try:
            while not all(f.progress().done for f in flows):
                time.sleep(POLL_S)
        except KeyboardInterrupt:
            self._say("stopped waiting (the flows go on: `flows`, `stop N`)")
            return
        for flow in flows:
            self._finish(flow)

    def do_sleep(self, line: str) -> None:
        """sleep SECONDS: do nothing for SECONDS (0.5, 2...), e.g. between a script's `send
        --background` and its `cut`; Ctrl-C ends it early."""
        (text,) = self._args(line, 1, "sleep SECONDS")
        seconds = parse_positive(text, "number of seconds")
        if seconds > MAX_SLEEP_S:
            raise Usage(f"bad number of seconds {text!r}: at most {MAX_SLEEP_S:g}")
        try:
            time.sleep(seconds)
        except KeyboardInterrupt:
            self._say("sleep interrupted")
