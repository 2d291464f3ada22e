"""Run ``deploy/nginx/bcetune.conf`` standalone: nginx in the foreground, in a directory of its own (pid,
logs, temp files), listening on one port and proxying to a service on another. What the tests and
``benchmarks/service_attack.py --proxy`` run; a production host includes the same file from its own
nginx.conf instead (the file's header says how).

    python deploy/nginx/run_proxy.py --listen 8080 --upstream 8000 [--dir DIR]
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SITE = Path(__file__).resolve().parent / "bcetune.conf"
NGINX_CANDIDATES = ("/usr/sbin/nginx", "/usr/local/sbin/nginx")


def nginx_binary() -> str | None:
    """nginx (Debian's nginx-light or nginx), or None where it is not installed."""
    found = shutil.which("nginx")
    return found or next((p for p in NGINX_CANDIDATES if Path(p).is_file()), None)


def write_config(directory: Path, listen: int, upstream: int, site: Path = SITE) -> Path:
    """The shipped site with its listen port and upstream replaced, under a top-level nginx.conf whose pid,
    logs and temp files live in ``directory``."""
    text = site.read_text()
    for old, new in (("listen 80;", f"listen 127.0.0.1:{listen};"), ("127.0.0.1:8000", f"127.0.0.1:{upstream}")):
        if old not in text:
            raise ValueError(f"{site}: no {old!r} to replace")
        text = text.replace(old, new)
    (directory / "bcetune.conf").write_text(text)
    for sub in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (directory / sub).mkdir(exist_ok=True)
        (directory / sub).chmod(0o777)  # nginx's workers run as nobody when the master is root
    conf = directory / "nginx.conf"
    conf.write_text(f"""worker_processes 1;
pid {directory}/nginx.pid;
error_log {directory}/error.log warn;
worker_rlimit_nofile 16384;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    client_body_temp_path {directory}/body;
    proxy_temp_path {directory}/proxy;
    fastcgi_temp_path {directory}/fastcgi;
    uwsgi_temp_path {directory}/uwsgi;
    scgi_temp_path {directory}/scgi;
    include {directory}/bcetune.conf;
}}
""")
    return conf


def start(listen: int, upstream: int, directory: Path) -> subprocess.Popen[bytes]:
    """nginx in the foreground (stop it with terminate()), once it accepts connections on ``listen``."""
    binary = nginx_binary()
    if binary is None:
        raise FileNotFoundError("nginx is not installed (Debian: apt-get install nginx-light)")
    directory.chmod(0o755)
    conf = write_config(directory, listen, upstream)
    check = subprocess.run([binary, "-t", "-q", "-p", str(directory), "-c", str(conf)], capture_output=True, text=True)
    if check.returncode != 0:
        raise RuntimeError(f"nginx -t refused the configuration: {check.stderr.strip()}")
    proc = subprocess.Popen([binary, "-p", str(directory), "-c", str(conf), "-g", "daemon off;"])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"nginx exited: {(directory / 'error.log').read_text(errors='replace')[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", listen), timeout=0.5).close()
            return proc
        except OSError:
            time.sleep(0.05)
    proc.terminate()
    raise RuntimeError("nginx did not start listening within 10 s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--listen", type=int, default=8080)
    ap.add_argument("--upstream", type=int, default=8000, help="the service's port on 127.0.0.1")
    ap.add_argument("--dir", type=Path, help="nginx's directory (default: a new temporary one)")
    a = ap.parse_args()
    directory = a.dir or Path(tempfile.mkdtemp(prefix="bcetune-nginx."))
    directory.mkdir(parents=True, exist_ok=True)
    try:
        proc = start(a.listen, a.upstream, directory)
    except (FileNotFoundError, RuntimeError, ValueError) as e:
        print(f"run_proxy: error: {e}", file=sys.stderr)
        return 2
    print(f"nginx on 127.0.0.1:{a.listen} -> 127.0.0.1:{a.upstream} (files in {directory}); Ctrl-C stops it")
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        return proc.wait()


if __name__ == "__main__":
    sys.exit(main())
