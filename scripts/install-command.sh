#!/usr/bin/env bash
# Put `mrclab` on the PATH as README writes it: DIR/mrclab (DIR: /usr/local/bin by default), a
# two-line script that runs this checkout's `mrclab` (its .venv's Python, this folder's code)
# from any folder, without activating the venv. `make setup` runs it. Idempotent; an `mrclab`
# in DIR that this script did not write is left alone, with a warning.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:-/usr/local/bin}"
target="$dir/mrclab"
marker="# mrclab command (scripts/install-command.sh)"
if [ -e "$target" ] && ! grep -qF "$marker" "$target" 2>/dev/null; then
  echo "setup: warning: $target exists and is not mrclab's: left alone (run $repo/.venv/bin/mrclab)" >&2
  exit 0
fi
mkdir -p "$dir"
tmp="$(mktemp "$dir/.mrclab.XXXXXX")"
printf '#!/bin/sh\n%s: %s\nPYTHONPATH="%s${PYTHONPATH:+:$PYTHONPATH}" exec "%s/.venv/bin/python" -m experiments.cli "$@"\n' \
  "$marker" "$repo" "$repo" "$repo" > "$tmp"
chmod 755 "$tmp"
mv -f "$tmp" "$target"
