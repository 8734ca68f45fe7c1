#!/usr/bin/env python3
"""Does ONNX Runtime fuse back what a target's rules decomposed? The runtime as judge.

usage:
    refusion_check.py [--table TSV] [--provider EP] [--disable LIST] [--attribute] [--json]
                      OUTPUT[=ORIGINAL]...

For each MODEL (a compiled output, say `onnx-safeify M --target rx580 -o O`), ONNX Runtime's CPU
provider optimises it at level "all" and saves the result (`optimized_model_filepath`), twice:

  with:    the transformers LIST names disabled (`optimization.disable_specified_optimizers`,
           ';'-separated; by default the value the compiler wrote into the model's metadata,
           `onnx_safeify.runtime.optimization.disable_specified_optimizers`), plus the
           emulation set;
  without: only the emulation set disabled.

The emulation set makes the CPU run only the transformers that would also run under EP: every
row of the table (runtimes/capability/transformers.tsv) whose providers neither include EP
(default DmlExecutionProvider) nor are `*` is disabled. What is left is what EP's session would
run on EP's nodes. Caveat: within one transformer the CPU may still match more than EP would (the
QDQ selectors list the CPU provider for more ops than DirectML, and a build with USE_DML has a
DirectML-only selector the CPU package lacks), so "without" can show more than DirectML would
fuse; "with" is exact where the list disables the whole transformer.

A fused op is one that a decomposition removes: any op outside the ONNX domain (com.microsoft,
com.microsoft.nchwc, ...) and the ONNX-domain LayerNormalization, SimplifiedLayerNormalization
and Gelu. An op **reappears** when the optimised model holds more of it than the model did. With
`=ORIGINAL` (the compiler's input), a reappearing op the original held more of than the output is
also listed as **undone**: the runtime rebuilt what the compile decomposed. The others are the
runtime fusing the model's own plain patterns into ops the target's rules would have removed.

--attribute runs once more per listed transformer, with it alone of the list enabled, and prints
what each builds (`model  only NAME  op:+n ...`).

Prints one line per model and mode (`model  mode  op:+n ...`), and with --json a JSON document.
Exit 0 when no fused op reappears "with" the list, 1 when one does, 2 on bad input.
Needs onnx and onnxruntime (the project's venv).
"""
import argparse
import collections
import json
import os
import sys
import tempfile

FUSED_ONNX = {"LayerNormalization", "SimplifiedLayerNormalization", "Gelu"}


def load_table(path):
    rows = []
    with open(path, encoding="utf-8") as f:
        header = None
        for line in f:
            if line.startswith("#"):
                continue
            cols = line.rstrip("\n").split("\t")
            if header is None:
                header = cols
                continue
            rows.append(dict(zip(header, cols)))
    return rows


def emulation_set(rows, ep):
    """Transformer and rule names that would not run on EP's nodes."""
    runs = set()
    names = set()
    for r in rows:
        if r["kind"] == "selector":
            continue
        names.add(r["name"])
        provs = r["providers"].split(",")
        if r["providers"] == "*" or ep in provs:
            runs.add(r["name"])
    return sorted(names - runs)


def op_counts(model):
    c = collections.Counter()

    def walk(g):
        for n in g.node:
            c[(n.domain or "", n.op_type)] += 1
            for a in n.attribute:
                if a.g is not None and a.g.node:
                    walk(a.g)
                for sg in a.graphs:
                    walk(sg)

    walk(model.graph)
    return c


def is_fused(key):
    domain, op = key
    if domain not in ("", "ai.onnx"):
        return True
    return op in FUSED_ONNX


def optimise(path, disabled, tmp):
    import onnx
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    out = os.path.join(tmp, "opt.onnx")
    so.optimized_model_filepath = out
    if disabled:
        so.add_session_config_entry("optimization.disable_specified_optimizers", ";".join(disabled))
    ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return op_counts(onnx.load(out, load_external_data=False))


def key_name(k):
    return f"{k[0] or 'ai.onnx'}:{k[1]}"


