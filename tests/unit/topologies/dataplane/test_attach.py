"""Attaching needs root and a loadable program: without them `available` says why."""

from __future__ import annotations

from topologies.dataplane import attach


def test_available_says_why_without_root(monkeypatch):
    attach.available.cache_clear()
    monkeypatch.setattr(attach.os, "geteuid", lambda: 1000)
    try:
        assert "root" in (attach.available() or "")
    finally:
        attach.available.cache_clear()
