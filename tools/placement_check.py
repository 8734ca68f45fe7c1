#!/usr/bin/env python3
"""Holds onnx-safeify's placement prediction against onnxruntime-web's own record.

For each model: `onnx-safeify inspect MODEL --target T --format json` predicts, per node, whether
the target's provider or the CPU runs it; onnxruntime-web (WebGPU provider, headless Chromium,
tools/webgpu) creates a session for the model at verbose log level and logs its placement
(`VerifyEachNodeIsAssignedToAnEp`: the nodes each provider received). A node agrees when the
predicted side is the logged one. Nodes the runtime renamed or removed (a function it inlined)
are counted apart, and so are CPU nodes in the log that the prediction does not name.

The prediction is made at the session's optimisation level (`--opt`, passed to `inspect`): at
"basic" and above it applies ONNX Runtime's graph transformations first, and a node it predicts
folded or removed is checked against the log too: where the log lists its providers' nodes, a
removed node it names is a disagreement, one it does not name is counted apart; a log that puts every node
on one provider names none, so a removal there cannot be checked and is counted apart. Unnamed
nodes (an empty name, which the log cannot tell apart) are matched by op type: per op, as many
agree as the prediction and the log have on each side.

Usage: tools/placement_check.py --bin target/release/onnx-safeify --target webgpu
           [--opt disabled|basic|extended|all] [--json OUT] [--compile] MODEL...
       tools/placement_check.py --bin ... --target webgpu --opt LEVEL --replay SESSION_DIR...
  --compile   hold the prediction for the target's output of each model too (compiled first)
  --replay    predict again against the logs of earlier runs instead of running the browser: each
              SESSION_DIR is one a run left (`placement-*` in the temporary folder, with its
              request.json and result.json); its model files must still exist. The runtime's log
              does not depend on the prediction, so two builds can be compared on the same logs.
Prints a table per model, the misses with their predicted reason, and the total agreement.
Exit 0 when every model was read (whatever the agreement), 2 on a harness failure.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PLACED = re.compile(r"Node\(s\) placed on \[(\w+)\]\. Number of nodes: (\d+)")
ALL = re.compile(r"All nodes placed on \[(\w+)\]\. Number of nodes: (\d+)")
NODE = re.compile(r"VerifyEachNodeIsAssignedToAnEp\]\s{2,}(\S+) \((.*)\)\s*$")


def predict(binary, model, target, opt="all"):
    out = subprocess.run(
        [binary, "inspect", str(model), "--target", target, "--format", "json", "--opt", opt],
        capture_output=True, text=True,
    )
    if out.returncode != 0:
        raise RuntimeError(f"inspect failed on {model}: {out.stderr.strip()}")
    return json.loads(out.stdout)


def logged(log_lines):
    counts, where, complete, _ = logged_full(log_lines)
    return counts, where, complete


def logged_full(log_lines):
    """{provider: count}, {node name: provider}, complete from one session's log lines.

    `complete` is False when the log lost lines (the browser's console capture drops some
    under load): a provider section lists fewer or more nodes than its count says, or a
    single "Node(s) placed on" section stands alone (the other provider's header was lost)."""
    counts, where, current = {}, {}, None
    listed, whole = {}, False
    unnamed = {}  # (op, provider) -> count of nodes logged with an empty name
    for line in log_lines:
        m = ALL.search(line)
        if m:
            counts[m.group(1)] = int(m.group(2))
            current, whole = None, True
            continue
        m = PLACED.search(line)
        if m:
            current = m.group(1)
            counts[current] = int(m.group(2))
            listed.setdefault(current, 0)
            continue
        m = NODE.search(line)
        if m and current:
            if m.group(2) == "":
                key = (m.group(1), current)
                unnamed[key] = unnamed.get(key, 0) + 1
            else:
                where[m.group(2)] = current
            listed[current] = listed.get(current, 0) + 1
    complete = whole or (len(listed) >= 2 and all(listed[p] == counts.get(p) for p in listed))
    return counts, where, complete, unnamed


def run_jobs(models, opt, timeout_ms=300000):
    d = Path(tempfile.mkdtemp(prefix="placement-"))
    req = {
        "jobs": [{"model": str(Path(m).resolve()), "runs": [], "graph_optimization_level": opt}
                 for m in models],
        "provider": "webgpu",
        "timeout_ms": timeout_ms,
    }
    (d / "request.json").write_text(json.dumps(req))
    subprocess.run(["node", str(HERE / "webgpu" / "run.mjs"), str(d)],
                   capture_output=True, text=True, timeout=timeout_ms / 1000 + 120)
    res = json.loads((d / "result.json").read_text())
    # Split the console log per job ("=== job J").
    per_job, cur = {}, None
    for line in res.get("log", []):
        m = re.match(r"=== job (\d+)", line)
        if m:
            cur = int(m.group(1))
            per_job[cur] = []
        elif cur is not None:
            per_job[cur].append(line)
    jobs = res.get("jobs", [])
    return [(jobs[i] if i < len(jobs) else {"ok": False, "error": res.get("error")},
             per_job.get(i, [])) for i in range(len(models))]


def compare(pred, job, lines):
    counts, where, complete, unnamed_log = logged_full(lines)
    provider = pred["provider"]
    if not counts:
        return {"loaded": False, "error": (job or {}).get("error", "no placement logged")}
    if not complete:
        return {"loaded": False, "error": "the console log lost placement lines; not compared",
                "incomplete": True}
    names = {n["name"] for n in pred["nodes"]}
    agree = disagree = absent = 0
    removed_ok = removed_unchecked = 0
    misses = []
    unnamed_pred = {}  # (op, side) -> count
    for n in pred["nodes"]:
        if n["side"] == "none" and n["why"] in ("folded", "removed"):
            if not where:
                removed_unchecked += 1
            elif n["name"] and n["name"] in where:
                disagree += 1
                misses.append({"node": n["name"], "op": n["op"], "predicted": "removed",
                               "why": n["why"], "detail": n.get("detail"),
                               "logged": where[n["name"]]})
            else:
                # Absent as predicted: counted apart, not as agreement (a node renamed by a
                # fusion the prediction does not model is absent too).
                removed_ok += 1
            continue
        if n["side"] == "none":
            continue
        if n["why"] == "inlined":
            absent += 1
            continue
        if where and not n["name"]:
            key = (n["op"], n["side"])
            unnamed_pred[key] = unnamed_pred.get(key, 0) + 1
            continue
        if where:
            got = where.get(n["name"])
            if got is None:
                # Listed providers name their nodes; a node in none of them was removed or
                # renamed by the runtime (a fusion, an inlined function).
                if len(counts) == 1:
                    got = next(iter(counts))
                else:
                    absent += 1
                    continue
        else:
            got = next(iter(counts))
        side = "cpu" if got == "CPUExecutionProvider" else "gpu"
        if side == n["side"]:
            agree += 1
        else:
            disagree += 1
            misses.append({"node": n["name"], "op": n["op"], "predicted": n["side"],
                           "why": n["why"], "detail": n.get("detail"), "logged": got})
    # Unnamed nodes, per op: as many agree as both sides hold; the rest of the prediction's
    # differ (or were removed when the log holds fewer of that op in all).
    for op in sorted({k[0] for k in unnamed_pred}):
        for side in ("gpu", "cpu"):
            p = unnamed_pred.get((op, side), 0)
            if not p:
                continue
            provs = [pv for (o, pv) in unnamed_log if o == op
                     and (pv == "CPUExecutionProvider") == (side == "cpu")]
            lg = sum(unnamed_log[(op, pv)] for pv in provs)
            other = sum(c for (o, pv), c in unnamed_log.items() if o == op) - lg
            ok = min(p, lg)
            agree += ok
            bad = min(p - ok, other)
            disagree += bad
            absent += p - ok - bad
            for _ in range(bad):
                misses.append({"node": "(unnamed)", "op": op, "predicted": side, "why": "",
                               "detail": None, "logged": "the other side"})
    extra_cpu = [nm for nm, p in where.items() if p == "CPUExecutionProvider" and nm not in names]
    return {"loaded": True, "agree": agree, "disagree": disagree, "absent": absent,
            "removed_confirmed": removed_ok, "removed_unchecked": removed_unchecked,
            "runtime_cpu_unnamed": len(extra_cpu), "counts": counts, "misses": misses,
            "provider": provider}


def replayed(dirs, opt):
    """[(model path, job, log lines)] from kept session folders, in the order given, jobs of a
    batched session split by their '=== job J' lines; a session at another level is refused."""
    out = []
    for d in dirs:
        d = Path(d)
        req = json.loads((d / "request.json").read_text())
        res = json.loads((d / "result.json").read_text())
        per_job, cur = {}, None
        for line in res.get("log", []):
            m = re.match(r"=== job (\d+)", line)
            if m:
                cur = int(m.group(1))
                per_job[cur] = []
            elif cur is not None:
                per_job[cur].append(line)
        jobs = res.get("jobs", [])
        for i, j in enumerate(req["jobs"]):
            level = j.get("graph_optimization_level", "disabled")
            if level != opt:
                raise SystemExit(f"{d}: session at level {level}, not {opt}")
            job = jobs[i] if i < len(jobs) else {"ok": False, "error": res.get("error")}
            out.append((Path(j["model"]), job, per_job.get(i, [])))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(HERE.parent / "target" / "release" / "onnx-safeify"))
    ap.add_argument("--target", default="webgpu")
    ap.add_argument("--opt", default="disabled")
    ap.add_argument("--json")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--batch", type=int, default=1,
                    help="models per browser (1: a job's log lines cannot be mixed with another's)")
    ap.add_argument("--replay", action="store_true",
                    help="the arguments are session folders of earlier runs: predict against their logs")
    ap.add_argument("models", nargs="+")
    a = ap.parse_args()
    if a.replay:
        sessions = replayed(a.models, a.opt)
        models = list(dict.fromkeys(m for m, _, _ in sessions))
        logs = {m: (job, lines) for m, job, lines in sessions}
    else:
        models = [Path(m) for m in a.models]
        logs = None
    work = Path(tempfile.mkdtemp(prefix="placement-out-"))
    if a.compile and not a.replay:
        outs = []
        for m in models:
            o = work / (m.stem + f".{a.target}.onnx")
            r = subprocess.run([a.bin, str(m), "--target", a.target, "-o", str(o)],
                               capture_output=True, text=True)
            if r.returncode in (0, 1) and o.exists():
                outs.append(o)
        models = models + outs
    preds = {}
    for m in models:
        try:
            preds[m] = predict(a.bin, m, a.target, a.opt)
        except Exception as e:  # noqa: BLE001 - reported per model
            print(f"{m.name}: {e}", file=sys.stderr)
    todo = [m for m in models if m in preds]
    results = {}
    if logs is not None:
        for m in todo:
            results[m] = compare(preds[m], *logs[m])
    for i in range(0, len(todo) if logs is None else 0, a.batch):
        batch = todo[i:i + a.batch]
        for m, (job, lines) in zip(batch, run_jobs(batch, a.opt)):
            results[m] = compare(preds[m], job, lines)
    tot_a = tot_d = tot_abs = 0
    print(f"{'model':60} {'agree':>6} {'differ':>6} {'absent':>6}  logged")
    for m in todo:
        r = results[m]
        if not r.get("loaded"):
            print(f"{m.name[:60]:60} {'-':>6} {'-':>6} {'-':>6}  did not load: {str(r.get('error'))[:80]}")
            continue
        tot_a += r["agree"]
        tot_d += r["disagree"]
        tot_abs += r["absent"]
        counts = ", ".join(f"{k} {v}" for k, v in r["counts"].items())
        print(f"{m.name[:60]:60} {r['agree']:>6} {r['disagree']:>6} {r['absent']:>6}  {counts}")
        for x in r["misses"]:
            print(f"    miss: {x['node']} ({x['op']}): predicted {x['predicted']} ({x['why']}"
                  f"{': ' + x['detail'] if x.get('detail') else ''}), logged {x['logged']}")
    n = tot_a + tot_d
    share = 100.0 * tot_a / n if n else 0.0
    lost = sum(1 for m in todo if results[m].get("incomplete"))
    rem_ok = sum(results[m].get("removed_confirmed", 0) for m in todo if results[m].get("loaded"))
    rem_un = sum(results[m].get("removed_unchecked", 0) for m in todo if results[m].get("loaded"))
    print(f"agreement: {tot_a} of {n} placed nodes ({share:.2f} %); {tot_abs} renamed or inlined by the runtime;"
          f" predicted removed: {rem_ok} absent from the log as predicted, {rem_un} in one-provider logs (unchecked);"
          f" {lost} session log(s) incomplete, not compared")
    if a.json:
        Path(a.json).write_text(json.dumps(
            {"target": a.target, "opt": a.opt, "agree": tot_a, "placed": n,
             "models": {str(m): results[m] for m in todo}}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
