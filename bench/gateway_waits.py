"""Waiting claims and slow clients against producers, for ``bench/gateway.py --waits``.

Legs, each bounded by ``seconds`` and on 127.0.0.1 only:

- **ASGI**: uvicorn (one process) serving example_project.asgi's ``application`` (the
  gateway's entry, ``gateway_application``); 200 claims wait at once (``wait_ms``
  4,000 to 6,000 on a queue nobody enqueues to, each claiming again when its wait
  ends; the claimers in a process of their own) while 4 producers ``POST /sdk/jobs``
  one after another. Producer p50/p99,
  against the same producers with no claim waiting. Then the same two legs with
  Django's own ASGI handler (example_project.asgi's ``site``: the site's middleware,
  a thread per request), for contrast within the run.
- **footprint**: the uvicorn process's resident memory and thread count with no
  claim waiting and with 1,000 waiting, under each entry.
- **WSGI**: gunicorn ``--workers 2 --worker-class gthread --threads 4`` with the
  default ``MAX_WAITING_CLAIMS`` (2): the same 200 claims (those over the cap answer
  at once with ``Retry-After`` and claim again after it) and producers.
- **slow clients behind nginx**: Debian's nginx, its own config in a temporary
  directory, buffering requests in front of uvicorn with header and body timeouts
  (docs/deployment.md); 20 sockets trickle headers or a body at 1 byte/s while one
  producer enqueues. Enqueue p99 with and without them; and, for contrast, one
  enqueue straight to gunicorn while 20 such sockets hold its threads.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
NGINX = "/usr/sbin/nginx"
IDLE_QUEUE, QUEUE, JOB_TYPE = "bench-idle", "emails", "newsletter.daily_digest"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_until_up(process: subprocess.Popen[bytes], url: str, what: str) -> None:
    import httpx

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{what} exited")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit(f"{what} did not answer within 60 s")


def start_uvicorn(
    env: dict[str, str], port: int, app: str = "application"
) -> subprocess.Popen[bytes]:
    """Serve example_project.asgi's ``app`` with one uvicorn process; return once it answers."""
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", f"example_project.asgi:{app}",
         "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
         "--no-access-log", "--backlog", "2048"],
        cwd=ROOT,
        env=env,
    )  # fmt: skip
    _wait_until_up(process, f"http://127.0.0.1:{port}/sdk/openapi.json", "uvicorn")
    return process


def start_gunicorn(env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    """Serve example_project.wsgi as the documented WSGI deployment."""
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "--workers", "2", "--worker-class", "gthread",
         "--threads", "4", "--bind", f"127.0.0.1:{port}", "--log-level", "warning",
         "example_project.wsgi:application"],
        cwd=ROOT,
        env=env,
    )  # fmt: skip
    _wait_until_up(process, f"http://127.0.0.1:{port}/sdk/openapi.json", "gunicorn")
    return process


NGINX_CONF = """
worker_processes 1;
error_log {dir}/error.log warn;
pid {dir}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    client_header_timeout 10s;
    client_body_timeout 10s;
    send_timeout 10s;
    client_max_body_size 1m;
    upstream gateway {{ server 127.0.0.1:{upstream}; keepalive 32; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://gateway;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_request_buffering on;
            proxy_buffering on;
            proxy_read_timeout 40s;
        }}
    }}
}}
"""


def start_nginx(directory: Path, port: int, upstream: int) -> subprocess.Popen[bytes]:
    """Run Debian's nginx as this user on ``port`` in front of ``upstream``.

    Raises SystemExit naming the package when nginx is not installed."""
    if not os.access(NGINX, os.X_OK):
        raise SystemExit(f"bench --waits: no {NGINX}; install it: apt-get install nginx-light")
    (directory / "nginx.conf").write_text(
        NGINX_CONF.format(dir=directory, port=port, upstream=upstream)
    )
    process = subprocess.Popen(
        [NGINX, "-p", str(directory), "-c", str(directory / "nginx.conf"), "-g", "daemon off;"],
        stderr=subprocess.DEVNULL,
    )
    _wait_until_up(process, f"http://127.0.0.1:{port}/sdk/openapi.json", "nginx")
    return process


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")


async def _producers(base: str, token: str, seconds: float, count: int = 4) -> list[float]:
    """``count`` producers enqueue one after another for ``seconds``; return latencies, ms."""
    import httpx

    latencies: list[float] = []
    headers = {"Authorization": f"Bearer {token}"}
    body = {"job_type": JOB_TYPE, "payload": {"n": 0}, "queue": QUEUE}
    end = time.monotonic() + seconds

    async def one() -> None:
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as http:
            while time.monotonic() < end:
                start = time.perf_counter()
                response = await http.post("/jobs", json=body)
                latencies.append((time.perf_counter() - start) * 1000)
                assert response.status_code == 201, response.text

    await asyncio.gather(*(one() for _ in range(count)))
    return latencies


