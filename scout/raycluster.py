"""A Ray cluster inside a Slurm allocation, for the training driver of a multi-node job.

The head starts on the allocation's first node and one worker on each other node, each through
``srun --overlap`` so that it sees its node's GPUs; the driver then runs against it and the cluster
is stopped when the driver ends, fails, or the job is cancelled. The Slurm executor plugin's jobstep
strips most SLURM_* variables (the node list among them), so the nodes are looked up from the job
id with squeue and scontrol. Outside Slurm the same command starts a local single-node Ray.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

# How long a node may take to join before the job gives up (large clusters start slowly).
JOIN_TIMEOUT_S = float(os.environ.get("SCOUT_RAY_JOIN_TIMEOUT", "300"))
STOP_TIMEOUT_S = 30.0


class RayClusterError(RuntimeError):
    """The Ray cluster could not be started; the message names the node or step that failed."""


def _out(argv: Sequence[str]) -> str:
    try:
        return subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    except FileNotFoundError as exc:
        raise RayClusterError(f"{argv[0]} not found: is this a Slurm node?") from exc
    except subprocess.CalledProcessError as exc:
        raise RayClusterError(f"{' '.join(argv)} failed: {exc.stderr.strip()}") from exc


def allocation_nodes(job_id: str) -> list[str]:
    """The host names of a job's allocation, in Slurm's order (the first runs the batch step)."""
    compact = _out(["squeue", "--noheader", "--jobs", job_id, "--format", "%N"]).strip()
    if not compact:
        raise RayClusterError(f"squeue shows no nodes for job {job_id} (is it running?)")
    return _out(["scontrol", "show", "hostnames", compact]).split()


def ray_port(job_id: str | None) -> int:
    """The GCS port: per job, so that two jobs sharing a node do not collide, and outside Ray's
    default worker port range (10002-19999)."""
    return 6379 if not job_id else 20000 + int(job_id) % 10000


def client_port(job_id: str | None) -> int:
    """The Ray client server's port (the head starts one whether used or not; Ray's 10001 is one
    for the whole node, so a second job's head there failed to bind it): per job, above the GCS
    ports and below Linux's ephemeral ports (32768 on)."""
    return 10001 if not job_id else 30000 + int(job_id) % 2768


def temp_dir() -> str:
    """Ray's session folder, one per user: Ray's default, /tmp/ray, belongs to whoever first ran
    Ray on the node, and every other user's head then fails writing its address file there."""
    import tempfile

    return os.path.join(tempfile.gettempdir(), f"ray-{os.getuid()}")


def auth_mode(environ: dict[str, str], home: Path) -> str:
    """Ray's token authentication, decided once for the head, the workers, this launcher and the
    driver. Since Ray 2.5x a node that finds ~/.ray/auth_token (which any local ``ray.init()``
    writes) turns token auth on by itself, while a client joining by address does not, and the
    launcher then cannot reach its own head. A mode the user set is kept."""
    if environ.get("RAY_AUTH_MODE"):
        return environ["RAY_AUTH_MODE"]
    has_token = environ.get("RAY_AUTH_TOKEN") or environ.get("RAY_AUTH_TOKEN_PATH")
    return "token" if has_token or (home / ".ray" / "auth_token").exists() else "disabled"


def on_node(job_id: str, node: str, argv: Sequence[str]) -> list[str]:
    """Run a command as one task on one node of the job; --overlap shares the node with the step
    that runs the launcher, and without --gres the step sees all the job's GPUs on that node."""
    return ["srun", "--overlap", f"--jobid={job_id}", "--nodes=1", "--ntasks=1", f"--nodelist={node}", *argv]


def start_command(
    ray: str, *, head_address: str | None, node_ip: str, port: int, cpus: int, gpus: int, object_store_mb: int | None,
    client: int = 10001,
) -> list[str]:
    """``ray start`` for the head (``head_address`` None) or a worker joining it, in the foreground
    so that its Slurm step lives exactly as long as the node's Ray processes. Every port is the
    job's own or the system's pick: Ray's fixed defaults (the dashboard agent's 52365, workers'
    10002-19999) are the whole node's, which another job's Ray may hold."""
    argv = [ray, "start", "--block", f"--num-cpus={cpus}", f"--num-gpus={gpus}", "--disable-usage-stats",
            "--dashboard-agent-listen-port=0", "--min-worker-port=0", "--max-worker-port=0"]  # fmt: skip
    if head_address is None:
        argv += ["--head", f"--node-ip-address={node_ip}", f"--port={port}", "--include-dashboard=false",
                 f"--ray-client-server-port={client}", f"--temp-dir={temp_dir()}"]  # fmt: skip
    else:
        argv += [f"--address={head_address}"]
    if object_store_mb:
        argv.append(f"--object-store-memory={object_store_mb * 1024 * 1024}")
    return argv


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def _ray_bin() -> str:
    beside = Path(sys.executable).with_name("ray")
    found = str(beside) if beside.exists() else shutil.which("ray")
    if not found:
        raise RayClusterError("the `ray` command is not installed (pip install '.[cluster]')")
    return found


