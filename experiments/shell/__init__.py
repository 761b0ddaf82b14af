"""`mrclab cli`: explore a running fabric interactively, like Mininet's `mn` (session.py starts
and ends it, console.py is the prompt, text.py what it parses and prints)."""