async def _waiting_claims(
    base: str, token: str, count: int, stop: Any, waiting: Any
) -> dict[str, int]:
    """``count`` claimers long-poll until ``stop`` (a ``multiprocessing`` event) is set;
    ``waiting[0]``: how many wait now, ``waiting[1]``: how many pause after a capped
    answer, ``waiting[2]``: how many claimers have had an answer."""
    import httpx

    tally: dict[str, Any] = {"claims": 0, "capped": 0}
    errors: dict[str, int] = {}
    tally["error_texts"] = errors
    limits = httpx.Limits(max_connections=count + 10, max_keepalive_connections=count + 10)
    async with httpx.AsyncClient(
        base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=40, limits=limits
    ) as http:

        async def claimer(n: int) -> None:
            # 4 to 6 s, spread: a fleet's claims do not all end and start again at once.
            wait_ms = 4_000 + (n * 2_000) // max(1, count - 1)
            body = {"queues": [IDLE_QUEUE], "wait_ms": wait_ms, "worker": f"bench-{n}"}
            answered = False
            while not stop.is_set():
                waiting[0] += 1
                try:
                    response = await http.post("/worker/claim", json=body)
                finally:
                    waiting[0] -= 1
                tally["claims"] += 1
                if not answered:
                    answered = True
                    waiting[2] += 1
                if response.status_code != 200:
                    tally["errors"] = tally.get("errors", 0) + 1
                    errors.setdefault(response.text[:200], 0)
                    errors[response.text[:200]] += 1
                if "Retry-After" in response.headers:
                    tally["capped"] += 1
                    waiting[1] += 1
                    try:
                        await asyncio.sleep(float(response.headers["Retry-After"]))
                    finally:
                        waiting[1] -= 1

        tasks = [asyncio.create_task(claimer(n)) for n in range(count)]
        while not stop.is_set():
            await asyncio.sleep(0.05)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return tally


def _claimers_process(base: str, token: str, count: int, stop: Any, waiting: Any, out: Any) -> None:
    """The claimers, in a process of their own (:func:`producers_with_claims`)."""
    out.put(asyncio.run(_waiting_claims(base, token, count, stop, waiting)))


def _cpu_s(pids: list[int]) -> float:
    """User plus system CPU time (s) of ``pids`` so far, from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


def with_children(pid: int) -> list[int]:
    """``pid`` and its child processes (gunicorn's workers), from /proc."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [pid, *(int(child) for child in children)]


def producers_with_claims(
    base: str,
    token: str,
    claims: int,
    seconds: float,
    server_waits: int | None = None,
    server_pids: list[int] | None = None,
) -> dict[str, Any]:
    """Producer latencies while ``claims`` claims wait (0: none).

    The claimers run in a process of their own, so the producers' latencies are the
    server's and not those of a client busy with 200 claims. ``server_waits``: how
    many claims the server lets wait at once (None: all); the producers start once
    every other claimer has had its first (capped) answer. ``server_pids``: the
    server's processes, whose CPU time over the producers' ``seconds`` is reported
    (``cpu_ms_per_request``: ms per producer request)."""
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    waiting = context.Array("i", 3)
    out = context.Queue()
    claimers = context.Process(
        target=_claimers_process, args=(base, token, claims, stop, waiting, out), daemon=True
    )
    claimers.start()

    async def scenario() -> dict[str, Any]:
        answers_first = claims - (claims if server_waits is None else server_waits)
        if claims:
            # Producers start once every claim is on its way to the server or pauses
            # after a capped answer, and every claim the server cannot let wait has
            # had its answer: under WSGI the first burst of claims has been served
            # (its cost is not the steady state's).
            settle = time.monotonic() + 60
            while time.monotonic() < settle and (
                waiting[0] + waiting[1] < claims or waiting[2] < answers_first
            ):
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)  # the last requests reach the server and wait there
        cpu_before = _cpu_s(server_pids or [])
        latencies = await _producers(base, token, seconds)
        cpu = _cpu_s(server_pids or []) - cpu_before
        return {"latencies": latencies, "cpu_s": cpu}

    try:
        result = asyncio.run(scenario())
    finally:
        stop.set()
    result.update(out.get(timeout=120))
    claimers.join(60)
    lat = result["latencies"]
    result.update(
        p50=statistics.median(lat),
        p99=_percentile(lat, 0.99),
        max=max(lat),
        count=len(lat),
        cpu_ms_per_request=result["cpu_s"] * 1000 / max(1, len(lat)),
    )
    return result


