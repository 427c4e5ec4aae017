"""A real Slurm cluster on this host for the tests: munged, slurmctld and one slurmd per node.

Debian's slurm-wlm and munge, no systemd: the daemons run in the foreground as children of the
test process and are stopped by their process ids, pass or fail. Config, state, spool, logs, the
munge key and socket all live in one temp folder. Several "nodes" share this host (slurmd -N,
each on its own port), and GPUs are faked with character devices listed in gres.conf, so Slurm
sets CUDA_VISIBLE_DEVICES as on a GPU node.

Inside a job the snakemake Slurm jobstep strips SLURM_CONF, so commands there (srun, squeue) find
the config where they look on a configless cluster's nodes: /run/slurm/conf, a link to our folder,
the one thing this harness writes outside it (removed at stop). (A configless slurmd would make
that link itself, but it fetches its config before it can read which munge socket to use.)
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.toy import mini_config

BINARIES = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "scontrol", "sinfo")
RUN_CONF = Path("/run/slurm/conf")


def missing() -> str | None:
    """Why a cluster cannot be started here, or None."""
    if os.geteuid() != 0:
        return "slurmd must run as root"
    absent = [b for b in BINARIES if not (shutil.which(b) or Path("/usr/sbin", b).exists())]
    if absent:
        return f"not installed: {', '.join(absent)} (Debian: apt-get install slurm-wlm munge)"
    if Path("/etc/slurm/slurm.conf").exists():
        return "/etc/slurm/slurm.conf exists: commands inside jobs would talk to that cluster, not ours"
    _drop_stale_link()
    if RUN_CONF.exists() or RUN_CONF.is_symlink():
        return f"{RUN_CONF} exists: another (configless) Slurm is configured on this host"
    return None


def _drop_stale_link() -> None:
    """A link left by a harness that was killed before it could stop (its temp folder is gone, so
    no cluster runs behind it): removed, where it would refuse every later cluster on this host."""
    if RUN_CONF.is_symlink() and not RUN_CONF.exists() and "pytest-of-" in os.readlink(RUN_CONF):
        RUN_CONF.unlink()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bin(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


@dataclass
class Node:
    name: str
    cpus: int
    mem_mb: int
    gpus: int = 0


class SlurmCluster:
    def __init__(self, root: Path, nodes: list[Node], partition: str = "debug"):
        self.root, self.nodes, self.partition = Path(root), nodes, partition
        self.procs: list[tuple[str, subprocess.Popen]] = []
        self.conf = self.root / "etc" / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    # -- configuration ------------------------------------------------------------------------------

    def _write_config(self) -> None:
        r = self.root
        for d in ("etc", "state", "spool", "log", "munge", "dev"):
            (r / d).mkdir(parents=True, exist_ok=True)
        host = socket.gethostname().split(".")[0]
        self.ctld_port = _free_port()
        lines = [
            "ClusterName=scouttest",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={self.ctld_port}",
            "SlurmUser=root",
            "AuthType=auth/munge",
            f"AuthInfo=socket={r}/munge/munge.socket",
            f"StateSaveLocation={r}/state",
            f"SlurmdSpoolDir={r}/spool/%n",
            f"SlurmctldLogFile={r}/log/slurmctld.log",
            f"SlurmdLogFile={r}/log/slurmd-%n.log",
            f"SlurmctldPidFile={r}/state/slurmctld.pid",
            f"SlurmdPidFile={r}/spool/slurmd-%n.pid",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "MpiDefault=none",
            "ReturnToService=2",
            "SchedulerParameters=sched_interval=1",
            "KillWait=5",
            "MinJobAge=3600",  # finished jobs stay visible to scontrol for the tests' checks
            "GresTypes=gpu",
        ]
        gres, dev = [], 0
        for n in self.nodes:
            port = _free_port()
            line = f"NodeName={n.name} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} CPUs={n.cpus} RealMemory={n.mem_mb}"
            if n.gpus:
                line += f" Gres=gpu:{n.gpus}"
                for _ in range(n.gpus):
                    fake = r / "dev" / f"nvidia{dev}"
                    if not fake.exists():
                        os.mknod(fake, 0o666 | 0o020000, os.makedev(1, 3))  # a character device, like /dev/null
                    dev += 1
                gres.append(f"NodeName={n.name} Name=gpu File={r}/dev/nvidia[{dev - n.gpus}-{dev - 1}]")
            lines.append(line + " State=UNKNOWN")
        names = ",".join(n.name for n in self.nodes)
        lines.append(f"PartitionName={self.partition} Nodes={names} Default=YES MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")
        (r / "etc" / "gres.conf").write_text("\n".join(gres) + "\n")

    # -- daemons ------------------------------------------------------------------------------------

    def _daemon(self, name: str, argv: list[str]) -> None:
        log = open(self.root / "log" / f"{name}.out", "w")
        self.procs.append((name, subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env)))

    def start(self, timeout: float = 60) -> SlurmCluster:
        self._write_config()
        m = self.root / "munge"
        subprocess.run([_bin("mungekey"), "-c", "-f", "-k", str(m / "munge.key")], check=True)
        self._daemon(
            "munged",
            [
                _bin("munged"),
                "-F",
                "-f",
                f"--socket={m}/munge.socket",
                f"--key-file={m}/munge.key",
                f"--pid-file={m}/munged.pid",
                f"--log-file={m}/munged.log",
                f"--seed-file={m}/munged.seed",
            ],
        )
        self._wait(lambda: (m / "munge.socket").exists(), timeout, "munged did not create its socket")
        self._daemon("slurmctld", [_bin("slurmctld"), "-D", "-f", str(self.conf)])
        self._wait(self._ctld_up, timeout, "slurmctld did not answer")
        _drop_stale_link()
        if RUN_CONF.exists() or RUN_CONF.is_symlink():
            raise RuntimeError(f"{RUN_CONF} exists: another Slurm is configured on this host")
        RUN_CONF.parent.mkdir(parents=True, exist_ok=True)
        RUN_CONF.symlink_to(self.conf.parent)
        for n in self.nodes:
            self._daemon(f"slurmd-{n.name}", [_bin("slurmd"), "-D", "-N", n.name, "-f", str(self.conf)])
        self._wait(self._nodes_idle, timeout, "the nodes did not become idle")
        return self

    def _ctld_up(self) -> bool:
        return self.run("scontrol", "ping", check=False).returncode == 0

    def _nodes_idle(self) -> bool:
        out = self.run("sinfo", "--noheader", "--Node", "--format=%N %t", check=False).stdout.split()
        return out[1::2] == ["idle"] * len(self.nodes)

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            dead = [name for name, p in self.procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"{what} (exited: {dead or 'none'}); logs in {self.root / 'log'}:\n{self.logs()}")
            time.sleep(0.3)

    def logs(self) -> str:
        return "\n".join(f"== {p.name}\n{p.read_text()[-2000:]}" for p in sorted((self.root / "log").glob("*")))

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), capture_output=True, text=True, env=self.env, check=check)

    def stop(self) -> None:
        """Cancel every job, then stop the daemons by their pids (SIGTERM, then SIGKILL)."""
        if self.procs:
            self.run("scancel", "--full", "--user=root", check=False)
        for _, p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.procs.clear()
        if RUN_CONF.is_symlink() and str(os.readlink(RUN_CONF)).startswith(str(self.root)):
            RUN_CONF.unlink()

    def __enter__(self) -> SlurmCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()


# Polling faster than the profile's production values, so the tests spend their time on jobs.
FAST = ["--slurm-init-seconds-before-status-checks", "1"]


def slurm_config(results: str) -> dict:
    """A few jobs of every kind: toy world, training (one of them SCOUT), evaluation, report;
    distinct resources per rule family and method, so that the test can see each reach sbatch."""
    cfg = mini_config(results)
    cfg["experiments"] = {"main": {"settings": ["toy-l-s-math"], "methods": ["opd", "scout"], "seeds": [1]}}
    cfg["claims"] = []  # the config's own claims are about experiments left out here
    cfg["settings"] = {"toy-l-s-math": cfg["settings"]["toy-l-s-math"]}
    cfg["models"].pop("toy-medium-grpo")
    cfg.pop("analysis")
    cfg["report"]["pdf"] = False
    cfg["resources"] = {
        "default": {"nodes": 1, "gpus_per_node": 0, "cpus_per_node": 1, "mem_mb": 1000, "runtime": 30},
        "evaluate": {"cpus_per_node": 2, "mem_mb": 1500, "runtime": 20},
        "train": {"methods": {"scout": {"mem_mb": 2500, "runtime": 45}}},
    }
    return cfg


def slurm_jobs(cluster) -> list[dict]:
    """Every job slurmctld remembers, as `scontrol show job --oneliner` key=value pairs."""
    out = cluster.run("scontrol", "show", "job", "--oneliner").stdout
    return [dict(re.findall(r"(\w+)=(\S*)", line)) for line in out.splitlines() if line.strip()]
