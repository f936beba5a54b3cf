"""`arch-zoo report --watch` rewrites the report while a sweep runs and says how far each variant is.

README (Reports): "`--watch` rewrites the report as runs progress (the page reloads itself) and
prints each variant's runs done / running / waiting, until every run has finished"."""
import subprocess
import sys
import time

from tests.reports.sweeps import config, write_run, write_sweep


def test_watch_follows_a_sweep_until_its_last_run_finishes(tmp_path):
    sweep = write_sweep(tmp_path / "pos", pending=[("rope", 3)])
    out = tmp_path / "report"
    proc = subprocess.Popen([sys.executable, "-m", "arch_zoo", "report", str(sweep), "--out", str(out), "--format",
                             "html", "--watch", "--interval", "0.5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        first = proc.stdout.readline()
        assert "position=rope: 3 done (1 failed), 0 running, 1 waiting" in first, (first, proc.stderr.read())
        page = (out / "report.html").read_text()
        assert '<meta http-equiv="refresh" content="1">' in page and "<h2>Progress</h2>" in page
        time.sleep(1.0)
        assert proc.poll() is None  # a run is still to come: it keeps watching
        write_run(sweep / "runs" / "rope-s3", status="completed", settings={"model.position": "rope"}, seed=3,
                  variant="position=rope", final={"val/loss": 2.03}, cfg=config("rope", 3))
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    assert "position=rope: 4 done (1 failed), 0 running, 0 waiting" in stdout, stdout
    page = (out / "report.html").read_text()
    assert 'http-equiv="refresh"' not in page and "<h2>Progress</h2>" not in page  # the final report
    assert not (out / "report.html.tmp").exists()