def _slow_socket(port: int, kind: str, stop: threading.Event, token: str) -> None:
    """Trickle a request's headers (``headers``) or body (``body``) at 1 byte/s."""
    head = (
        f"POST /sdk/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
        "Content-Type: application/json\r\nContent-Length: 1000\r\n"
    )
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(2)
        try:
            if kind == "body":
                sock.sendall((head + "\r\n").encode())
                trickle = b"x" * 1000
            else:
                trickle = (head + "X-Slow: " + "y" * 1000).encode()
            for byte in trickle:
                if stop.wait(1.0):
                    return
                sock.sendall(bytes([byte]))
        except OSError:
            return  # the server (or nginx's timeout) closed it


def enqueue_latencies(base: str, token: str, count: int, timeout_s: float) -> list[float]:
    """``count`` enqueues one after another; ms each (``inf``: timed out)."""
    import httpx

    out: list[float] = []
    body = {"job_type": JOB_TYPE, "payload": {"n": 0}, "queue": QUEUE}
    with httpx.Client(
        base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=timeout_s
    ) as http:
        for _ in range(count):
            start = time.perf_counter()
            try:
                http.post("/jobs", json=body).raise_for_status()
            except httpx.TimeoutException:
                out.append(float("inf"))
                continue
            out.append((time.perf_counter() - start) * 1000)
    return out


def with_slow_sockets(port: int, token: str, run: Any) -> Any:
    """Run ``run()`` while 20 sockets (10 headers, 10 bodies) trickle at 1 byte/s."""
    stop = threading.Event()
    threads = [
        threading.Thread(target=_slow_socket, args=(port, kind, stop, token), daemon=True)
        for kind in ["headers", "body"] * 10
    ]
    for thread in threads:
        thread.start()
    time.sleep(2.0)  # every socket connected and has sent its first bytes
    try:
        return run()
    finally:
        stop.set()
        for thread in threads:
            thread.join(5)


def _process_status(pid: int) -> dict[str, int]:
    """``VmRSS`` (KiB) and ``Threads`` of process ``pid``, from /proc."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return {"rss_kib": int(fields["VmRSS"].split()[0]), "threads": int(fields["Threads"])}


def waiting_footprint(base: str, token: str, pid: int, count: int) -> dict[str, Any]:
    """The server's memory and threads with no claim waiting, then with ``count``."""
    import httpx

    async def scenario() -> dict[str, Any]:
        limits = httpx.Limits(max_connections=count + 10, max_keepalive_connections=count + 10)
        async with httpx.AsyncClient(
            base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=60,
            limits=limits,
        ) as http:  # fmt: skip
            idle = _process_status(pid)
            body = {"queues": [IDLE_QUEUE], "wait_ms": 20_000}
            claims = [
                asyncio.create_task(http.post("/worker/claim", json=body)) for _ in range(count)
            ]
            await asyncio.sleep(8.0)  # every claim sent, checked and waiting
            loaded = _process_status(pid)
            for claim in claims:
                claim.cancel()
            await asyncio.gather(*claims, return_exceptions=True)
        return {"count": count, "idle": idle, "waiting": loaded}

    return asyncio.run(scenario())


def run_legs(env: dict[str, str], token: str, seconds: float) -> dict[str, Any]:
    """Run every leg; return their figures (see the module docstring)."""
    figures: dict[str, Any] = {}
    asgi_port = free_port()
    # Django's own handler runs each request in a new thread: psycopg's pool, not
    # persistent connections (the gateway's entry keeps its pools' connections).
    uvicorn = start_uvicorn({**env, "DB_POOL": "1"}, asgi_port)
    try:
        base = f"http://127.0.0.1:{asgi_port}/sdk"
        enqueue_latencies(base, token, 20, 10)  # warm up
        pids = [uvicorn.pid]
        figures["asgi_alone"] = producers_with_claims(base, token, 0, seconds, server_pids=pids)
        figures["asgi_200"] = producers_with_claims(base, token, 200, seconds, server_pids=pids)
        figures["footprint"] = waiting_footprint(base, token, uvicorn.pid, 1000)
        nginx_port = free_port()
        with tempfile.TemporaryDirectory(prefix="jq-nginx-") as directory:
            nginx = start_nginx(Path(directory), nginx_port, asgi_port)
            try:
                proxied = f"http://127.0.0.1:{nginx_port}/sdk"
                enqueue_latencies(proxied, token, 20, 10)
                figures["nginx_alone"] = enqueue_latencies(proxied, token, 100, 10)
                figures["nginx_slow"] = with_slow_sockets(
                    nginx_port, token, lambda: enqueue_latencies(proxied, token, 100, 10)
                )
            finally:
                nginx.terminate()
                nginx.wait(timeout=30)
    finally:
        uvicorn.terminate()
        uvicorn.wait(timeout=30)
    django_port = free_port()
    uvicorn = start_uvicorn({**env, "DB_POOL": "1"}, django_port, app="site")
    try:
        base = f"http://127.0.0.1:{django_port}/sdk"
        enqueue_latencies(base, token, 20, 10)
        pids = [uvicorn.pid]
        figures["django_alone"] = producers_with_claims(base, token, 0, seconds, server_pids=pids)
        figures["django_200"] = producers_with_claims(base, token, 200, seconds, server_pids=pids)
        figures["django_footprint"] = waiting_footprint(base, token, uvicorn.pid, 1000)
    finally:
        uvicorn.terminate()
        uvicorn.wait(timeout=30)
    wsgi_port = free_port()
    gunicorn = start_gunicorn(env, wsgi_port)
    try:
        base = f"http://127.0.0.1:{wsgi_port}/sdk"
        enqueue_latencies(base, token, 20, 10)
        pids = with_children(gunicorn.pid)
        figures["wsgi_alone"] = producers_with_claims(base, token, 0, seconds, server_pids=pids)
        # 2 processes, MAX_WAITING_CLAIMS 2 each: 4 claims wait, the rest are capped.
        figures["wsgi_200"] = producers_with_claims(
            base, token, 200, seconds, server_waits=4, server_pids=pids
        )
        figures["gunicorn_slow"] = with_slow_sockets(
            wsgi_port, token, lambda: enqueue_latencies(base, token, 1, 5)
        )
    finally:
        gunicorn.terminate()
        gunicorn.wait(timeout=30)
    return figures


