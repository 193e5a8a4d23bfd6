"""``agentdb.cores`` and ``agentdb.workers``: the usable cores (cgroup quotas read from real
files), and ``run_each`` with real forked processes: order, a worker killed mid-item, an item
that kills every worker, an exception in a worker, Ctrl-C."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from agentdb import cores, workers


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# ------------------------------------------------------------------------- cgroup quotas


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("max 100000\n", None),
        ("150000 100000\n", 2),  # 1.5 CPUs: two workers share them
        ("50000 100000\n", 1),  # half a CPU: still one worker
        ("200000 100000\n", 2),
        ("400000 100000", 4),
        ("", None),
        ("garbage\n", None),
        ("100000\n", None),
        ("abc 100000\n", None),
        ("100000 0\n", None),
        ("-1 100000\n", None),
        ("100000 100000 7\n", None),
        ("\x00\xff\xfe 1\n", None),
    ],
)
def test_cpu_max_from_a_real_file(tmp_path: Path, text: str, want: int | None) -> None:
    assert cores.read_cpu_max(write(tmp_path / "cpu.max", text)) == want


def test_cpu_max_missing_or_a_directory(tmp_path: Path) -> None:
    assert cores.read_cpu_max(tmp_path / "absent") is None
    (tmp_path / "dir").mkdir()
    assert cores.read_cpu_max(tmp_path / "dir") is None


def test_v2_the_tightest_quota_on_the_way_up(tmp_path: Path) -> None:
    """The process's own cgroup says max; its parent caps it at 1.5 CPUs; the root has none."""
    proc = write(tmp_path / "proc-cgroup", "0::/machine/app\n")
    root = tmp_path / "cgroup"
    write(root / "machine" / "app" / "cpu.max", "max 100000\n")
    write(root / "machine" / "cpu.max", "150000 100000\n")
    assert cores.cgroup_cpu_limit(proc, root) == 2
    write(root / "machine" / "app" / "cpu.max", "50000 100000\n")
    assert cores.cgroup_cpu_limit(proc, root) == 1
    affinity = len(os.sched_getaffinity(0))
    assert cores.usable_cores(proc, root) == 1
    write(root / "machine" / "app" / "cpu.max", "max 100000\n")
    write(root / "machine" / "cpu.max", "max 100000\n")
    assert cores.cgroup_cpu_limit(proc, root) is None
    assert cores.usable_cores(proc, root) == affinity
    write(root / "machine" / "cpu.max", "not a quota\n")  # malformed: limits nothing
    assert cores.usable_cores(proc, root) == affinity


def test_v2_in_a_namespaced_container(tmp_path: Path) -> None:
    """A container with its own cgroup namespace sees itself as "/": its quota is at the root."""
    proc = write(tmp_path / "proc-cgroup", "0::/\n")
    root = tmp_path / "cgroup"
    write(root / "cpu.max", "100000 100000\n")
    assert cores.usable_cores(proc, root) == 1


def test_v2_path_never_leaves_the_root(tmp_path: Path) -> None:
    proc = write(tmp_path / "proc-cgroup", "0::/../../outside\n")
    root = tmp_path / "cgroup"
    write(tmp_path / "outside" / "cpu.max", "100000 100000\n")
    root.mkdir()
    assert cores.cgroup_cpu_limit(proc, root) is None


def test_v1_cfs_quota(tmp_path: Path) -> None:
    proc = write(
        tmp_path / "proc-cgroup", "5:memory:/x\n4:cpu,cpuacct:/docker/abc\n1:name=systemd:/\n"
    )
    root = tmp_path / "cgroup"
    d = root / "cpu,cpuacct" / "docker" / "abc"
    write(d / "cpu.cfs_quota_us", "250000\n")
    write(d / "cpu.cfs_period_us", "100000\n")
    assert cores.cgroup_cpu_limit(proc, root) == 3
    write(d / "cpu.cfs_quota_us", "-1\n")  # unlimited
    assert cores.cgroup_cpu_limit(proc, root) is None
    write(root / "cpu,cpuacct" / "cpu.cfs_quota_us", "50000\n")  # the mount root caps it
    write(root / "cpu,cpuacct" / "cpu.cfs_period_us", "100000\n")
    assert cores.cgroup_cpu_limit(proc, root) == 1
    write(root / "cpu,cpuacct" / "cpu.cfs_period_us", "zero\n")  # malformed: ignored
    assert cores.cgroup_cpu_limit(proc, root) is None


