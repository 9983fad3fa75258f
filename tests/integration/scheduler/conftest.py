"""Fixtures for beat tests: a BeatCluster on a Redis DB and a PostgreSQL DB of its own."""

from __future__ import annotations

from tests.integration.scheduler.beatcluster import cluster

__all__ = ["cluster"]  # the fixture