def report(figures: dict[str, Any]) -> None:
    """Print the figures of :func:`run_legs`."""

    def line(label: str, leg: dict[str, Any]) -> None:
        extra = f"  claims {leg['claims']}, capped {leg['capped']}" if leg.get("claims") else ""
        if leg.get("cpu_s"):
            extra = f"  server CPU {leg['cpu_ms_per_request']:.1f} ms/request" + extra
        if leg.get("error_texts"):
            extra += f"  claim errors {leg['error_texts']}"
        print(
            f"{label:<46} n={leg['count']:>5}  p50 {leg['p50']:6.1f} ms  "
            f"p99 {leg['p99']:7.1f} ms  max {leg['max']:7.1f} ms{extra}"
        )

    print("producer POST /sdk/jobs, 4 producers:")
    line("  ASGI (uvicorn, gateway entry), no claim waiting", figures["asgi_alone"])
    line("  ASGI (uvicorn, gateway entry), 200 waiting", figures["asgi_200"])
    line("  ASGI (Django's handler), no claim waiting", figures["django_alone"])
    line("  ASGI (Django's handler), 200 claims waiting", figures["django_200"])
    line("  WSGI (gunicorn gthread 2x4), no claim waiting", figures["wsgi_alone"])
    line("  WSGI, 200 claims, MAX_WAITING_CLAIMS 2", figures["wsgi_200"])
    print(
        f"ASGI p99 with 200 waiting / without: "
        f"{figures['asgi_200']['p99'] / figures['asgi_alone']['p99']:.2f}"
    )
    print(
        f"ASGI, Django's handler, p99 with 200 waiting / without: "
        f"{figures['django_200']['p99'] / figures['django_alone']['p99']:.2f}"
    )
    for label, key in (("gateway entry", "footprint"), ("Django's handler", "django_footprint")):
        foot = figures[key]
        idle, loaded = foot["idle"], foot["waiting"]
        per_claim = (loaded["rss_kib"] - idle["rss_kib"]) / foot["count"]
        print(
            f"uvicorn ({label}), {foot['count']} claims waiting: "
            f"RSS {idle['rss_kib'] / 1024:.0f} -> {loaded['rss_kib'] / 1024:.0f} MiB "
            f"({per_claim:.1f} KiB a claim), threads {idle['threads']} -> {loaded['threads']}"
        )
    print(
        f"WSGI p99 with 200 waiting (capped) / without: "
        f"{figures['wsgi_200']['p99'] / figures['wsgi_alone']['p99']:.2f}"
    )
    alone, slow = figures["nginx_alone"], figures["nginx_slow"]
    print("enqueue behind nginx -> uvicorn, one producer, 100 enqueues:")
    print(f"  no slow socket:              p50 {statistics.median(alone):6.1f} ms  "
          f"p99 {_percentile(alone, 0.99):6.1f} ms")  # fmt: skip
    print(f"  20 sockets at 1 byte/s:      p50 {statistics.median(slow):6.1f} ms  "
          f"p99 {_percentile(slow, 0.99):6.1f} ms  "
          f"(p99 delay {_percentile(slow, 0.99) - _percentile(alone, 0.99):+.1f} ms)")  # fmt: skip
    direct = figures["gunicorn_slow"][0]
    shown = "timed out after 5 s" if direct == float("inf") else f"{direct:.0f} ms"
    print(f"one enqueue straight to gunicorn with 20 slow sockets: {shown}")
