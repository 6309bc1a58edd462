"""A private single-node Slurm cluster on localhost, started and stopped by the tests.

Debian's ``slurm-wlm`` and ``munge`` (.ci/run installs them) run as ordinary children of the
test: ``munged`` on a socket and key of its own, ``slurmctld`` and ``slurmd`` on free ports
with a ``slurm.conf`` in a temporary folder that only ``SLURM_CONF`` points to. Nothing of the
machine's own Slurm or munge (if any) is used or touched, and stopping the cluster cancels
its jobs and ends exactly the processes it started. The node is configured with two fake
GPUs (``gres/gpu`` on /dev/null and /dev/zero) so that GPU jobs can be scheduled; a grader
in such a job sees no CUDA device and reports the GPU criteria ``blocked``.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scancel")
NODE = "gradertest"


def missing_binaries() -> list[str]:
    return [name for name in BINARIES if shutil.which(name) is None and not Path("/usr/sbin", name).exists()]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _memory_mb() -> int:
    with open("/proc/meminfo") as meminfo:
        total_kb = next(int(line.split()[1]) for line in meminfo if line.startswith("MemTotal:"))
    return int(total_kb / 1024 * 0.9)  # below what slurmd finds, or it drains the node


def _binary(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


class LocalSlurm:
    """``start()`` the cluster (returns the seconds it took), ``env`` for Slurm commands, ``stop()``."""

    def __init__(self, root: Path):
        self.root = root
        self.processes: list[subprocess.Popen] = []
        self.env = {**os.environ, "SLURM_CONF": str(root / "slurm.conf")}

    def _config(self) -> str:
        root, host = self.root, socket.gethostname().split(".")[0]
        return "\n".join([
            "ClusterName=gradertest",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "AuthType=auth/munge",
            f"AuthInfo=socket={root}/munge.socket",
            "CredType=cred/munge",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={root}/state",
            f"SlurmdSpoolDir={root}/spool",
            f"SlurmctldPidFile={root}/slurmctld.pid",
            f"SlurmdPidFile={root}/slurmd.pid",
            f"SlurmctldLogFile={root}/log/slurmctld.log",
            f"SlurmdLogFile={root}/log/slurmd.log",
            "ProctrackType=proctrack/linuxproc",  # no cgroups: works in containers
            "TaskPlugin=task/none",
            "MpiDefault=none",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=sched_interval=1,bf_interval=1",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "ReturnToService=2",
            "MinJobAge=6",  # sbatch --wait then polls every 2 s instead of backing off to 32 s
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "GresTypes=gpu",
            f"NodeName={NODE} NodeHostname={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} "
            f"RealMemory={_memory_mb()} Gres=gpu:2 State=UNKNOWN",
            "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
        ]) + "\n"

    def _spawn(self, *command: str) -> None:
        log = open(self.root / "log" / f"{Path(command[0]).name}.out", "wb")
        self.processes.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                               stdin=subprocess.DEVNULL))
        log.close()

    def start(self, timeout: float = 60.0) -> float:
        started = time.monotonic()
        for name in ("state", "spool", "log"):
            (self.root / name).mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o711)  # munged wants its socket's folder reachable by everyone
        key = self.root / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        (self.root / "slurm.conf").write_text(self._config())
        gres = "".join(f"NodeName={NODE} Name=gpu File={device}\n" for device in ("/dev/null", "/dev/zero"))
        (self.root / "gres.conf").write_text(gres)
        self._spawn(_binary("munged"), "--foreground", "--force", f"--socket={self.root}/munge.socket",
                    f"--key-file={key}", f"--pid-file={self.root}/munged.pid", f"--log-file={self.root}/log/munged.log",
                    f"--seed-file={self.root}/munged.seed")
        self._wait(lambda: (self.root / "munge.socket").exists(), started + timeout, "munged")
        self._spawn(_binary("slurmctld"), "-D", "-i")
        self._spawn(_binary("slurmd"), "-D", "-N", NODE)
        self._wait(self._idle, started + timeout, "the node to become idle")
        return time.monotonic() - started

    def _idle(self) -> bool:
        result = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env=self.env, timeout=10)
        return result.stdout.strip() == "idle"

    def _wait(self, ready, deadline: float, what: str) -> None:
        while not ready():
            dead = [p.args[0] for p in self.processes if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted((self.root / "log").iterdir()))
                raise RuntimeError(f"local Slurm: waited in vain for {what} (exited: {dead})\n{logs}")
            time.sleep(0.2)

    def stop(self) -> None:
        """Cancel every job of this cluster, then end the daemons this object started."""
        if self.processes and self.processes[-1].poll() is None:
            subprocess.run(["scancel", "--full", "--user", str(os.getuid())], env=self.env, capture_output=True, timeout=30)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and subprocess.run(
                ["squeue", "-h"], env=self.env, capture_output=True, text=True, timeout=10
            ).stdout.strip():
                time.sleep(0.5)
        for process in reversed(self.processes):
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.processes = []
