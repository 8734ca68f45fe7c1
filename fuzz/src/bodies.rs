//! Random models with If / Loop bodies for fuzzing rules inside bodies and fallbacks (see
//! `examples/fuzz_bodies.rs`, which runs it, and `tests/fuzz_regressions.rs`, which replays the
//! kept cases). Included with `#[path]`; it uses only the crate's public API.
#![allow(dead_code)]

use std::path::Path;

use onnx_safeify::compile;
use onnx_safeify::engine::{self, Options};
use onnx_safeify::proto::{
    attribute_proto::AttributeType, tensor_shape_proto, type_proto, AttributeProto, GraphProto,
    ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto,
    ValueInfoProto,
};
use prost::Message;

/// xorshift64*: a small deterministic generator (the case is a function of its seed).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    }
}

fn float_type(dims: &[i64]) -> TypeProto {
    tensor_type(1, dims)
}

fn tensor_type(elem: i32, dims: &[i64]) -> TypeProto {
    TypeProto {
        value: Some(type_proto::Value::TensorType(type_proto::Tensor {
            elem_type: Some(elem),
            shape: Some(TensorShapeProto {
                dim: dims
                    .iter()
                    .map(|&d| tensor_shape_proto::Dimension {
                        value: Some(tensor_shape_proto::dimension::Value::DimValue(d)),
                        denotation: None,
                    })
                    .collect(),
            }),
        })),
        denotation: None,
    }
}

fn vi(name: &str, t: TypeProto) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(t),
        ..Default::default()
    }
}

fn ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Ints as i32),
        ints: v.to_vec(),
        ..Default::default()
    }
}

fn int(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(v),
        ..Default::default()
    }
}

fn string(name: &str, v: &str) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::String as i32),
        s: Some(v.as_bytes().to_vec().into()),
        ..Default::default()
    }
}

fn graph_attr(name: &str, g: GraphProto) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Graph as i32),
        g: Some(Box::new(g)),
        ..Default::default()
    }
}

fn node(
    op: &str,
    name: &str,
    ins: &[&str],
    outs: &[&str],
    attrs: Vec<AttributeProto>,
) -> NodeProto {
    NodeProto {
        input: ins.iter().map(|s| s.to_string()).collect(),
        output: outs.iter().map(|s| s.to_string()).collect(),
        name: Some(name.into()),
        op_type: Some(op.into()),
        attribute: attrs,
        ..Default::default()
    }
}

/// The model being built: initializers live in the main graph (bodies read them by name).
struct Builder {
    rng: Rng,
    inits: Vec<TensorProto>,
    n: usize,
    /// Channels and spatial side of every tensor in the model ([1, c, s, s]).
    c: i64,
    s: i64,
}

impl Builder {
    fn fresh(&mut self, base: &str) -> String {
        self.n += 1;
        format!("{base}_{}", self.n)
    }

    fn weight(&mut self, dims: &[i64]) -> String {
        let name = self.fresh("w");
        let count: i64 = dims.iter().product();
        let scale = 1.0 / (dims[1..].iter().product::<i64>() as f32).sqrt();
        let data: Vec<u8> = (0..count)
            .flat_map(|_| (self.rng.unit() * 2.0 * scale).to_le_bytes())
            .collect();
        self.inits.push(TensorProto {
            dims: dims.to_vec(),
            data_type: Some(1),
            name: Some(name.clone()),
            raw_data: Some(data.into()),
            ..Default::default()
        });
        name
    }