def test_no_cgroup_file_means_the_affinity(tmp_path: Path) -> None:
    assert cores.cgroup_cpu_limit(tmp_path / "absent", tmp_path) is None
    assert cores.usable_cores(tmp_path / "absent", tmp_path) == len(os.sched_getaffinity(0))


def test_this_machine() -> None:
    assert 1 <= cores.usable_cores() <= len(os.sched_getaffinity(0))


# ------------------------------------------------------------------------- run_each


def _died(item: object, why: str) -> str:
    return f"died:{item}:{why}"


def slow_square(n: int) -> tuple[int, int]:
    time.sleep(0.02 * ((n * 7) % 5))  # finish out of order
    return n, os.getpid()


@pytest.mark.slow
def test_results_in_order_from_several_processes() -> None:
    ran = workers.run_each(slow_square, list(range(20)), 3, died=_died)
    assert [n for n, _ in ran.results] == list(range(20))
    pids = {pid for _, pid in ran.results}
    assert os.getpid() not in pids and len(pids) >= 2
    assert not ran.interrupted and ran.deaths == 0


def test_one_job_runs_here() -> None:
    ran = workers.run_each(slow_square, [1, 2], 1, died=_died)
    assert {pid for _, pid in ran.results} == {os.getpid()}


@pytest.mark.slow
def test_a_worker_killed_mid_item_is_replaced_and_the_item_run_again(tmp_path: Path) -> None:
    def once(n: int) -> str:
        marker = tmp_path / f"killed-{n}"
        if n == 3 and not marker.exists():
            marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return f"ok{n}"

    ran = workers.run_each(once, list(range(8)), 2, died=_died)
    assert ran.results == [f"ok{n}" for n in range(8)]
    assert ran.deaths == 1 and not ran.interrupted


@pytest.mark.slow
def test_an_item_that_kills_every_worker_gets_the_died_result() -> None:
    def deadly(n: int) -> str:
        if n == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return f"ok{n}"

    ran = workers.run_each(deadly, list(range(5)), 2, died=_died)
    killed = "died:2:the worker process was killed by SIGKILL"
    assert ran.results == ["ok0", "ok1", killed, "ok3", "ok4"]
    assert ran.deaths == 2


def test_an_exception_in_a_worker_is_raised_here() -> None:
    def bad(n: int) -> int:
        if n == 4:
            raise ValueError(f"bad item {n}")
        return n

    with pytest.raises(ValueError, match="bad item 4"):
        workers.run_each(bad, list(range(10)), 2, died=_died)


@pytest.mark.slow
@pytest.mark.parametrize("drain", [True, False])
def test_ctrl_c_stops_handing_out_items(tmp_path: Path, drain: bool) -> None:
    """SIGINT (a real signal to this process) after the third result: no new item starts; the
    items in hand (each would take 60 s) are interrupted inside the job — its own cleanup runs
    — with ``drain``, or terminated without it. The results are the items that finished."""
    started, cleaned = tmp_path / "started", tmp_path / "cleaned"
    started.mkdir()
    cleaned.mkdir()

    def item(n: int) -> int:
        (started / str(n)).touch()
        try:
            time.sleep(0.05 if n < 3 else 60)
        finally:
            if n >= 3:
                (cleaned / str(n)).touch()
        return n

    def done(result: int, finished: int, total: int) -> None:
        if finished == 3:
            os.kill(os.getpid(), signal.SIGINT)

    before = signal.getsignal(signal.SIGINT)
    t0 = time.monotonic()
    ran = workers.run_each(item, list(range(40)), 2, died=_died, done=done, drain=drain)
    assert time.monotonic() - t0 < 30
    assert signal.getsignal(signal.SIGINT) is before  # restored
    assert ran.interrupted and ran.results == [0, 1, 2] and ran.indexes == [0, 1, 2]
    began = {int(p.name) for p in started.iterdir()}
    assert {0, 1, 2} <= began and len(began) <= 5  # at most one more item per worker
    in_hand = began - {0, 1, 2}
    assert {int(p.name) for p in cleaned.iterdir()} == (in_hand if drain else set())


def test_ctrl_c_during_a_single_process_run() -> None:
    def item(n: int) -> int:
        if n == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return n

    ran = workers.run_each(item, list(range(5)), 1, died=_died)
    assert ran.interrupted and ran.results == [0, 1]
