"""CPU time of a process group and of each thread, from /proc (Linux): robust to a loaded machine
where wall time mostly measures waiting for a core. Used by bench_shim.py. Each thread's time is
its ``schedstat`` run time (nanoseconds) where the kernel keeps one, else ``stat``'s utime + stime
(clock ticks, 10 ms here: a 2-second block would carry +-0.5 % of quantisation); a process's is the
sum of its live threads'."""

from __future__ import annotations

import os
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def _stat(path: Path) -> tuple[str, list[str]]:
    """(comm, the fields after it) of a /proc stat file; comm may hold spaces and parentheses."""
    text = path.read_text()
    return text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()


def _cpu(fields: list[str]) -> float:
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime (stat fields 14, 15)


def _thread_cpu(task: Path, fields: list[str]) -> float:
    """Seconds the thread ran: schedstat's first field (ns), else the stat ticks."""
    try:
        return int((task / "schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return _cpu(fields)


def group_pids(pgid: int) -> list[int]:
    """Live processes of process group ``pgid`` (a server started with start_new_session)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int(_stat(entry / "stat")[1][2]) == pgid:
                    pids.append(int(entry.name))
            except (OSError, ValueError, IndexError):
                continue
    return sorted(pids)


def name(pid: int) -> str:
    """The process title (SGLang sets ``sglang::scheduler`` etc.), else its comm."""
    try:
        title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        return title if title.startswith("sglang::") else _stat(Path(f"/proc/{pid}/stat"))[0]
    except OSError:
        return "?"


def snapshot(pgid: int) -> dict:
    """{pid: {"name", "cpu_s", "threads": {tid: (comm, cpu_s)}}} for every process of the group."""
    out = {}
    for pid in group_pids(pgid):
        try:
            threads = {}
            for task in Path(f"/proc/{pid}/task").iterdir():
                try:
                    tcomm, tfields = _stat(task / "stat")
                    threads[int(task.name)] = (tcomm, _thread_cpu(task, tfields))
                except (OSError, ValueError):
                    continue
            out[pid] = {"name": name(pid), "cpu_s": sum(cpu for _, cpu in threads.values()), "threads": threads}
        except OSError:
            continue
    return out


def thread_role(pid: int, tid: int, comm: str) -> str:
    """Which part of a scheduler process a thread is (see the shim's publisher.py for the names)."""
    if tid == pid:
        return "main"
    if comm == "e3s-publisher":
        return "shim publisher"
    if comm.startswith("3/ZMQbg"):
        return "shim zmq"
    if "ZMQbg" in comm:
        return "sglang zmq"
    return "other"


def delta(before: dict, after: dict) -> dict:
    """CPU seconds spent between two snapshots: per process name, and per thread role of each."""
    procs: dict[str, float] = {}
    roles: dict[str, dict[str, float]] = {}
    for pid, a in after.items():
        b = before.get(pid, {"cpu_s": 0.0, "threads": {}})
        per = roles.setdefault(a["name"], {})
        for tid, (comm, cpu) in a["threads"].items():  # a thread that ended in between loses its share
            spent = cpu - b["threads"].get(tid, (comm, 0.0))[1]
            role = thread_role(pid, tid, comm)
            per[role] = per.get(role, 0.0) + spent
            procs[a["name"]] = procs.get(a["name"], 0.0) + spent
    return {"process_cpu_s": procs, "thread_cpu_s": roles}
