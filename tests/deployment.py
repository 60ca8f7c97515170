"""The real deployment's parts for the tests (issue 30): a PostgreSQL server and an HAProxy load balancer from the
machine's Debian packages, each started in a temporary directory and stopped (its directory removed) afterwards.

Where a part cannot run here, the tests that need it skip, saying why (`postgres_absent()`, `haproxy_absent()`);
`.ci/run` installs both (`apt-get install postgresql haproxy`) and sets ``ARC_REQUIRE_POSTGRES=1``, which turns
that skip into a failure. PostgreSQL refuses to run as root: as root the server runs as the ``postgres`` user
(`runuser`), its directory handed to that user. The server listens on 127.0.0.1 only (no Unix socket), trusts
local connections (a throwaway cluster), keeps PostgreSQL's durability defaults (fsync, synchronous_commit on)
so that a kill -9 of the database tests what a deployment gets.

Usable outside pytest too (`benchmarks/bench_many_proxies.py`): `PostgresServer.start()`, `Haproxy.start(...)`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

POSTGRES_REQUIRED = "ARC_REQUIRE_POSTGRES"  # set by .ci/run: a missing PostgreSQL fails instead of skipping


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (bound to port 0, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def postgres_bin() -> Path | None:
    """The directory of PostgreSQL's server programs (initdb, pg_ctl, postgres): Debian keeps them in
    /usr/lib/postgresql/VERSION/bin (the newest is taken); else wherever PATH finds initdb."""
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                      key=lambda path: int(path.parent.parent.name) if path.parent.parent.name.isdigit() else 0)
    if versions:
        return versions[-1].parent
    found = shutil.which("initdb")
    return Path(found).resolve().parent if found else None


def postgres_absent() -> str | None:
    """Why PostgreSQL cannot run here (None when it can): no server programs, or no psycopg."""
    if postgres_bin() is None:
        return "PostgreSQL's server programs are not installed (Debian: apt-get install postgresql)"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install 'arc-ref[postgres]')"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser: PostgreSQL refuses to run as root"
    return None


def haproxy_absent() -> str | None:
    if shutil.which("haproxy") is None and not Path("/usr/sbin/haproxy").exists():
        return "HAProxy is not installed (Debian: apt-get install haproxy)"
    return None


def _as_postgres(command: Sequence[str]) -> list[str]:
    """``command`` as the postgres user when this process is root (PostgreSQL refuses root)."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else list(command)


