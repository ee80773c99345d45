#!/usr/bin/env python3
"""Start-to-serving and idle RSS of sluice binaries, side by side on this machine.

    bench/startup.py BINARY [BINARY ...] [--runs N] [--dir DIR] [--cpu C]

For each binary, alternating so that the machine's drift falls on all of them alike:
- fresh: an empty log dir, exec -> first ApiVersions answer;
- restart: the same dir started again after a clean stop;
- idle RSS: VmRSS two seconds after a fresh start.
Every broker runs pinned to one CPU, as bench.py pins it, and is polled every 0.5 ms (bench.py
polls every 5 ms, which is coarser than the figures compared here). Prints the median of each.
"""
import argparse
import os
import shutil
import socket
import statistics
import struct
import subprocess
import time

PORT = 19192


def serving():
    try:
        with socket.create_connection(("127.0.0.1", PORT), timeout=0.5) as s:
            cid = b"startup"
            hdr = struct.pack(">hhih", 18, 0, 7, len(cid)) + cid
            s.sendall(struct.pack(">i", len(hdr)) + hdr)
            n = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
            body = s.recv(n, socket.MSG_WAITALL)
            return struct.unpack(">ih", body[:6]) == (7, 0)
    except (OSError, struct.error):
        return False


def start(binary, data, cpu, log):
    t0 = time.monotonic()
    proc = subprocess.Popen(
        ["taskset", "-c", str(cpu), binary, "serve", "--override", f"log.dirs={data}",
         "--override", f"listeners=PLAINTEXT://127.0.0.1:{PORT}", "--override", "metrics.listener=none"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    while not serving():
        if proc.poll() is not None:
            raise SystemExit(f"{binary} exited during startup (see {log.name})")
        if time.monotonic() - t0 > 60:
            proc.kill()
            raise SystemExit(f"{binary} did not serve within 60 s")
        time.sleep(0.0005)
    return proc, time.monotonic() - t0


def stop(proc):
    proc.terminate()
    proc.wait(60)


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS")) / 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--dir", default="/tmp/sluice-startup")
    ap.add_argument("--cpu", type=int, default=0)
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    log = open(os.path.join(args.dir, "brokers.log"), "ab")
    figures = {b: {"fresh": [], "restart": [], "rss": []} for b in args.binaries}
    for _ in range(args.runs):
        for b in args.binaries:
            data = os.path.join(args.dir, "data")
            shutil.rmtree(data, ignore_errors=True)
            os.makedirs(data)
            proc, t = start(b, data, args.cpu, log)
            figures[b]["fresh"].append(t)
            time.sleep(2)
            figures[b]["rss"].append(rss_mib(proc.pid))
            stop(proc)
            proc, t = start(b, data, args.cpu, log)
            figures[b]["restart"].append(t)
            stop(proc)
    shutil.rmtree(os.path.join(args.dir, "data"), ignore_errors=True)
    print(f"medians of {args.runs} runs, pinned to CPU {args.cpu}")
    print(f"{'binary':50} {'fresh ms':>9} {'restart ms':>11} {'idle RSS MiB':>13}")
    for b, f in figures.items():
        print(f"{b:50} {statistics.median(f['fresh']) * 1000:9.1f} {statistics.median(f['restart']) * 1000:11.1f}"
              f" {statistics.median(f['rss']):13.1f}")


if __name__ == "__main__":
    main()
