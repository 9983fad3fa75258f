"""Replay a bursty arrival trace through KEDA's scaling rule (the HPA algorithm it drives) with
the ScaledObject parameters beatflow ships, and compare variants: the target per replica, the
replica cap, prefetching workers and a trigger on the bare list name (keda#7066).

    .venv/bin/python bench/bench_autoscale.py               # the comparison table
    .venv/bin/python bench/bench_autoscale.py --timeline    # replicas over time, shipped params

A discrete simulation with one-second steps: tasks arrive, pods take them into free process
slots (prefetch off: only when a slot is free), KEDA polls every pollingInterval and the HPA turns
the metric into replicas with its tolerance, scale-up policies, scale-down stabilisation window
and scale-down policy, and the CPU trigger as a second metric (the HPA takes the larger). New
pods start after a delay; a pod chosen for scale-down stops fetching, requeues what it reserved
and finishes its running tasks (Celery's soft shutdown), and costs replica-seconds until then.
"""

from __future__ import annotations

import argparse
import math
import random
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace


@dataclass(frozen=True, slots=True)
class Params:
    """One scaling configuration; the defaults are the shipped `default` queue values."""

    name: str = "shipped"
    concurrency: int = 4
    target: float = 8.0  # scalingModifiers.target / listLength: waiting tasks per replica
    min_replicas: int = 1
    max_replicas: int = 20
    polling_interval: int = 15
    hpa_sync: int = 15
    tolerance: float = 0.1
    scale_up_percent: int = 100  # per 15 s
    scale_up_pods: int = 4  # per 15 s
    scale_down_window: int = 300
    scale_down_pods: int = 1  # per 60 s ...
    scale_down_percent: int = 50  # ... or this share of the current pods, whichever is more
    cpu_target: float = 80.0
    pod_start_delay: int = 20  # scheduling + image + worker boot
    prefetch: int = 0  # extra messages a busy worker reserves (0: --disable-prefetch)
    count_priority_lists: bool = True  # False: one trigger on the bare list name
    count_running: bool = False  # True: the exporter's backlog (queued + reserved + running)


@dataclass(frozen=True, slots=True)
class Task:
    arrival: int
    duration: int
    priority: int


@dataclass(slots=True)
class Pod:
    created: int
    ready_at: int
    running: list[tuple[int, Task]] = field(default_factory=list)  # (finish time, task)
    reserved: deque[Task] = field(default_factory=deque)
    terminating: bool = False


@dataclass(frozen=True, slots=True)
class Result:
    params: Params
    timeline: list[tuple[int, int, int, int]]  # (t, replicas, queued, running)
    peak: int
    drained_at: int  # the lists are empty for good
    done_at: int  # the last task finished
    settled_at: int  # replicas back at the minimum
    waits: list[int]
    replica_seconds: int  # over the whole horizon (2 h), so fixed sizes compare fairly

    def wait_quantile(self, q: float) -> float:
        ordered = sorted(self.waits)
        return float(ordered[min(len(ordered) - 1, int(q * len(ordered)))])


def steady_trace(seed: int = 7, tasks: int = 1200, window: int = 600) -> list[Task]:
    """``tasks`` tasks of 1-10 s arriving evenly over ``window`` seconds (about 3 pods of work)."""
    rng = random.Random(seed)
    out = [
        Task(
            int(rng.uniform(0, window)),
            rng.randint(1, 10),
            rng.choice((3, 6, 9)) if rng.random() < 0.25 else 0,
        )
        for _ in range(tasks)
    ]
    return sorted(out, key=lambda t: t.arrival)


def cron_trace(seed: int = 7, every: int = 300, cycles: int = 6, tasks: int = 400) -> list[Task]:
    """A DAG fired by cron: ``tasks`` tasks within 10 s every ``every`` s, ``cycles`` times."""
    rng = random.Random(seed)
    out = [
        Task(
            c * every + int(rng.uniform(0, 10)),
            rng.randint(1, 10),
            rng.choice((3, 6, 9)) if rng.random() < 0.25 else 0,
        )
        for c in range(cycles)
        for _ in range(tasks)
    ]
    return sorted(out, key=lambda t: t.arrival)


