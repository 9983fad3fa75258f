"""What a chaos run reports: the faults it injected, the beat takeovers, the load it carried
and each invariant's verdict with its evidence, as text or as a JSON-ready dict; and the
environment that runs a process with a shifted clock (``--clock-skew``)."""

from __future__ import annotations

import glob
import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from beatflow.chaos import checks
from beatflow.errors import ChaosSetupError


@dataclass
class ChaosReport:
    seed: int
    duration: float
    faults: Counter[str] = field(default_factory=Counter)
    fault_log: list[str] = field(default_factory=list)
    takeovers: list[float] = field(default_factory=list)
    triggers: Counter[str] = field(default_factory=Counter)
    checks: list[checks.Check] = field(default_factory=list)
    load: dict[str, Any] = field(default_factory=dict)
    drained_in: float | None = None
    clock_skew: float = 0.0
    unplanned_exits: list[str] = field(default_factory=list)
    workdir: str = ""
    broker: str = "redis"

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "seed": self.seed,
            "broker": self.broker,
            "duration_seconds": self.duration,
            "faults": dict(self.faults),
            "fault_log": self.fault_log,
            "takeover_seconds": self.takeovers,
            "triggers": dict(self.triggers),
            "load": self.load,
            "drained_in_seconds": self.drained_in,
            "clock_skew_seconds": self.clock_skew,
            "unplanned_exits": self.unplanned_exits,
            "invariants": [
                {"name": c.name, "ok": c.ok, "detail": c.detail, "evidence": c.evidence}
                for c in self.checks
            ],
            "workdir": self.workdir,
        }

    def text(self) -> str:
        lines = [
            f"beatflow chaos: seed {self.seed}, {self.duration:.0f}s of faults, "
            f"broker {self.broker}"
        ]
        lines.append(
            "faults injected: " + ", ".join(f"{k} {n}" for k, n in sorted(self.faults.items()))
        )
        if self.takeovers:
            lines.append(
                f"beat failovers: {len(self.takeovers)}, takeover median "
                f"{statistics.median(self.takeovers):.2f}s, max {max(self.takeovers):.2f}s"
            )
        lines.append(
            "manual triggers: " + ", ".join(f"{k} {n}" for k, n in sorted(self.triggers.items()))
        )
        lines.append("load: " + ", ".join(f"{k} {v}" for k, v in self.load.items()))
        if self.clock_skew:
            lines.append(f"the last worker's clock ran {self.clock_skew:+.1f}s off")
        if self.unplanned_exits:
            lines.append(
                f"processes that died on their own and were restarted (as a supervisor would): "
                f"{len(self.unplanned_exits)}"
            )
            lines += [f"      {e}" for e in self.unplanned_exits]
        if self.drained_in is not None:
            lines.append(f"drained {self.drained_in:.1f}s after the last fault")
        for c in self.checks:
            lines.append(f"{'PASS' if c.ok else 'FAIL'}  {c.name}: {c.detail}")
            lines += [f"      {e}" for e in c.evidence]
        lines.append("every invariant held" if self.ok else "INVARIANTS VIOLATED")
        return "\n".join(lines)


def clock_skew_env(seconds: float) -> dict[str, str]:
    """The environment that runs a process with its clock shifted by ``seconds`` (Debian's
    libfaketime)."""
    if not seconds:
        return {}
    libs = sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"))
    if not libs:
        raise ChaosSetupError("--clock-skew needs libfaketime: apt-get install faketime")
    # FAKETIME_DONT_FAKE_MONOTONIC=1 would make time.sleep fail with EINVAL (Python sleeps on
    # an absolute CLOCK_MONOTONIC deadline); a constant offset on the monotonic clock is harmless.
    return {"LD_PRELOAD": libs[0], "FAKETIME": f"{seconds:+.3f}s"}