    /// A few operations on `x`, appended to `nodes`; `outer` are values of the same shape this
    /// scope may read (its own or enclosing scopes'). Returns the result.
    fn block(
        &mut self,
        nodes: &mut Vec<NodeProto>,
        x: &str,
        outer: &[String],
        depth: usize,
    ) -> String {
        let c = self.c;
        let kinds = if depth < 2 { 7 } else { 5 };
        match self.rng.below(kinds) {
            0 => {
                // Depthwise Conv (split by rx580 when c > 64).
                let w = self.weight(&[c, 1, 3, 3]);
                let b = self.weight(&[c]);
                let y = self.fresh("dw");
                nodes.push(node(
                    "Conv",
                    &y,
                    &[x, &w, &b],
                    &[&y],
                    vec![
                        int("group", c),
                        ints("pads", &[1, 1, 1, 1]),
                        ints("kernel_shape", &[3, 3]),
                    ],
                ));
                y
            }
            1 => {
                // FusedConv (com.microsoft): 1x1 with an activation.
                let w = self.weight(&[c, c, 1, 1]);
                let y = self.fresh("fc");
                let mut n = node(
                    "FusedConv",
                    &y,
                    &[x, &w],
                    &[&y],
                    vec![string(
                        "activation",
                        if self.rng.below(2) == 0 {
                            "Relu"
                        } else {
                            "Tanh"
                        },
                    )],
                );
                n.domain = Some("com.microsoft".into());
                nodes.push(n);
                y
            }
            2 => {
                // Add of an outer-scope (or own) value.
                let other = outer[self.rng.below(outer.len())].clone();
                let y = self.fresh("add");
                nodes.push(node("Add", &y, &[x, &other], &[&y], vec![]));
                y
            }
            3 => {
                let y = self.fresh("relu");
                nodes.push(node("Relu", &y, &[x], &[&y], vec![]));
                y
            }
            4 => {
                // TopK over channels and back (rx580 pins TopK to the CPU).
                let k = self.fresh("k");
                self.inits.push(TensorProto {
                    dims: vec![1],
                    data_type: Some(7),
                    name: Some(k.clone()),
                    raw_data: Some(c.to_le_bytes().to_vec().into()),
                    ..Default::default()
                });
                let (v, i) = (self.fresh("topv"), self.fresh("topi"));
                nodes.push(node("TopK", &v, &[x, &k], &[&v, &i], vec![int("axis", 1)]));
                v
            }
            5 if self.rng.below(3) == 0 => {
                // com.microsoft Inverse has no decomposition: the GPU targets' contrib rule
                // refuses it and the fallback pins it to the CPU. Well conditioned whatever x:
                // I + 0.05 tanh(x) has a spectral norm within 0.05 s of I's, s <= 8, so rounding
                // differences upstream (a split Conv runs other kernels) are not amplified.
                let s = self.s;
                let eye = self.fresh("eye");
                let data: Vec<u8> = (0..s * s)
                    .flat_map(|k| (if k % (s + 1) == 0 { 1.0f32 } else { 0.0 }).to_le_bytes())
                    .collect();
                self.inits.push(TensorProto {
                    dims: vec![s, s],
                    data_type: Some(1),
                    name: Some(eye.clone()),
                    raw_data: Some(data.into()),
                    ..Default::default()
                });
                let tenth = self.fresh("small");
                self.inits.push(TensorProto {
                    dims: vec![],
                    data_type: Some(1),
                    name: Some(tenth.clone()),
                    raw_data: Some(0.05f32.to_le_bytes().to_vec().into()),
                    ..Default::default()
                });
                let (t, m) = (self.fresh("tanh"), self.fresh("scaled"));
                let (a, y) = (self.fresh("cond"), self.fresh("inv"));
                nodes.push(node("Tanh", &t, &[x], &[&t], vec![]));
                nodes.push(node("Mul", &m, &[&t, &tenth], &[&m], vec![]));
                nodes.push(node("Add", &a, &[&m, &eye], &[&a], vec![]));
                let mut n = node("Inverse", &y, &[&a], &[&y], vec![]);
                n.domain = Some("com.microsoft".into());
                nodes.push(n);
                y
            }
            5 => self.if_node(nodes, x, outer, depth),
            _ => self.loop_node(nodes, x, outer, depth),
        }
    }

    fn chain(
        &mut self,
        nodes: &mut Vec<NodeProto>,
        x: &str,
        outer: &[String],
        depth: usize,
        len: usize,
    ) -> String {
        let mut scope: Vec<String> = outer.to_vec();
        let mut v = x.to_string();
        for _ in 0..len {
            v = self.block(nodes, &v, &scope, depth);
            scope.push(v.clone());
        }
        v
    }

    fn body_output(&self, name: &str) -> ValueInfoProto {
        vi(name, float_type(&[1, self.c, self.s, self.s]))
    }