def bursty_trace(seed: int = 7, tasks: int = 5000, window: int = 60) -> list[Task]:
    """``tasks`` tasks of 1-10 s arriving within ``window`` seconds in two bursts, then quiet.
    A quarter carry a priority that kombu puts on a sub-list (``q\\x06\\x163`` ...)."""
    rng = random.Random(seed)
    out = []
    for _ in range(tasks):
        # Two bursts: 60 % in the first 15 s, the rest spread over the window.
        arrival = int(rng.uniform(0, 15)) if rng.random() < 0.6 else int(rng.uniform(0, window))
        priority = rng.choice((3, 6, 9)) if rng.random() < 0.25 else 0
        out.append(Task(arrival, rng.randint(1, 10), priority))
    return sorted(out, key=lambda t: t.arrival)


def simulate(p: Params, trace: Iterable[Task], horizon: int = 7200) -> Result:
    arrivals = deque(trace)
    total = len(arrivals)
    queue: deque[Task] = deque()
    pods = [Pod(created=-3600, ready_at=-3600) for _ in range(p.min_replicas)]
    recommendations: deque[tuple[int, int]] = deque()
    last_down = -(10**9)
    metric = 0.0
    finished = 0
    waits: list[int] = []
    timeline: list[tuple[int, int, int, int]] = []
    replica_seconds = peak = drained_at = done_at = settled_at = 0
    for t in range(horizon):
        while arrivals and arrivals[0].arrival <= t:
            queue.append(arrivals.popleft())
        for pod in pods:
            finished += _work(p, pod, queue, t, waits)
        pods = [pod for pod in pods if not (pod.terminating and not pod.running)]
        active = [pod for pod in pods if not pod.terminating]
        replica_seconds += len(pods)
        running = sum(len(pod.running) for pod in pods)
        if t % p.polling_interval == 0:
            visible = [task for task in queue if p.count_priority_lists or task.priority == 0]
            metric = len(visible) + (
                running + sum(len(x.reserved) for x in pods) if p.count_running else 0
            )
        if t % p.hpa_sync == 0 and t > 0:
            desired = _desired(p, len(active), metric, running)
            recommendations.append((t, desired))
            while recommendations and recommendations[0][0] < t - p.scale_down_window:
                recommendations.popleft()
            if desired > len(active):
                _scale_up(p, pods, len(active), desired, t)
            elif _scale_down(p, active, queue, max(d for _, d in recommendations), t - last_down):
                last_down = t
        replicas = len([pod for pod in pods if not pod.terminating])
        peak = max(peak, replicas)
        timeline.append((t, replicas, len(queue), running))
        if queue or arrivals:
            drained_at = t + 1
        if finished < total:
            done_at = t + 1
        if replicas > p.min_replicas or finished < total:
            settled_at = t + 1
    return Result(p, timeline, peak, drained_at, done_at, settled_at, waits, replica_seconds)


def _work(p: Params, pod: Pod, queue: deque[Task], t: int, waits: list[int]) -> int:
    """One second of one pod: finish, start and prefetch tasks; returns how many finished."""
    finished = len([r for r in pod.running if r[0] <= t])
    pod.running = [r for r in pod.running if r[0] > t]
    if t < pod.ready_at:
        return finished
    while len(pod.running) < p.concurrency and (pod.reserved or (queue and not pod.terminating)):
        task = pod.reserved.popleft() if pod.reserved else queue.popleft()
        waits.append(t - task.arrival)
        pod.running.append((t + task.duration, task))
    if not pod.terminating:
        while len(pod.reserved) < p.prefetch and queue:
            pod.reserved.append(queue.popleft())
    return finished


def _scale_up(p: Params, pods: list[Pod], current: int, desired: int, t: int) -> None:
    step = max(math.ceil(current * p.scale_up_percent / 100), p.scale_up_pods)
    for _ in range(min(desired, current + step) - current):
        pods.append(Pod(created=t, ready_at=t + p.pod_start_delay))


