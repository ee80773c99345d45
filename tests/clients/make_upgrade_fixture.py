"""Makes tests/fixtures/upgrade/NAME.tar.gz: the data dir a single node of an earlier release
(the binary at SLUICE_BIN) leaves after `upgrade_fixture.record`, with manifest.json, what that
release said about it. test_upgrade.py starts today's binary on it and compares.

    SLUICE_BIN=/path/to/earlier/sluice .cache/venv/bin/python tests/clients/make_upgrade_fixture.py NAME "how it was built" [kill9]

With `kill9` the broker is stopped with SIGKILL instead of SIGTERM (no clean-shutdown files).
"""
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from conftest import REPO, Broker, sluice_bin  # noqa: E402
from upgrade_fixture import record  # noqa: E402


def main(name, made_by, kill9=False):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        b = Broker(tmp / "broker", target="sluice", data_dir=tmp / "data")
        b.start()
        try:
            observed = record(b.bootstrap)
        finally:
            b.kill9(restart=False) if kill9 else b.stop()
        version = subprocess.run([str(sluice_bin()), "--version"], capture_output=True, text=True).stdout.strip()
        manifest = {"made_by": made_by, "version": version, "observed": observed}
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        out = REPO / "tests" / "fixtures" / "upgrade" / (name + ".tar.gz")
        with tarfile.open(out, "w:gz") as t:
            t.add(tmp / "data", arcname="data")
            t.add(tmp / "manifest.json", arcname="manifest.json")
        print("wrote %s (%d bytes)" % (out, out.stat().st_size))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], kill9=sys.argv[3:] == ["kill9"])
