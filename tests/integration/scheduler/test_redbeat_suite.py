"""RedBeat's own test suite (from the sdist of the installed celery-redbeat, fetched at test
time, never copied into this repository) run against BeatflowScheduler. Every failure it has
that RedBeat's own scheduler does not have must be one the leader election explains (listed in
the README); today that is four tests."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterable
from importlib.metadata import version
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

# failure -> why beatflow differs on purpose (also in the README)
EXPLAINED = {
    "test_scheduler.py::test_RedBeatScheduler_tick::test_lock_acquisition_failed_during_startup": (
        "RedBeat's lock is replaced by the election: tick never raises for a missing lock"
    ),
    "test_scheduler.py::test_RedBeatScheduler_tick::test_old_static_entries_are_removed": (
        "setup_schedule writes nothing before the lock is held (R7): the leader writes "
        "beat_schedule entries on its first sync"
    ),
    "test_scheduler.py::RedBeatStartupAcquiresLock::test_acquires_lock": (
        "the blocking beat_init lock acquisition is disconnected: the election competes"
    ),
    "test_scheduler.py::RedBeatStartupAcquiresLock::test_connection_error": (
        "the blocking beat_init lock acquisition is disconnected: the election competes"
    ),
}
CONFTEST = """
import redbeat

from beatflow.scheduler.beat import BeatflowScheduler

redbeat.RedBeatScheduler = BeatflowScheduler  # what the suite's `from redbeat import` gets
"""


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("fakeredis", reason="RedBeat's suite needs fakeredis[lua] (test extra)")
    tmp = tmp_path_factory.mktemp("redbeat-sdist")
    wanted = f"celery-redbeat=={version('celery-redbeat')}"
    got = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--disable-pip-version-check",
            "-q",
            "-d",
            str(tmp),
            wanted,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if got.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail(f"cannot download {wanted} from PyPI:\n{got.stderr[-2000:]}")
        pytest.skip(f"PyPI unreachable, cannot download {wanted}'s sdist (runs in CI)")
    (archive,) = tmp.glob("celery_redbeat-*.tar.gz")
    with tarfile.open(archive) as tar:
        tar.extractall(tmp, filter="data")
    (root,) = (p for p in tmp.iterdir() if p.is_dir())
    shutil.rmtree(root / "redbeat")  # test the installed package, not the sdist's copy
    return root


def run_suite(root: Path, *, beatflow: bool, only: Iterable[str] = ("",)) -> set[str]:
    """The suite's failing test ids (``only``: these tests alone) with BeatflowScheduler
    patched in (``beatflow``) or RedBeat's own."""
    conftest = root / "tests" / "conftest.py"
    if beatflow:
        conftest.write_text(CONFTEST)
    else:
        conftest.unlink(missing_ok=True)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rf",
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=",
            "-c",
            os.devnull,
            "--rootdir",
            str(root),
            "-W",
            "ignore",
            *(f"tests/{test}" for test in only),
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert re.search(r"\d+ (passed|failed)", done.stdout), done.stdout[-3000:] + done.stderr[-3000:]
    return set(re.findall(r"^FAILED tests/(\S+)", done.stdout, re.MULTILINE))


def test_redbeats_own_suite_passes_against_beatflow_but_for_what_the_election_changes(
    suite: Path,
) -> None:
    ours = run_suite(suite, beatflow=True)
    theirs = run_suite(suite, beatflow=False)  # fails there too: not beatflow's doing
    unexplained = ours - theirs - set(EXPLAINED)
    if unexplained:
        # a few of RedBeat's tests compare a score computed at two moments (test_basic_save):
        # on a loaded machine they fail now and then on either scheduler. What beatflow breaks
        # fails every time: run those again, three times, against beatflow alone
        for _ in range(3):
            unexplained &= run_suite(suite, beatflow=True, only=sorted(unexplained))
    assert not unexplained, f"RedBeat tests failing only against BeatflowScheduler: {unexplained}"