def _scale_down(p: Params, active: list[Pod], queue: deque[Task], stable: int, since: int) -> bool:
    """Terminate the newest pods down to the stabilised recommendation (at most one step a
    minute); their prefetched tasks go back to the queue. True when pods were terminated."""
    current = len(active)
    if not (stable < current and since >= 60):
        return False
    allowed = max(p.scale_down_pods, math.ceil(current * p.scale_down_percent / 100))
    for pod in sorted(active, key=lambda x: x.created)[-min(allowed, current - stable) :]:
        pod.terminating = True
        queue.extendleft(reversed(pod.reserved))
        pod.reserved.clear()
    return True


def _desired(p: Params, current: int, metric: float, running: int) -> int:
    """The HPA's answer: the larger of the queue metric and the CPU metric, within bounds."""
    current = max(current, 1)
    by_queue = math.ceil(metric / p.target)
    utilisation = 100.0 * running / (current * p.concurrency)
    ratio = utilisation / p.cpu_target
    by_cpu = current if abs(ratio - 1) <= p.tolerance else math.ceil(current * ratio)
    if abs(by_queue / current - 1) <= p.tolerance:
        by_queue = current
    return max(p.min_replicas, min(p.max_replicas, max(by_queue, by_cpu)))


def variants(shipped: Params) -> list[Params]:
    return [
        shipped,
        replace(shipped, name="target 4", target=4),
        replace(shipped, name="target 16", target=16),
        replace(shipped, name="target 32", target=32),
        replace(shipped, name="max 10", max_replicas=10),
        replace(shipped, name="max 50", max_replicas=50),
        replace(shipped, name="down 1 pod/min", scale_down_pods=1, scale_down_percent=0),
        replace(shipped, name="down 50 %/min", scale_down_pods=1, scale_down_percent=50),
        replace(shipped, name="window 60 s", scale_down_window=60),
        replace(shipped, name="window 120 s", scale_down_window=120),
        replace(shipped, name="window 600 s", scale_down_window=600),
        replace(shipped, name="count running", count_running=True),
        replace(shipped, name="prefetch 16/pod", prefetch=16),
        replace(shipped, name="bare list only", count_priority_lists=False),
        replace(shipped, name="fixed 1", max_replicas=1),
        replace(shipped, name="fixed 20", min_replicas=20),
    ]


def table(results: list[Result]) -> str:
    head = (
        f"{'variant':<17}{'peak':>5}{'drained s':>10}{'done s':>8}{'p50 wait':>9}"
        f"{'p95 wait':>9}{'replica-s 2h':>13}{'settled s':>10}"
    )
    rows = [head, "-" * len(head)]
    for r in results:
        rows.append(
            f"{r.params.name:<17}{r.peak:>5}{r.drained_at:>10}{r.done_at:>8}"
            f"{r.wait_quantile(0.5):>9.0f}{r.wait_quantile(0.95):>9.0f}{r.replica_seconds:>13}"
            f"{r.settled_at:>10}"
        )
    return "\n".join(rows)


def timeline(r: Result, every: int = 15) -> str:
    rows = [f"{'t s':>5}{'replicas':>9}{'queued':>8}{'running':>8}"]
    for t, replicas, queued, running in r.timeline[: r.settled_at + every : every]:
        rows.append(f"{t:>5}{replicas:>9}{queued:>8}{running:>8}  {'#' * replicas}")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timeline", action="store_true", help="replicas over time, shipped")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    shipped = Params()
    print(
        f"shipped: target {shipped.target:g}/replica, {shipped.min_replicas}-"
        f"{shipped.max_replicas} replicas, scale-down window {shipped.scale_down_window} s, "
        f"down max({shipped.scale_down_pods} pods, {shipped.scale_down_percent} %)/60 s; "
        f"concurrency {shipped.concurrency}, pods start in {shipped.pod_start_delay} s"
    )
    traces = (
        ("burst", bursty_trace(args.seed)),
        ("steady", steady_trace(args.seed)),
        ("cron", cron_trace(args.seed)),
    )
    for label, trace in traces:
        work = sum(t.duration for t in trace)
        span = max(t.arrival for t in trace) + 1
        print(
            f"\n{label}: {len(trace)} tasks of 1-10 s ({work} task-seconds) arriving in "
            f"{span} s, seed {args.seed}"
        )
        if args.timeline:
            print(timeline(simulate(shipped, trace)))
        else:
            print(table([simulate(p, trace) for p in variants(shipped)]))


if __name__ == "__main__":
    main()