class RayCluster:
    """Context manager: a running Ray cluster over ``nodes`` whose address is ``self.address``."""

    def __init__(
        self,
        nodes: list[str],
        job_id: str | None,
        *,
        cpus: int,
        gpus: int,
        object_store_mb: int | None = None,
        log=print,
    ):
        self.nodes, self.job_id, self.log = nodes, job_id, log
        self.cpus, self.gpus, self.object_store_mb = cpus, gpus, object_store_mb
        self.port = ray_port(job_id)
        self.procs: list[tuple[str, subprocess.Popen]] = []
        self.address = ""
        # Ray's nodes drain for 30 s on SIGTERM by default; a finished job has nothing to drain.
        self.env = {**os.environ, "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "1", "RAY_USAGE_STATS_ENABLED": "0"}
        # Set here as well, so that this process's ray.init and the driver use the same mode.
        os.environ["RAY_AUTH_MODE"] = self.env["RAY_AUTH_MODE"] = auth_mode(dict(os.environ), Path.home())

    def _cmd(self, node: str, argv: list[str]) -> list[str]:
        return on_node(self.job_id, node, argv) if self.job_id else argv

    def _spawn(self, node: str, argv: list[str]) -> None:
        self.procs.append((node, subprocess.Popen(self._cmd(node, argv), env=self.env, stdin=subprocess.DEVNULL)))

    def __enter__(self) -> RayCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        ray, head = _ray_bin(), self.nodes[0]
        # The head's first non-loopback address (`hostname --ip-address` can be 127.0.1.1 on Debian).
        addresses = _out(self._cmd(head, ["hostname", "--all-ip-addresses"])).split()
        ip = addresses[0] if addresses else _out(self._cmd(head, ["hostname", "--ip-address"])).split()[0]
        self.address = f"{ip}:{self.port}"
        self.log(f"ray: head on {head} ({self.address}), {len(self.nodes) - 1} worker node(s)")
        common = {
            "node_ip": ip,
            "port": self.port,
            "client": client_port(self.job_id),
            "cpus": self.cpus,
            "gpus": self.gpus,
            "object_store_mb": self.object_store_mb,
        }
        self._spawn(head, start_command(ray, head_address=None, **common))
        self._wait_for(1)
        for node in self.nodes[1:]:
            self._spawn(node, start_command(ray, head_address=self.address, **common))
        self._wait_for(len(self.nodes))

    def _check_alive(self) -> None:
        for node, p in self.procs:
            if p.poll() is not None:
                raise RayClusterError(f"ray on node {node} exited with status {p.returncode} while starting")

    def _wait_for(self, n: int) -> None:
        """Wait until ``n`` nodes are alive, failing fast when a node's `ray start` has died."""
        import ray

        deadline = time.monotonic() + JOIN_TIMEOUT_S
        host, port = self.address.rsplit(":", 1)
        while True:
            self._check_alive()
            if not _listening(host, int(port)):
                alive = 0
            else:
                ray.init(address=self.address, logging_level="ERROR", log_to_driver=False)
                try:
                    alive = sum(1 for node in ray.nodes() if node["Alive"])
                finally:
                    ray.shutdown()
            if alive >= n:
                self.log(f"ray: {alive} node(s) up")
                return
            if time.monotonic() > deadline:
                raise RayClusterError(f"only {alive} of {n} Ray nodes joined within {JOIN_TIMEOUT_S:.0f}s")
            time.sleep(1)

    def stop(self) -> None:
        """Workers first, then the head; SIGTERM makes srun end each step, SIGKILL if it lingers."""
        for _, p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for node, p in reversed(self.procs):
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.log(f"ray: node {node} did not stop in {STOP_TIMEOUT_S:.0f}s; killing its step")
                p.kill()
                p.wait()
        self.procs.clear()


def _terminate_on_sigterm() -> None:
    """Slurm cancels and preempts with SIGTERM; turn it into an exception so the cluster stops."""

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def run(driver: Sequence[str], *, cpus: int, gpus: int, object_store_mb: int | None = None, log=print) -> int:
    """Start Ray over the job's allocation (or locally), run ``driver`` with RAY_ADDRESS set, stop
    Ray, and return the driver's exit status."""
    if not driver:
        raise RayClusterError("no driver command given (scout ray-run [options] -- COMMAND ...)")
    job_id = os.environ.get("SLURM_JOB_ID")
    nodes = allocation_nodes(job_id) if job_id else ["localhost"]
    _terminate_on_sigterm()
    with RayCluster(nodes, job_id, cpus=cpus, gpus=gpus, object_store_mb=object_store_mb, log=log) as cluster:
        log(f"ray: running {' '.join(driver)}")
        proc = subprocess.Popen(list(driver), env={**os.environ, "RAY_ADDRESS": cluster.address})
        try:
            return proc.wait()
        finally:
            if proc.poll() is None:
                proc.terminate()
                proc.wait()


def probe() -> list[dict]:
    """One task pinned to each node of the running cluster, reporting where it ran and which GPUs
    it was given: a smoke test of the allocation before a long training job."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    @ray.remote(num_cpus=1)
    def where() -> dict:
        return {
            "host": socket.gethostname(),
            "slurm_node": os.environ.get("SLURMD_NODENAME"),
            "gpus": [str(g) for g in ray.get_gpu_ids()],
        }

    ray.init(logging_level="ERROR")
    try:
        nodes = [n for n in ray.nodes() if n["Alive"]]
        tasks = []
        for n in nodes:
            gpus = 1 if n["Resources"].get("GPU", 0) >= 1 else 0
            strategy = NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
            tasks.append(where.options(num_gpus=gpus, scheduling_strategy=strategy).remote())
        return ray.get(tasks)
    finally:
        ray.shutdown()


if __name__ == "__main__":  # python -m scout.raycluster [OUT.json]: run inside `scout ray-run`
    import json

    found = probe()
    for f in found:
        print(f"ray node on {f['slurm_node'] or f['host']}: GPUs {','.join(f['gpus']) or 'none'}")
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(json.dumps(found, indent=1))
