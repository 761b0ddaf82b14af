"""What a user types and reads: `mrclab cli`, to explore a running fabric interactively, like
Mininet's `mn` (session.py starts and ends it, console.py is the prompt, text.py what it parses
and prints), and the `mrclab` command's own words (cliwords.py: `--help`, errors, `clean`)."""
