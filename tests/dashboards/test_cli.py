"""`arch-zoo dashboard` in a real process: it exports, serves on 127.0.0.1, prints the URL, and
Ctrl-C (or SIGTERM) stops the server and frees the port.

README (Dashboards): "`arch-zoo dashboard SWEEP_DIR [--tool tensorboard|mlflow] [--port N]` exports
what is missing, starts the real server bound to 127.0.0.1, prints its URL; Ctrl-C stops it"."""
import json
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.conftest import as_from_a_shell

from arch_zoo.dashboards.serve import free_port, port_free

from .conftest import FINISHED


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])  # Ctrl-C; kill, as a closed terminal
def test_dashboard_serves_the_sweep_and_stops_cleanly_on_ctrl_c_or_sigterm(sweep, stop_signal):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "arch_zoo", "dashboard", str(sweep), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=as_from_a_shell)
    lines, deadline = [], time.time() + 180
    try:
        while time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.strip())
            if " at http://" in line:
                break
        url = f"http://127.0.0.1:{port}/"
        assert lines and lines[-1] == f"tensorboard at {url}  (Ctrl-C stops it)", (lines, proc.stderr.read())
        assert lines[0].startswith(f"tensorboard: exported {len(FINISHED)} run(s)")
        with urllib.request.urlopen(url + "data/runs", timeout=30) as reply:
            assert sorted(json.loads(reply.read())) == sorted(FINISHED)
        proc.send_signal(stop_signal)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert out.strip().endswith("tensorboard stopped") and "Traceback" not in err
    deadline = time.time() + 30  # the server (in its own process group) is gone too; its socket may
    while not port_free(port) and time.time() < deadline:  # linger a moment on a loaded machine
        time.sleep(0.5)
    assert port_free(port)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout.splitlines()
    assert [line for line in ps if f"--port {port}" in line] == []


def test_a_port_is_free_once_its_server_is_gone_though_its_last_connection_lingers():
    """The server closing first leaves its side of the connection in TIME_WAIT for up to a minute; a plain
    bind then fails, but no server listens and the servers the dashboard starts (SO_REUSEADDR) can bind."""
    import socket

    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as TensorBoard's and MLflow's servers do
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    assert not port_free(port)  # listening
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = server.accept()
    conn.close()  # the server's side closes first: TIME_WAIT is on the server's port
    server.close()
    client.recv(1)
    client.close()
    plain = socket.socket()
    with pytest.raises(OSError):  # what the old check did: it called the port busy
        plain.bind(("127.0.0.1", port))
    plain.close()
    assert port_free(port)