    fn if_node(
        &mut self,
        nodes: &mut Vec<NodeProto>,
        x: &str,
        outer: &[String],
        depth: usize,
    ) -> String {
        let branch = |b: &mut Builder, tag: &str| {
            let mut inner = Vec::new();
            let len = 1 + b.rng.below(3);
            let mut scope = outer.to_vec();
            scope.push(x.to_string());
            let y = b.chain(&mut inner, x, &scope, depth + 1, len);
            // A branch output must be produced inside the branch.
            let out = b.fresh(tag);
            inner.push(node("Identity", &out, &[&y], &[&out], vec![]));
            GraphProto {
                node: inner,
                name: Some(b.fresh(tag)),
                output: vec![b.body_output(&out)],
                ..Default::default()
            }
        };
        let then_g = branch(self, "then");
        let else_g = branch(self, "else");
        let y = self.fresh("if");
        nodes.push(node(
            "If",
            &y,
            &["cond"],
            &[&y],
            vec![
                graph_attr("then_branch", then_g),
                graph_attr("else_branch", else_g),
            ],
        ));
        y
    }

    fn loop_node(
        &mut self,
        nodes: &mut Vec<NodeProto>,
        x: &str,
        outer: &[String],
        depth: usize,
    ) -> String {
        let (it, c_in, s_in) = (self.fresh("it"), self.fresh("cin"), self.fresh("sin"));
        let mut inner = Vec::new();
        let mut scope = outer.to_vec();
        scope.push(x.to_string());
        scope.push(s_in.clone());
        let len = 1 + self.rng.below(3);
        let y = self.chain(&mut inner, &s_in, &scope, depth + 1, len);
        let (c_out, s_out) = (self.fresh("cout"), self.fresh("sout"));
        inner.push(node("Identity", &c_out, &[&c_in], &[&c_out], vec![]));
        inner.push(node("Identity", &s_out, &[&y], &[&s_out], vec![]));
        let body = GraphProto {
            node: inner,
            name: Some(self.fresh("body")),
            input: vec![
                vi(&it, tensor_type(7, &[])),
                vi(&c_in, tensor_type(9, &[])),
                self.body_output(&s_in),
            ],
            output: vec![vi(&c_out, tensor_type(9, &[])), self.body_output(&s_out)],
            ..Default::default()
        };
        let y = self.fresh("loop");
        nodes.push(node(
            "Loop",
            &y,
            &["trips", "", x],
            &[&y],
            vec![graph_attr("body", body)],
        ));
        y
    }
}

/// One generated model.
pub struct Case {
    pub seed: u64,
    pub model: ModelProto,
}

