//! The time model's per-node estimates as JSON lines, for `tools/time_model_check.py` (which
//! holds them against ONNX Runtime's own profile) and for anyone who wants to see them.
//!
//! ```sh
//! cargo run --example estimate -- MODEL [--device this-cpu | --device TARGET] [--dim NAME=V]...
//! ```
//!
//! One line per node of the main graph (`Constant` nodes left out): `name`, `op`, `kind`,
//! `flops`, `bytes`, `estimate_ms` and `bounded`; every node on the device named (`this-cpu`,
//! the default: this machine's CPU, one thread, [`DeviceModel::this_cpu_one_thread`]; a target:
//! its `device:` model, every node on its GPU). Sizes: the model's static shapes and `--dim`.

use std::collections::BTreeMap;

use onnx_safeify::timing::{node_times, DeviceModel};

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
}

fn run() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let mut model = None;
    let mut device = "this-cpu".to_string();
    let mut dims = BTreeMap::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--device" => device = args.next().ok_or("--device needs a value")?,
            "--dim" => {
                let spec = args.next().ok_or("--dim needs NAME=V")?;
                let (k, v) = onnx_safeify::compile::parse_dim(&spec).map_err(|e| e.to_string())?;
                dims.insert(k, v);
            }
            _ if model.is_none() => model = Some(a),
            _ => return Err(format!("unexpected argument `{a}`")),
        }
    }
    let model =
        model.ok_or("usage: estimate MODEL [--device this-cpu|TARGET] [--dim NAME=V]...")?;
    let dev = if device == "this-cpu" {
        DeviceModel::this_cpu_one_thread()
    } else {
        let t = onnx_safeify::rules::load_target(&device).map_err(|e| e.to_string())?;
        DeviceModel::from_spec(&t.device).map_err(|e| format!("target {device}: {e}"))?
    };
    let doc = onnx_safeify::load(std::path::Path::new(&model)).map_err(|e| e.to_string())?;
    let sizes = onnx_safeify::analysis::Sizes::for_model(&doc.model, &dims, &BTreeMap::new());
    let facts = sizes.infer(&doc.model);
    let g = &doc.model.graph;
    let mut out = String::new();
    for (n, _, t) in node_times(g, &facts, &dev, &dev, &|_| true) {
        let node = g.node(n);
        let line = serde_json::json!({
            "name": node.name(),
            "op": node.op_type,
            "kind": t.kind.name(),
            "flops": t.flops,
            "bytes": t.bytes,
            "estimate_ms": t.seconds * 1e3,
            "bounded": t.bounded,
        });
        out.push_str(&line.to_string());
        out.push('\n');
    }
    print!("{out}");
    Ok(())
}