def check(path, written, emulate, original=None):
    """Per mode, the fused ops that reappear, and which of them undo a decomposition (the
    original held more of the op than the output)."""
    import onnx

    before = op_counts(onnx.load(path, load_external_data=False))
    orig = op_counts(onnx.load(original, load_external_data=False)) if original else None
    res = {}
    with tempfile.TemporaryDirectory(prefix="onnx-safeify-refusion-") as tmp:
        for mode, disabled in (("with", sorted(set(written) | set(emulate))), ("without", emulate)):
            after = optimise(path, disabled, tmp)
            res[mode] = {
                key_name(k): after[k] - before.get(k, 0)
                for k in sorted(after)
                if is_fused(k) and after[k] > before.get(k, 0)
            }
            if orig is not None:
                res[mode + "_undone"] = {
                    key_name(k): after[k] - before.get(k, 0)
                    for k in sorted(after)
                    if is_fused(k) and after[k] > before.get(k, 0) and orig.get(k, 0) > before.get(k, 0)
                }
    return res


def attribute(path, written, emulate):
    """For each transformer of the list, the fused ops it builds when it alone of the list runs."""
    import onnx

    before = op_counts(onnx.load(path, load_external_data=False))
    out = {}
    with tempfile.TemporaryDirectory(prefix="onnx-safeify-refusion-") as tmp:
        for t in written:
            after = optimise(path, sorted((set(written) - {t}) | set(emulate)), tmp)
            inc = {key_name(k): after[k] - before.get(k, 0)
                   for k in sorted(after) if is_fused(k) and after[k] > before.get(k, 0)}
            if inc:
                out[t] = inc
    return out


def written_list(path):
    """The list the compiler wrote into the model's metadata (onnx_safeify.runtime.*)."""
    import onnx

    m = onnx.load(path, load_external_data=False)
    for p in m.metadata_props:
        if p.key == "onnx_safeify.runtime.optimization.disable_specified_optimizers":
            return [x for x in p.value.split(";") if x]
    return []


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table", default=os.path.join(here, "..", "runtimes", "capability", "transformers.tsv"))
    ap.add_argument("--provider", default="DmlExecutionProvider")
    ap.add_argument("--disable", help="the ';'-separated list (default: what each model's metadata says the compiler wrote)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--attribute", action="store_true",
                    help="also run once per listed transformer, it alone enabled, and print what it builds")
    ap.add_argument("models", nargs="+")
    a = ap.parse_args()
    try:
        rows = load_table(a.table)
    except OSError as e:
        print(f"cannot read the table: {e}", file=sys.stderr)
        return 2
    emulate = emulation_set(rows, a.provider)
    known = {r["name"] for r in rows}
    report = {}
    bad = False
    for arg in a.models:
        m, _, original = arg.partition("=")
        for f in (m, original):
            if f and not os.path.isfile(f):
                print(f"no such model: {f}", file=sys.stderr)
                return 2
        if a.disable is not None:
            written = [x for x in a.disable.split(";") if x]
        else:
            written = written_list(m)
        unknown = [w for w in written if w not in known]
        if unknown:
            print(f"{m}: not transformer names in the table: " + ", ".join(unknown), file=sys.stderr)
            return 2
        r = check(m, written, emulate, original or None)
        r["written"] = written
        report[m] = r
        for mode in ("with", "without"):
            items = " ".join(f"{k}:+{v}" for k, v in r[mode].items()) or "-"
            undone = r.get(mode + "_undone")
            extra = "" if undone is None else "\tundone: " + (" ".join(f"{k}:+{v}" for k, v in undone.items()) or "-")
            print(f"{os.path.basename(m)}\t{mode}\t{items}{extra}")
        bad = bad or bool(r["with"])
        if a.attribute:
            r["by_transformer"] = attribute(m, written, emulate)
            for t, inc in r["by_transformer"].items():
                items = " ".join(f"{k}:+{v}" for k, v in inc.items())
                print(f"{os.path.basename(m)}\tonly {t}\t{items}")
    if a.json:
        print(json.dumps({"provider": a.provider, "emulation": emulate, "models": report}, indent=1, sort_keys=True))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