class PostgresServer:
    """A throwaway PostgreSQL cluster in a temporary directory, on a free port of 127.0.0.1."""

    def __init__(self, directory: Path, port: int, programs: Path) -> None:
        self.directory = directory
        self.data = directory / "data"
        self.port = port
        self.programs = programs
        self.log = directory / "server.log"
        self.options = ""  # pg_ctl -o: where it listens, and the extra settings

    @classmethod
    def start(cls, settings: Sequence[str] = ()) -> "PostgresServer":
        """initdb, then pg_ctl start (waiting until it accepts connections). ``settings``: extra ``-c`` settings."""
        programs = postgres_bin()
        if programs is None:
            raise RuntimeError(postgres_absent() or "no PostgreSQL")
        directory = Path(tempfile.mkdtemp(prefix="arc-pg-"))
        directory.chmod(0o755)  # the postgres user must reach its data directory
        server = cls(directory, free_port(), programs)
        try:
            if os.geteuid() == 0:
                shutil.chown(directory, "postgres", "postgres")
            subprocess.run(_as_postgres([str(programs / "initdb"), "-D", str(server.data), "-U", "arc", "-A", "trust",
                                         "-E", "UTF8", "--locale=C", "--no-sync"]),
                           check=True, capture_output=True, text=True, timeout=180)
            # syncfs: crash recovery syncs the file system once instead of every file (a restart after kill -9
            # takes ~1 s instead of ~5 s here; durability is the same)
            options = [f"-c listen_addresses=127.0.0.1 -p {server.port} -c unix_socket_directories=''",
                       "-c max_connections=300 -c recovery_init_sync_method=syncfs",
                       *(f"-c {setting}" for setting in settings)]
            server.options = " ".join(options)
            server.resume()
        except BaseException:
            server.remove()
            raise
        return server

    def resume(self) -> None:
        """Start the server on its data directory (again, after a stop or a kill: crash recovery runs)."""
        done = subprocess.run(_as_postgres([str(self.programs / "pg_ctl"), "-D", str(self.data), "-l", str(self.log),
                                            "-o", self.options, "-w", "-t", "120", "start"]),
                              capture_output=True, text=True, timeout=180)
        if done.returncode != 0:
            raise RuntimeError(f"pg_ctl start failed ({done.returncode}): {done.stdout}{done.stderr}"
                               f"{self.log.read_text(errors='replace')[-2000:] if self.log.exists() else ''}")

    @property
    def dsn(self) -> str:
        return self.url("postgres")

    def url(self, database: str) -> str:
        return f"postgresql://arc@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """A new empty database; its URL."""
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def pids(self) -> list[int]:
        """The postmaster's pid and its children's (every process of this server)."""
        try:
            postmaster = int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return []
        found = [postmaster]
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if int(fields[1]) == postmaster:
                    found.append(int(entry.name))
        return found

    def kill(self) -> None:
        """kill -9 of the database: every process of the server at once (a crash; restart with `resume`)."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while any(Path(f"/proc/{pid}").exists() for pid in self.pids()) and time.monotonic() < deadline:
            time.sleep(0.02)

    def stop(self) -> None:
        subprocess.run(_as_postgres([str(self.programs / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w",
                                     "stop"]), capture_output=True, text=True, timeout=120)

    def remove(self) -> None:
        self.stop()
        self.kill()  # whatever did not stop
        shutil.rmtree(self.directory, ignore_errors=True)


@contextlib.contextmanager
def postgres_server(settings: Sequence[str] = ()) -> Iterator[PostgresServer]:
    server = PostgresServer.start(settings)
    try:
        yield server
    finally:
        server.remove()


HAPROXY_CONFIG = """\
global
    maxconn 2048
    tune.bufsize 1048576

defaults
    mode http
    timeout connect 2s
    timeout client 600s
    timeout server 600s
    timeout check 2s
    retries 3
    option redispatch 1
    retry-on conn-failure empty-response
    option http-buffer-request

frontend arc
    bind 127.0.0.1:{port}
    default_backend proxies

backend proxies
    balance roundrobin
    option httpchk GET /health
    http-check expect status 200
{servers}
"""


class _Daemon:
    """A helper program listening on ``port`` of 127.0.0.1, its files in ``directory`` (removed by `stop`)."""

    def __init__(self, directory: Path, port: int, process: subprocess.Popen[bytes]) -> None:
        self.directory = directory
        self.port = port
        self.process = process

    def wait_listening(self, name: str, log: Path, ceiling_s: float) -> None:
        """Until the port accepts a connection; stopped, and RuntimeError with its log's end, if it exits first or
        ``ceiling_s`` passes."""
        deadline = time.monotonic() + ceiling_s
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return
            if self.process.poll() is not None or time.monotonic() > deadline:
                said = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                self.stop()
                raise RuntimeError(f"{name} did not start: {said}")
            time.sleep(0.02)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


class Haproxy(_Daemon):
    """HAProxy in front of ``backends`` (host:port), round-robin, no stickiness; health checks (the proxy's GET
    /health) every 200 ms take a dead instance out. A request the balancer could not deliver (connection refused) or whose
    instance died before answering (empty response) is sent again to another instance (``retry-on``; the latter only
    for a request HAProxy holds whole, ``option http-buffer-request``, in one buffer, ``tune.bufsize``)."""

    @classmethod
    def start(cls, backends: Sequence[str]) -> "Haproxy":
        directory = Path(tempfile.mkdtemp(prefix="arc-haproxy-"))
        port = free_port()
        servers = "\n".join(f"    server proxy{number} {address} check inter 200ms fall 1 rise 2"
                            for number, address in enumerate(backends, start=1))
        config = directory / "haproxy.cfg"
        config.write_text(HAPROXY_CONFIG.format(port=port, servers=servers), encoding="utf-8")
        check = subprocess.run(["haproxy", "-c", "-q", "-f", str(config)], capture_output=True, text=True)
        if check.returncode != 0:
            raise RuntimeError(f"haproxy refused its configuration: {check.stdout}{check.stderr}")
        log = open(directory / "haproxy.log", "wb")
        process = subprocess.Popen(["haproxy", "-db", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT)
        log.close()
        balancer = cls(directory, port, process)
        balancer.wait_listening("haproxy", directory / "haproxy.log", 60)
        return balancer

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


PGBOUNCER = "/usr/sbin/pgbouncer"


def pgbouncer_absent() -> str | None:
    if shutil.which("pgbouncer") is None and not Path(PGBOUNCER).exists():
        return "PgBouncer is not installed (Debian: apt-get install pgbouncer)"
    return None


def require_pgbouncer() -> None:
    """Skip the test where PgBouncer is absent; fail it where ARC_REQUIRE_PGBOUNCER=1 says it must run (CI installs
    it: .ci/run)."""
    import pytest

    why = pgbouncer_absent()
    if why is not None:
        if os.environ.get("ARC_REQUIRE_PGBOUNCER") == "1":
            pytest.fail(f"ARC_REQUIRE_PGBOUNCER=1 but {why}")
        pytest.skip(why)


class PgBouncer(_Daemon):
    """PgBouncer (Debian's package) in front of a `PostgresServer`, in transaction mode (each transaction may run on
    another server connection) unless ``pool_mode`` says, ``pool_size`` server connections per database, trusting
    user arc."""

    @classmethod
    def start(cls, server: PostgresServer, pool_size: int = 2, pool_mode: str = "transaction") -> "PgBouncer":
        directory = Path(tempfile.mkdtemp(prefix="arc-pgbouncer-"))
        directory.chmod(0o755)
        port = free_port()
        (directory / "users.txt").write_text('"arc" ""\n', encoding="utf-8")
        config = directory / "pgbouncer.ini"
        config.write_text(f"""[databases]
* = host=127.0.0.1 port={server.port}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {directory / "users.txt"}
pool_mode = {pool_mode}
default_pool_size = {pool_size}
max_client_conn = 500
server_login_retry = 1
logfile = {directory / "pgbouncer.log"}
""", encoding="utf-8")
        if os.geteuid() == 0:
            for path in (directory, directory / "users.txt", config):
                shutil.chown(path, "postgres", "postgres")
        program = shutil.which("pgbouncer") or PGBOUNCER
        process = subprocess.Popen(_as_postgres([program, str(config)]), stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        bouncer = cls(directory, port, process)
        bouncer.wait_listening("pgbouncer", directory / "pgbouncer.log", 30)
        return bouncer

    def url(self, database: str) -> str:
        return f"postgresql://arc@127.0.0.1:{self.port}/{database}"


@contextlib.contextmanager
def haproxy(backends: Sequence[str]) -> Iterator[Haproxy]:
    balancer = Haproxy.start(backends)
    try:
        yield balancer
    finally:
        balancer.stop()


# --- the proxy deployment: serve-scripted upstream, arc-ref proxy instances, the balancer --------------------


def _bin(name: str) -> str:
    import sys

    return str(Path(sys.executable).parent / name)


class Service:
    """A child process listening on 127.0.0.1:port (its output in ``log``)."""

    def __init__(self, command: list[str], port: int, log: Path, ready_path: str) -> None:
        self.command, self.port, self.log = command, port, log
        self.ready_path = ready_path
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> "Service":
        from tests.waiting import http_ok, wait_until

        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(self.command, stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_until(http_ok(f"http://127.0.0.1:{self.port}{self.ready_path}"), self.process,
                       f"{Path(self.command[0]).name} on port {self.port}")
        except AssertionError as problem:
            raise AssertionError(f"{problem}\n{self.log.read_text(errors='replace')[-3000:]}") from None
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def kill(self) -> None:
        """kill -9."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


def scripted_upstream(directory: Path, tokenizer: Path, latency_ms: float = 0.0, port: int | None = None,
                      max_model_len: int = 16384) -> Service:
    """`arc-eval serve-scripted` with the policy that recalls (arc_eval.agent.recall_then_submit)."""
    port = port or free_port()
    command = [_bin("arc-eval"), "serve-scripted", "--port", str(port), "--tokenizer", str(tokenizer),
               "--max-model-len", str(max_model_len), "--model-name", "scripted", "--latency-ms", str(latency_ms),
               "--policy", "arc_eval.agent.recall_then_submit:RecallThenSubmitPolicy"]
    return Service(command, port, directory / f"upstream-{port}.log", "/health").start()


def arc_proxy(directory: Path, upstream_url: str, tokenizer: Path, store: str | None, settings: dict[str, object],
              port: int | None = None) -> Service:
    """`arc-ref proxy` as a user starts it (``store``: a database URL, a directory, or None: memory)."""
    port = port or free_port()
    command = [_bin("arc-ref"), "proxy", "--upstream", upstream_url, "--tokenizer", f"hf-dir:{tokenizer}",
               "--port", str(port), *(["--store", store] if store else []),
               *(part for key, value in settings.items() for part in ("--set", f"{key}={value}"))]
    return Service(command, port, directory / f"proxy-{port}.log", "/v1/models").start()


@contextlib.contextmanager
def running(*services: "Service | Haproxy") -> Iterator[None]:
    """Each of ``services`` stopped when the block ends, however it ends."""
    try:
        yield
    finally:
        for service in services:
            service.stop()


def rounds(service: Service) -> list[dict[str, Any]]:
    """The proxy's GET /arc/rounds: the upstream calls it made, as it recorded them."""
    import httpx  # the proxy extra's; only the proxy tests call this

    return httpx.get(f"http://127.0.0.1:{service.port}/arc/rounds", timeout=30).json()  # type: ignore[no-any-return]


def views(records: list[dict[str, Any]]) -> list[str]:
    """The upstream views of one conversation, in order (its rounds ordered by the rows they were taken at)."""
    conversations = {record["conversation"] for record in records}
    assert len(conversations) == 1, f"expected one conversation, got {len(conversations)}"
    return [record["view_digest"] for record in sorted(records, key=lambda record: record["seq"])
            if record["status"] == 200]


def agents_beside(proxies: Sequence[Service], agents: int, turns: int, command: Callable[[], list[str] | None]
                  ) -> tuple[list[int], list[tuple[int, str]]]:
    """``agents`` agents of ``turns`` turns each, their requests round-robin over ``proxies`` (each turn's reply
    kept, its tool calls answered, a user message asking to go on), while ``command()`` (an `arc-ref` command line,
    or None to skip a round) runs again and again in a subprocess until they end: the status of every request and
    (exit status, standard output and error) of every command."""
    import random
    import sys
    import threading

    import httpx

    from tests.proxy.harness import BASH_TOOL

    statuses: list[int] = []
    runs: list[tuple[int, str]] = []
    stop = threading.Event()

    def agent(number: int) -> None:
        messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful assistant."},
                                          {"role": "user", "content": f"List the files of d{number}."}]
        for turn in range(turns):
            base = proxies[(number + turn) % len(proxies)].url
            response = httpx.post(f"{base}/chat/completions", timeout=120,
                                  json={"model": "scripted", "messages": messages, "tools": [BASH_TOOL]})
            statuses.append(response.status_code)
            if response.status_code != 200:
                return
            said = response.json()["choices"][0]["message"]
            messages.append(said)
            messages += [{"role": "tool", "tool_call_id": call["id"], "content": f"ok {turn} " * 50}
                         for call in said.get("tool_calls") or ()]
            messages.append({"role": "user", "content": f"go on ({turn})"})

    def repeat() -> None:
        while not stop.is_set():
            arguments = command()
            if arguments is not None:
                done = subprocess.run([sys.executable, "-m", "arc_ref.frontends.cli", *arguments],
                                      capture_output=True, text=True, check=False)
                runs.append((done.returncode, done.stdout + done.stderr))
            time.sleep(random.uniform(0.05, 0.3))

    threads = [threading.Thread(target=agent, args=(number,)) for number in range(agents)]
    repeating = threading.Thread(target=repeat)
    repeating.start()
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        stop.set()
        repeating.join()
    return statuses, runs
