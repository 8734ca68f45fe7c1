"""Counts, over corpus models, what DirectML would run on the CPU unannounced in each `rx580` and
`directml` output: per output, the nodes `inspect OUT --target directml` predicts, those pinned,
those DirectML has no kernel for and that no pin moved ("no kernel"), those on the deficient list,
those no provider takes, and the GPU pieces and CPU<->GPU crossings `check OUT --target T
--format json` counts.

Usage: python tools/directml_lacking.py BINARY OUTDIR [SUBDIR ...] [--extra DIR]
  BINARY   an onnx-safeify binary (an older one gives the "before" figures)
  SUBDIR   folders of the corpus (default: real transformers extra contrib; the sample is added
           with the default set)
  --extra  another folder of models (tools/make_blocked_dq.py build DIR makes the blocked cases)
The corpus is ONNX_SAFEIFY_CORPUS or ~/.cache/onnx-safeify/corpus. Prints one line per output and
the totals per target.
"""
import glob
import json
import os
import pathlib
import subprocess
import sys


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    binary, out = argv[0], pathlib.Path(argv[1])
    rest = argv[2:]
    extra = None
    if "--extra" in rest:
        i = rest.index("--extra")
        extra = rest[i + 1]
        rest = rest[:i] + rest[i + 2:]
    out.mkdir(parents=True, exist_ok=True)
    corpus = os.environ.get("ONNX_SAFEIFY_CORPUS", os.path.expanduser("~/.cache/onnx-safeify/corpus"))
    repo = pathlib.Path(__file__).resolve().parent.parent
    models = []
    if not rest:
        models.append(str(repo / "samples/ocr_tiny.onnx"))
        rest = ["real", "transformers", "extra", "contrib"]
    for sub in rest:
        models += sorted(glob.glob(f"{corpus}/{sub}/**/*.onnx", recursive=True))
    if extra:
        models += sorted(glob.glob(f"{extra}/*.onnx"))
    totals = {}
    for m in models:
        stem = pathlib.Path(m).stem
        for t in ["rx580", "directml"]:
            o = out / f"{stem}.{t}.onnx"
            if o.exists():
                o.unlink()
            subprocess.run([binary, m, "--target", t, "-o", str(o)], capture_output=True)
            if not o.exists():
                print(f"{stem} {t}: not written")
                continue
            r = subprocess.run([binary, "inspect", str(o), "--target", "directml", "--format", "json"],
                               capture_output=True, check=True)
            nodes = json.loads(r.stdout)["nodes"]
            count = lambda why: sum(1 for n in nodes if n["why"] == why)
            ck = subprocess.run([binary, "check", str(o), "--target", t, "--format", "json"], capture_output=True)
            cost = json.loads(ck.stdout)["cost"]
            row = {"outputs": 1, "nodes": len(nodes), "pinned": count("pinned"), "no_kernel": count("no kernel"),
                   "deficient": count("deficient kernel"), "no_provider": count("no provider"), "pieces": cost["gpu_pieces"],
                   "crossings": cost["crossings"]}
            for k, v in row.items():
                totals.setdefault(t, {}).setdefault(k, 0)
                totals[t][k] += v
            lacking = sorted({f'{n["op"]} ({n.get("detail", "")})' for n in nodes if n["why"] == "no kernel"})
            print(f"{stem} {t}: " + " ".join(f"{k}={v}" for k, v in row.items())
                  + (f"; lacking: {'; '.join(lacking)}" if lacking else ""))
    for t, row in totals.items():
        print(f"total {t}: " + " ".join(f"{k}={v}" for k, v in row.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
