#!/usr/bin/env python3
"""Routing driver for scripts/engine_route.sh: engine instances behind the conductor.

  engine_route.py slice TRACE OUT --requests N [--window W]
      writes the slice: multi-turn conversations (requests whose first two trace blocks are
      equal) among the first W requests, whole conversations in the order they start until N
      requests, replayed in trace order, each request cut to --max_prompt tokens.
  engine_route.py run --bin DIR --master H:P --trace SLICE --policy P [...]
      starts the conductor in live mode on the master and INSTANCES engine processes
      (mc_engine_replay --serve, each its own segment, scope and host label eI), then for each
      request in trace order: asks an instance for the request's chain hashes, asks the
      conductor to route them ({"op":"route"}), runs the request on the chosen instance, waits
      until the conductor has seen the blocks it stored, and prints the request's line (with
      "instance" and "queue_ms") and a summary line.

Load: requests arrive every --interval_ms (virtual time) and run one at a time; each instance
has a virtual backlog (busy until the end of the measured TTFT of what it was given), sent to
the conductor as the candidate's queue_s, so least_loaded spreads load and cache_aware weighs
the backlog against the prefix an instance holds.
"""
import argparse
import collections
import json
import os
import subprocess
import sys
import time


def make_slice(a):
    reqs = [json.loads(l) for l in open(a.trace) if l.strip()][: a.window]
    conv = collections.defaultdict(list)
    for i, r in enumerate(reqs):
        if len(r["hash_ids"]) >= 2:
            conv[tuple(r["hash_ids"][:2])].append(i)
    keep = []
    for v in sorted((v for v in conv.values() if len(v) >= 2), key=lambda v: v[0]):
        keep += v  # whole conversations, earliest first
    keep = sorted(keep[: a.requests])
    with open(a.out, "w") as f:
        for i in keep:  # cut as the engine cuts them (--max_prompt): the prompts it builds
            r = reqs[i]
            r["input_length"] = min(r["input_length"], a.max_prompt, 512 * len(r["hash_ids"]))
            r["hash_ids"] = r["hash_ids"][:(r["input_length"] + 511) // 512]
            f.write(json.dumps(r) + "\n")
    print(json.dumps({"slice": a.out, "requests": len(keep), "window": a.window}))


class Proc:
    """A child speaking JSON lines on stdin/stdout."""

    def __init__(self, argv, log):
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=open(log, "w"), text=True, bufsize=1)

    def ask(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        return self.read()

    def read(self):
        out = self.p.stdout.readline()
        if not out:
            raise RuntimeError("child %d ended" % self.p.pid)
        return json.loads(out)

    def close(self):
        try:
            self.p.stdin.close()
            self.p.wait(timeout=30)
        except Exception:
            self.p.kill()
            self.p.wait()


def prefill_flops(cm, n):
    """The conductor's prefill FLOPs for n tokens from scratch (src/conductor/cost.c)."""
    return 2.0 * cm["params_b"] * 1e9 * n + 4.0 * cm["layers"] * cm["q_heads"] * cm["head_dim"] * (
        n * (n + 1) / 2.0)


def engine_model(tiny):
    """The conductor's model of this engine (mc_engine_config_default / _tiny): the matmul
    parameters per token (layers' projections and the classifier)."""
    if tiny:
        return {"layers": 2, "kv_heads": 2, "q_heads": 4, "head_dim": 16,
                "params_b": (2 * (64 * 64 * 2 + 64 * 32 * 2 + 3 * 64 * 176) + 64 * 256) / 1e9}
    return {"layers": 2, "kv_heads": 2, "q_heads": 4, "head_dim": 32,
            "params_b": (2 * (128 * 128 * 2 + 128 * 64 * 2 + 3 * 128 * 384) + 128 * 32000) / 1e9}


def tflops(a):
    """The engine's measured throughput in the conductor's terms: FLOPs of the reference
    pass's prefills over their time, and the mean TTFT (for the arrival interval)."""
    cm = engine_model(a.tiny)
    fl = ms = 0.0
    n = 0
    for l in open(a.reference):
        r = json.loads(l)
        if "prompt_tokens" in r and "req" in r:
            fl += prefill_flops(cm, r["tokens_prefilled"])
            ms += r["prefill_ms"]
            n += 1
    print("%.9g %.3f" % (fl / max(ms, 1e-6) / 1e9, ms / max(n, 1)))


def run(a):
    # the conductor's cost model describes this engine at its measured TFLOP/s (--tflops)
    cm = engine_model(a.tiny)
    cond_argv = [os.path.join(a.bin, "mooncake_conductor"), "--master=" + a.master,
                 "--policy", a.policy, "--fetch", "never", "--seed", str(a.seed),
                 "--block_tokens", str(a.block), "--gpu_tflops", "%.9g" % a.tflops, "--mfu", "1",
                 "--poll_wait_ms", "50"]
    for k in ("layers", "kv_heads", "q_heads", "head_dim"):
        cond_argv += ["--" + k, str(cm[k])]
    cond_argv += ["--params_b", "%.9g" % cm["params_b"]]
    procs = []
    try:
        cond = Proc(cond_argv, os.path.join(a.out_dir, "conductor_%s.log" % a.policy))
        procs.append(cond)
        inst = []
        for i in range(a.instances):
            argv = [os.path.join(a.bin, "mc_engine_replay"), "--serve", "--trace", a.trace,
                    "--requests", str(a.requests), "--max_prompt", str(a.max_prompt),
                    "--threads", str(a.threads), "--block", str(a.block), "--decode",
                    str(a.decode), "--master", a.master, "--segment_size", str(a.segment_mb),
                    "--scope", "e%d" % i, "--host_label", "e%d" % i]
            if a.tiny:
                argv.append("--tiny")
            p = Proc(argv, os.path.join(a.out_dir, "engine_%s_e%d.log" % (a.policy, i)))
            procs.append(p)
            ready = p.read()
            if not ready.get("ready"):
                raise RuntimeError("instance %d: %s" % (i, ready))
            inst.append(p)
        n_req = ready["requests"]
        busy = [0.0] * a.instances
        sums = collections.Counter()
        for r in range(n_req):
            h = inst[0].ask("hashes %d" % r)
            arrive = r * a.interval_ms
            queue = [max(0.0, b - arrive) for b in busy]
            route = cond.ask(json.dumps({
                "op": "route", "input_tokens": h["input_tokens"], "hashes": h["hashes"],
                "candidates": [{"host": "e%d" % i, "queue_s": queue[i] / 1e3}
                               for i in range(a.instances)]}))
            if "host" not in route:
                raise RuntimeError("route: %s" % route)
            i = int(route["host"][1:])
            res = inst[i].ask("run %d" % r)
            if "error" in res:
                raise RuntimeError("instance %d: %s" % (i, res))
            # the instance is busy for the measured TTFT; with --modelled_queue for the
            # conductor's model of it (prefill FLOPs at --tflops), so that the queues, and so
            # the routes, do not depend on how loaded the machine is (the check mode)
            took = (prefill_flops(cm, res["tokens_prefilled"]) / (a.tflops * 1e9)
                    if a.modelled_queue else res["ttft_ms"])
            busy[i] = max(busy[i], arrive) + took
            # before the next route, the conductor's index must show this request's blocks on
            # the instance that ran it (reused or just stored; a put the store refused never
            # shows, hence the deadline)
            deadline = time.monotonic() + 5.0
            q = json.dumps({"op": "query", "hashes": h["hashes"], "hosts": ["e%d" % i]})
            while True:
                got = cond.ask(q).get("results", [{}])[0].get("local", 0)
                if got >= len(h["hashes"]) or time.monotonic() > deadline:
                    break
                time.sleep(0.002)
            res.update({"pass": a.policy, "instance": i, "queue_ms": round(queue[i], 1),
                        "route_reuse_blocks": route.get("reuse_blocks", 0),
                        "index_behind": got < len(h["hashes"])})
            print(json.dumps(res), flush=True)
            for k in ("prompt_tokens", "tokens_reused", "tokens_prefilled"):
                sums[k] += res[k]
            sums["ttft"] += res["ttft_ms"]
            sums["ttft_q"] += res["ttft_ms"] + queue[i]
            sums["n"] += 1
            sums["on_e%d" % i] += 1
        n = max(sums["n"], 1)
        print(json.dumps({
            "summary": True, "pass": a.policy, "instances": a.instances, "requests": sums["n"],
            "prompt_tokens": sums["prompt_tokens"], "tokens_reused": sums["tokens_reused"],
            "tokens_prefilled": sums["tokens_prefilled"],
            "compute_skipped": round(sums["tokens_reused"] / max(sums["prompt_tokens"], 1), 4),
            "mean_ttft_ms": round(sums["ttft"] / n, 1),
            "mean_ttft_with_queue_ms": round(sums["ttft_q"] / n, 1),
            "per_instance": [sums["on_e%d" % i] for i in range(a.instances)]}), flush=True)
    finally:
        for p in procs:
            p.close()


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("slice")
    s.add_argument("trace")
    s.add_argument("out")
    s.add_argument("--requests", type=int, default=40)
    s.add_argument("--window", type=int, default=3000)
    s.add_argument("--max_prompt", type=int, default=4096)
    t = sub.add_parser("tflops")
    t.add_argument("reference")
    t.add_argument("--tiny", action="store_true")
    r = sub.add_parser("run")
    r.add_argument("--bin", required=True)
    r.add_argument("--master", required=True)
    r.add_argument("--trace", required=True)
    r.add_argument("--policy", required=True)
    r.add_argument("--instances", type=int, default=2)
    r.add_argument("--requests", type=int, default=1000)
    r.add_argument("--max_prompt", type=int, default=4096)
    r.add_argument("--threads", type=int, default=1)
    r.add_argument("--block", type=int, default=512)
    r.add_argument("--decode", type=int, default=1)
    r.add_argument("--segment_mb", type=int, default=512)
    r.add_argument("--interval_ms", type=float, default=0.0)
    r.add_argument("--tflops", type=float, required=True)
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--tiny", action="store_true")
    r.add_argument("--modelled_queue", action="store_true")
    r.add_argument("--out_dir", default=".")
    a = ap.parse_args()
    if a.cmd == "slice":
        make_slice(a)
    elif a.cmd == "tflops":
        tflops(a)
    else:
        run(a)


if __name__ == "__main__":
    sys.exit(main())