impl Case {
    pub fn generate(seed: u64) -> Case {
        let mut rng = Rng::new(seed);
        let c = [8, 24, 72, 96, 130][rng.below(5)];
        let s = 3 + rng.below(6) as i64;
        let mut b = Builder {
            rng,
            inits: Vec::new(),
            n: 0,
            c,
            s,
        };
        b.inits.push(TensorProto {
            dims: vec![],
            data_type: Some(7),
            name: Some("trips".into()),
            raw_data: Some(2i64.to_le_bytes().to_vec().into()),
            ..Default::default()
        });
        let mut nodes = Vec::new();
        let len = 2 + b.rng.below(4);
        let y = b.chain(&mut nodes, "x", &["x".to_string()], 0, len);
        nodes.push(node("Identity", "y", &[&y], &["y"], vec![]));
        let graph = GraphProto {
            node: nodes,
            name: Some(format!("bodies_{seed}")),
            initializer: std::mem::take(&mut b.inits),
            input: vec![
                vi("x", float_type(&[1, c, s, s])),
                vi("cond", tensor_type(9, &[])),
            ],
            output: vec![vi("y", float_type(&[1, c, s, s]))],
            ..Default::default()
        };
        let model = ModelProto {
            ir_version: Some(8),
            producer_name: Some("onnx-safeify fuzz_bodies".into()),
            opset_import: vec![
                OperatorSetIdProto {
                    domain: Some(String::new()),
                    version: Some(13),
                },
                OperatorSetIdProto {
                    domain: Some("com.microsoft".into()),
                    version: Some(1),
                },
            ],
            graph: Some(graph),
            ..Default::default()
        };
        Case { seed, model }
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Case, String> {
        let model = ModelProto::decode(bytes).map_err(|e| e.to_string())?;
        Ok(Case { seed: 0, model })
    }

    pub fn bytes(&self) -> Vec<u8> {
        self.model.encode_to_vec()
    }
}

/// What one case under one target came to.
pub enum Outcome {
    Passed { verified: bool },
    Failed(String),
}

fn compile_bytes(bytes: &[u8], target: &str) -> Result<(Vec<u8>, usize), String> {
    let name = Path::new("case.onnx");
    let mut doc =
        onnx_safeify::load_bytes(bytes.to_vec(), name).map_err(|e| format!("load: {e}"))?;
    let t = onnx_safeify::rules::load_target(target).map_err(|e| format!("target: {e}"))?;
    let opts = Options::default();
    let done = compile::compile_document(&mut doc, &t, &opts, false, name)
        .map_err(|e| format!("compile error: {e}"))?;
    if !done.writable {
        return Err(format!("not writable: {}", done.blocked_message(name, &t)));
    }
    engine::check_invariants(&doc.model.graph).map_err(|e| format!("invariants: {e}"))?;
    let out = compile::model_bytes(&doc).map_err(|e| format!("encode: {e}"))?;
    // Check clean: the compiled model, read back, has nothing left for the target.
    let mut again =
        onnx_safeify::load_bytes(out.clone(), name).map_err(|e| format!("reload: {e}"))?;
    let findings = engine::check(&mut again.model, &t, &opts);
    if !findings.is_empty() {
        return Err(format!(
            "check not clean: {}",
            findings
                .iter()
                .map(|f| format!(
                    "{} {} {} ({})",
                    f.kind.as_str(),
                    f.rule,
                    f.node,
                    f.reason.clone().unwrap_or_default()
                ))
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    Ok((out, done.report.applied.len() + done.report.fallbacks.len()))
}

/// Compile, check and (when `ort`) verify one case for one target.
pub fn check_case(case: &Case, target: &str, ort: bool) -> Outcome {
    let bytes = case.bytes();
    let result = std::panic::catch_unwind(|| -> Result<bool, String> {
        let (out, changed) = compile_bytes(&bytes, target)?;
        let (again, _) = compile_bytes(&out, target)?;
        if again != out {
            return Err("compiling the output again changed it".into());
        }
        if !ort || changed == 0 {
            return Ok(false);
        }
        verify(&bytes, &out).map(|()| true)
    });
    match result {
        Ok(Ok(v)) => Outcome::Passed { verified: v },
        Ok(Err(e)) => Outcome::Failed(e),
        Err(p) => Outcome::Failed(format!(
            "panic: {}",
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        )),
    }
}

fn verify(original: &[u8], rewritten: &[u8]) -> Result<(), String> {
    use onnx_safeify::verify::{self, VerifyError, VerifyOptions};
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    // One folder per call: tests run cases on several threads of one process.
    let dir = std::env::temp_dir().join(format!(
        "fuzz-bodies-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    struct Gone(std::path::PathBuf);
    impl Drop for Gone {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _gone = Gone(dir.clone());
    let (a, b) = (dir.join("a.onnx"), dir.join("b.onnx"));
    std::fs::write(&a, original).map_err(|e| e.to_string())?;
    std::fs::write(&b, rewritten).map_err(|e| e.to_string())?;
    let opts = VerifyOptions {
        runs: 4,
        ..VerifyOptions::default()
    };
    match verify::verify_models(&a, &b, &opts) {
        Ok(r) if r.passed() => Ok(()),
        Ok(r) => Err(format!("verify: outputs differ: {:?}", r.failures())),
        // The generator may write something ONNX Runtime refuses for the original too: skip.
        Err(VerifyError::Session { path, .. } | VerifyError::Run { path, .. }) if path == a => {
            Ok(())
        }
        Err(e) => Err(format!("verify: {e}")),
    }
}
