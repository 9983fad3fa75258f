"""Test DAGs: retries with backoff, final failures and every trigger rule downstream."""

from _marks import mark

from beatflow import DAG, task


@task(retries=3, retry_delay=0.2, retry_backoff=2.0, retry_jitter=False)
def flaky(ctx) -> str:
    calls = mark(f"flaky-{ctx.run_id}")
    if calls < 3:
        raise ConnectionError(f"attempt {calls} failed")
    return f"ok after {calls}"


@task(retries=1, retry_delay=0.1)
def broken(ctx) -> None:
    mark(f"broken-{ctx.run_id}")
    if not ctx.params.get("fixed"):
        raise ValueError("always broken")


@task
def ok() -> str:
    return "ok"


def _after(rule: str):
    return task(trigger_rule=rule)(lambda: rule).override(task_id=f"after_{rule}")


with DAG("t_retry"):
    flaky()

with DAG("t_rules", params={"fixed": False}):
    b, o = broken(), ok()
    for rule in (
        "all_success",
        "all_done",
        "all_failed",
        "one_success",
        "one_failed",
        "none_failed",
    ):
        [b, o] >> _after(rule)()

with DAG("t_skip"):
    o = ok()
    only_failed = _after("all_failed")()
    o >> only_failed
    only_failed >> _after("all_success")()
    only_failed >> _after("none_failed")()


@task
def not_json() -> set:
    return {1, 2}


@task
def too_big() -> str:
    return "x" * (2 << 20)


@task(soft_time_limit=1, retries=0)
def too_slow() -> None:
    import time

    time.sleep(5)


with DAG("t_bad_results"):
    [not_json(), too_big(), too_slow()] >> _after("all_done")()


@task(dedupe_key="{dag_id}/{no_such_field}")
def bad_key() -> str:
    return "never"


with DAG("t_bad_key"):
    bad_key() >> _after("all_done")()


@task(retries=1, retry_delay=10, retry_jitter=False)
def far_retry(ctx) -> str:
    if mark(f"far-{ctx.run_id}") == 1:
        raise ConnectionError("the first try fails")
    return "second try"


@task
def after_far(value: str, ctx) -> str:
    mark(f"after-far-{ctx.run_id}")
    return value


with DAG("t_retry_far"):  # a retry 10 s out: past a small BEATFLOW_MAX_COUNTDOWN_SECONDS
    after_far(far_retry())
