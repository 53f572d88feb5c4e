#!/usr/bin/env python3
"""Markdown for the report's measured engine subsections after §4.3: routing on the store's
events (scripts/engine_route.sh, RECORD=...) and a storage server killed mid-run
(scripts/engine_failover.sh, recorded with scripts/engine_failover_record.sh).

usage: engine_more.py ROUTE.jsonl FAILOVER.jsonl
Renders recorded files only (never re-runs the engine). A missing file gives a line saying so."""
import json
import sys


def load(path):
    try:
        return [json.loads(line) for line in open(path)]
    except OSError:
        return None


def same_as_reference(rows_by_pass):
    """Whether every pass's tokens and final-logits hashes equal the nostore pass's, request by
    request (and every pass completed every request)."""
    key = lambda r: (r["req"], r["first_token"], r["last_token"], r["logits_hash"])
    ref = sorted(key(r) for r in rows_by_pass["nostore"])
    return all(sorted(key(r) for r in rows) == ref for rows in rows_by_pass.values())


route_path, failover_path = sys.argv[1:3]
out = []

rows = load(route_path)
out.append("#### Routing on the store's events (measured)\n")
if not rows:
    out.append(f"Not recorded ({route_path} missing): see Reproduce.\n")
else:
    hdr = rows[0]
    reqs = {p: [r for r in rows[1:] if r.get("pass") == p and "req" in r] for p in hdr["passes"]}
    summ = {p: [r for r in rows[1:] if r.get("pass") == p and r.get("summary")][-1]
            for p in hdr["passes"]}
    out.append(
        f"Recorded {hdr['date']} with `{hdr['command']}` (raw lines: "
        f"`docs/report/data/engine_route.jsonl`). {hdr['instances']} `mc_engine_replay --serve` "
        f"instances, each keeping its blocks in its own segment under its own keys; "
        f"`mooncake_conductor` follows the master's object events and routes each of "
        f"{hdr['requests']} trace requests (whole conversations, prompts cut to "
        f"{hdr['max_prompt']} tokens, one every {hdr['interval_ms']:.0f} ms of virtual time) "
        f"by the given policy; the driver sends it to the chosen instance.\n")
    out.append("| policy | tokens reused | compute skipped | mean TTFT ms | mean TTFT + backlog ms "
               "| requests per instance |")
    out.append("|---|---|---|---|---|---|")
    for p in hdr["passes"]:
        s = summ[p]
        per = " / ".join(str(x) for x in s.get("per_instance", [])) or "—"
        with_q = s.get("mean_ttft_with_queue_ms")
        out.append(f"| {p} | {s['tokens_reused']:,} | {100 * s['compute_skipped']:.1f} % | "
                   f"{s['mean_ttft_ms']:.0f} | {with_q:.0f} | {per} |" if with_q is not None else
                   f"| {p} | {s['tokens_reused']:,} | {100 * s['compute_skipped']:.1f} % | "
                   f"{s['mean_ttft_ms']:.0f} | — | {per} |")
    out.append("")
    out.append("Tokens and final logits equal to the no-cache pass in every pass, request by "
               "request: **" + ("yes" if same_as_reference(reqs) else "NO") + "**.\n")

rows = load(failover_path)
out.append("#### A storage server killed mid-run (measured)\n")
if not rows:
    out.append(f"Not recorded ({failover_path} missing): see Reproduce.\n")
else:
    hdr = rows[0]
    names = ("nostore", "fill", "warm", "killed")
    reqs = {p: [r for r in rows[1:] if r.get("pass") == p and "req" in r] for p in names}
    pause = hdr["pause_after"]
    out.append(
        f"Recorded {hdr['date']} with `{hdr['command']}` (raw lines: "
        f"`docs/report/data/engine_failover.jsonl`). A master and two storage servers; the same "
        f"{hdr['requests']} requests run four times: without the store, filling it, again "
        f"(warm), and again with the second storage server killed (SIGKILL) after request "
        f"{pause}.\n")
    out.append("| pass | requests completed | tokens reused | tokens prefilled | blocks rejected "
               f"| tokens reused after request {pause} | mean TTFT ms |")
    out.append("|---|---|---|---|---|---|---|")
    for p in names:
        r = reqs[p]
        out.append(f"| {p} | {len(r)} | {sum(x['tokens_reused'] for x in r):,} | "
                   f"{sum(x['tokens_prefilled'] for x in r):,} | "
                   f"{sum(x['blocks_rejected'] for x in r)} | "
                   f"{sum(x['tokens_reused'] for x in r[pause:]):,} | "
                   f"{sum(x['ttft_ms'] for x in r) / max(len(r), 1):.0f} |")
    out.append("")
    out.append("Every request of every pass completed, tokens and final logits equal to the "
               "no-store pass: **" + ("yes" if same_as_reference(reqs) else "NO") + "**; the "
               "requests after the kill recomputed what was on the dead server.\n")

print("\n".join(out))
