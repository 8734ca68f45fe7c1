//! The targets shipped with the tool: `rules/*.yaml`, embedded in the binary so that the
//! command works from any folder. Adding one is a YAML file and a line in [`BUILTIN`].

/// Built-in targets: name and YAML text.
pub const BUILTIN: &[(&str, &str)] = &[
    ("none", include_str!("../../rules/none.yaml")),
    ("directml", include_str!("../../rules/directml.yaml")),
    ("rx580", include_str!("../../rules/rx580.yaml")),
    ("intel-gen9", include_str!("../../rules/intel-gen9.yaml")),
    ("intel-xe", include_str!("../../rules/intel-xe.yaml")),
    ("rdna2", include_str!("../../rules/rdna2.yaml")),
    (
        "rocm-migraphx",
        include_str!("../../rules/rocm-migraphx.yaml"),
    ),
    (
        "openvino-gpu",
        include_str!("../../rules/openvino-gpu.yaml"),
    ),
    ("coreml", include_str!("../../rules/coreml.yaml")),
    ("webgpu", include_str!("../../rules/webgpu.yaml")),
    ("tensorrt", include_str!("../../rules/tensorrt.yaml")),
];

/// The YAML text of a built-in target.
pub fn builtin(name: &str) -> Option<&'static str> {
    BUILTIN.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// The names of the built-in targets, in table order.
pub fn builtin_names() -> Vec<&'static str> {
    BUILTIN.iter().map(|(n, _)| *n).collect()
}

/// How a built-in target's file is named in messages.
pub fn builtin_display(name: &str) -> String {
    format!("builtin:{name}.yaml")
}
