#!/usr/bin/env python3
"""Per-target counts over a set of models: does every built-in target compile each model, is the
output clean under `check`, does it pass onnx.checker full_check wherever the input does, and
does it equal the original on ONNX Runtime CPU (`onnx-safeify verify`, which judges by the
exactness class the output records)? A second table counts the outputs per exactness class
(exact, rounding, approximate; from the output's `onnx_safeify.exactness`) and how many of each
verify equal at that class.

usage: target_counts.py --bin target/release/onnx-safeify [--targets rx580,coreml] \
         [--every-node-test N] [--max-mb 100] [--jobs 2] [--allow-approximate] \
         [--json out.json] PATH...

PATH: .onnx files or folders (searched recursively; a backend node test folder contributes its
model.onnx, one in every N with --every-node-test). Models over --max-mb are skipped (listed).
Prints a table per target and every failure; exit 1 when anything failed.
"""
import argparse, concurrent.futures as cf, json, os, subprocess, sys, tempfile
from pathlib import Path

import onnx


def models(paths, every, max_mb):
    found, skipped = [], []
    for p in map(Path, paths):
        files = [p] if p.is_file() else sorted(p.rglob("*.onnx"))
        node_tests = [f for f in files if f.name == "model.onnx"]
        others = [f for f in files if f.name != "model.onnx"]
        files = others + node_tests[::every]
        for f in files:
            if f.stat().st_size > max_mb * 1e6:
                skipped.append(str(f))
            else:
                found.append(f)
    return found, skipped


def full_check(path):
    try:
        onnx.checker.check_model(str(path), full_check=True)
        return None
    except Exception as e:  # noqa: BLE001 - any checker failure is a verdict
        return str(e).splitlines()[0][:200] if str(e) else type(e).__name__


def run(cmd, timeout=600):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired:
        return 124, "timeout"


REPO = Path(__file__).resolve().parent.parent


def verify_inputs(model):
    """Real inputs where random ones prove little or cannot run: a backend node test's own
    data, the `.inputs.npz` beside a model (the transformer corpus: sequence lengths and masks
    that agree), the shipped 640x640 page for PP-OCR detectors (random noise gives a map of
    zeros), the real sizes of PP-OCR recognisers and classifiers."""
    model = Path(model)
    data = model.parent / "test_data_set_0"
    if model.name == "model.onnx" and data.is_dir():
        return ["--inputs", str(data)]
    npz = model.with_name(model.name[:-5] + ".inputs.npz")
    if npz.is_file():
        return ["--inputs", str(npz)]
    name = model.name
    if "_det_" in name and (REPO / "samples/page.npz").is_file():
        return ["--inputs", str(REPO / "samples/page.npz")]
    if "_rec_" in name:
        return ["--dim", "x[2]=48", "--dim", "x[3]=320"]
    if "_cls_" in name:
        return ["--dim", "x[2]=48", "--dim", "x[3]=192"]
    return []


def exactness_class(path):
    """The class the compile recorded (`exact`, `rounding`, `approximate`), `exact` when the
    output records none (nothing rewritten)."""
    m = onnx.load(str(path), load_external_data=False)
    for p in m.metadata_props:
        if p.key == "onnx_safeify.exactness":
            return p.value.split(":")[0].split()[0]
    return "exact"


def one(binary, model, target, input_ok, scratch, extra):
    out = Path(scratch) / f"{abs(hash((str(model), target)))}.onnx"
    res = {"model": str(model), "target": target}
    rc, text = run([binary, str(model), "--target", target, "-o", str(out)] + extra)
    res["compile"] = rc
    if rc != 0:
        res["why"] = text.strip().splitlines()[-1:] if text.strip() else []
        return res
    res["class"] = exactness_class(out)
    rc, text = run([binary, "check", str(out), "--target", target])
    res["check"] = rc
    if rc != 0:
        res["check_text"] = text.strip().splitlines()[:3]
    if input_ok:
        err = full_check(out)
        res["full_check"] = err is None
        if err:
            res["full_check_error"] = err
    cmd = [binary, "verify", str(model), str(out)] + verify_inputs(model)
    rc, text = run(cmd)
    res["verify"] = rc
    if rc != 0:
        res["verify_text"] = [l for l in text.strip().splitlines() if l.strip()][-3:]
        # The original itself does not load or run on ONNX Runtime CPU: nothing to compare.
        if rc == 2 and f"error: {model}: ONNX Runtime" in text:
            res["verify"] = "reference-fails"
    for f in Path(scratch).glob(out.stem + "*"):
        f.unlink()
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--targets")
    ap.add_argument("--every-node-test", type=int, default=1)
    ap.add_argument("--max-mb", type=float, default=100)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--allow-approximate", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("paths", nargs="+")
    a = ap.parse_args()
    if a.targets:
        targets = a.targets.split(",")
    else:
        rc, text = run([a.bin, "targets"])
        targets = [l.split()[0] for l in text.splitlines() if l.strip()] if rc == 0 else []
    if not targets:
        sys.exit("no targets")
    found, skipped = models(a.paths, a.every_node_test, a.max_mb)
    # The original's own checker verdict, once per model.
    input_ok = {str(m): full_check(m) is None for m in found}
    results = []
    with tempfile.TemporaryDirectory() as scratch, cf.ThreadPoolExecutor(a.jobs) as ex:
        extra = ["--allow-approximate"] if a.allow_approximate else []
        futs = [ex.submit(one, a.bin, m, t, input_ok[str(m)], scratch, extra)
                for t in targets for m in found]
        for f in cf.as_completed(futs):
            results.append(f.result())
    results.sort(key=lambda r: (r["target"], r["model"]))
    print(f"{len(found)} models ({sum(input_ok.values())} pass full_check as given), "
          f"{len(skipped)} skipped over {a.max_mb:g} MB: {skipped}")
    print("| target | models | exit 0 | check clean | full_check (of inputs that pass) | equal on ORT CPU (of originals ORT runs) |")
    print("|---|---|---|---|---|---|")
    bad = []
    for t in targets:
        rs = [r for r in results if r["target"] == t]
        ok = [r for r in rs if r["compile"] == 0]
        clean = [r for r in ok if r.get("check") == 0]
        fc = [r for r in ok if "full_check" in r]
        fc_ok = [r for r in fc if r["full_check"]]
        runs = [r for r in ok if r.get("verify") != "reference-fails"]
        eq = [r for r in runs if r.get("verify") == 0]
        print(f"| {t} | {len(rs)} | {len(ok)} | {len(clean)} | {len(fc_ok)} / {len(fc)} | {len(eq)} / {len(runs)} |")
        bad += [r for r in rs if r["compile"] != 0 or r.get("check") != 0
                or r.get("full_check") is False or r.get("verify") not in (0, "reference-fails")]
    classes = ["exact", "rounding", "approximate"]
    print()
    print("| target | " + " | ".join(f"{c} (equal / outputs)" for c in classes) + " |")
    print("|---|" + "---|" * len(classes))
    for t in targets:
        rs = [r for r in results if r["target"] == t and r["compile"] == 0
              and r.get("verify") != "reference-fails"]
        cells = []
        for c in classes:
            of = [r for r in rs if r.get("class") == c]
            cells.append(f"{sum(1 for r in of if r.get('verify') == 0)} / {len(of)}")
        print(f"| {t} | " + " | ".join(cells) + " |")
    for r in bad:
        print("FAIL", json.dumps(r))
    if a.json:
        Path(a.json).write_text(json.dumps({"targets": targets, "skipped": skipped, "results": results}, indent=1))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
