//! Facts about ONNX tensor element types and checks that a tensor's declared shape agrees with
//! its payload. Sizes from a file are untrusted: every product is checked for overflow.

use crate::proto::TensorProto;

/// Element types, numbered as in `TensorProto.DataType`.
pub mod dtype {
    pub const UNDEFINED: i32 = 0;
    pub const FLOAT: i32 = 1;
    pub const UINT8: i32 = 2;
    pub const INT8: i32 = 3;
    pub const UINT16: i32 = 4;
    pub const INT16: i32 = 5;
    pub const INT32: i32 = 6;
    pub const INT64: i32 = 7;
    pub const STRING: i32 = 8;
    pub const BOOL: i32 = 9;
    pub const FLOAT16: i32 = 10;
    pub const DOUBLE: i32 = 11;
    pub const UINT32: i32 = 12;
    pub const UINT64: i32 = 13;
    pub const COMPLEX64: i32 = 14;
    pub const COMPLEX128: i32 = 15;
    pub const BFLOAT16: i32 = 16;
    pub const FLOAT8E4M3FN: i32 = 17;
    pub const FLOAT8E4M3FNUZ: i32 = 18;
    pub const FLOAT8E5M2: i32 = 19;
    pub const FLOAT8E5M2FNUZ: i32 = 20;
    pub const UINT4: i32 = 21;
    pub const INT4: i32 = 22;
    pub const FLOAT4E2M1: i32 = 23;
    pub const FLOAT8E8M0: i32 = 24;
    pub const UINT2: i32 = 25;
    pub const INT2: i32 = 26;
    pub const FLOAT6E2M3: i32 = 27;
    pub const FLOAT6E3M2: i32 = 28;
    /// The largest element type this build knows.
    pub const MAX: i32 = FLOAT6E3M2;
}

/// The ONNX name of an element type (`"float"`, `"int64"`, ...), or `"dtype(N)"`.
pub fn dtype_name(t: i32) -> String {
    const NAMES: [&str; 29] = [
        "undefined",
        "float",
        "uint8",
        "int8",
        "uint16",
        "int16",
        "int32",
        "int64",
        "string",
        "bool",
        "float16",
        "double",
        "uint32",
        "uint64",
        "complex64",
        "complex128",
        "bfloat16",
        "float8e4m3fn",
        "float8e4m3fnuz",
        "float8e5m2",
        "float8e5m2fnuz",
        "uint4",
        "int4",
        "float4e2m1",
        "float8e8m0",
        "uint2",
        "int2",
        "float6e2m3",
        "float6e3m2",
    ];
    usize::try_from(t)
        .ok()
        .and_then(|i| NAMES.get(i))
        .map(|s| s.to_string())
        .unwrap_or_else(|| format!("dtype({t})"))
}

/// The element type for an ONNX name, case-insensitive (`float32` is accepted for `float`).
pub fn dtype_from_name(name: &str) -> Option<i32> {
    let n = name.to_ascii_lowercase();
    let n = match n.as_str() {
        "float32" | "f32" => "float",
        "float64" | "f64" => "double",
        "fp16" | "f16" | "half" => "float16",
        "bf16" => "bfloat16",
        other => other,
    };
    (0..=dtype::MAX).find(|&t| dtype_name(t) == n)
}

/// Storage size of `n` elements of type `t` in `raw_data`, in bytes (sub-byte types packed).
/// `None` for strings, unknown types, or overflow.
pub fn raw_size(t: i32, n: u64) -> Option<u64> {
    use dtype::*;
    match t {
        FLOAT | INT32 | UINT32 => n.checked_mul(4),
        UINT8 | INT8 | BOOL | FLOAT8E4M3FN | FLOAT8E4M3FNUZ | FLOAT8E5M2 | FLOAT8E5M2FNUZ
        | FLOAT8E8M0 => Some(n),
        UINT16 | INT16 | FLOAT16 | BFLOAT16 => n.checked_mul(2),
        INT64 | DOUBLE | UINT64 | COMPLEX64 => n.checked_mul(8),
        COMPLEX128 => n.checked_mul(16),
        UINT4 | INT4 | FLOAT4E2M1 => Some(n.div_ceil(2)),
        UINT2 | INT2 => Some(n.div_ceil(4)),
        FLOAT6E2M3 | FLOAT6E3M2 => n.checked_mul(6).map(|b| b.div_ceil(8)),
        _ => None,
    }
}

/// Size in bytes of one element (rounded up for sub-byte types); 0 when unknown.
pub fn elem_size(t: i32) -> u64 {
    raw_size(t, 1).unwrap_or(0)
}

/// Number of elements a shape declares, or a message saying why it is invalid.
pub fn element_count(dims: &[i64]) -> Result<u64, String> {
    let mut n: u64 = 1;
    for &d in dims {
        if d < 0 {
            return Err(format!("has a negative dimension {d} in shape {dims:?}"));
        }
        n = n
            .checked_mul(d as u64)
            .ok_or_else(|| format!("shape {dims:?} overflows a 64-bit element count"))?;
    }
    Ok(n)
}

/// Check that a tensor's shape, element type and payload agree. External data is checked
/// elsewhere (its size is only known from the file). Returns the declared element count.
pub fn check_tensor(t: &TensorProto) -> Result<u64, String> {
    use dtype::*;
    let n = element_count(&t.dims)?;
    let ty = t.data_type.unwrap_or(UNDEFINED);
    if ty <= UNDEFINED || ty > MAX {
        return Err(if ty == UNDEFINED {
            "has no element type (data_type is UNDEFINED)".to_string()
        } else {
            format!("has unknown element type {ty}")
        });
    }
    if t.segment.is_some() {
        // A segment holds part of a larger tensor; its payload is not the whole shape.
        return Ok(n);
    }
    if crate::io::external::is_external(t) {
        if t.raw_data.as_ref().is_some_and(|r| !r.is_empty()) {
            return Err("is stored externally but also carries raw_data".to_string());
        }
        return Ok(n);
    }
    let typed_fields = [
        ("float_data", t.float_data.len()),
        ("int32_data", t.int32_data.len()),
        ("string_data", t.string_data.len()),
        ("int64_data", t.int64_data.len()),
        ("double_data", t.double_data.len()),
        ("uint64_data", t.uint64_data.len()),
    ];
    let used: Vec<(&str, usize)> = typed_fields.into_iter().filter(|f| f.1 > 0).collect();
    if let Some(raw) = &t.raw_data {
        if ty == STRING {
            return Err("is a string tensor but carries raw_data".to_string());
        }
        if let Some((field, _)) = used.first() {
            return Err(format!("carries both raw_data and {field}"));
        }
        let want =
            raw_size(ty, n).ok_or_else(|| format!("shape {:?} overflows its byte size", t.dims))?;
        if raw.len() as u64 != want {
            return Err(format!(
                "declares shape {:?} of {} ({want} bytes) but raw_data holds {} bytes",
                t.dims,
                dtype_name(ty),
                raw.len()
            ));
        }
        return Ok(n);
    }
    if used.len() > 1 {
        return Err(format!(
            "carries more than one payload field ({} and {})",
            used[0].0, used[1].0
        ));
    }
    let (field, count) = used.first().copied().unwrap_or(("", 0));
    if n == 0 {
        if count != 0 {
            return Err(format!("declares no elements but {field} holds {count}"));
        }
        return Ok(0);
    }
    let expected_field = match ty {
        FLOAT | COMPLEX64 => "float_data",
        DOUBLE | COMPLEX128 => "double_data",
        INT64 => "int64_data",
        STRING => "string_data",
        UINT32 | UINT64 => "uint64_data",
        _ => "int32_data",
    };
    if count == 0 {
        return Err(format!(
            "declares shape {:?} ({n} elements) but has no data",
            t.dims
        ));
    }
    if field != expected_field {
        return Err(format!(
            "is {} but stores its data in {field} (expected {expected_field})",
            dtype_name(ty)
        ));
    }
    let count = count as u64;
    let ok = match ty {
        COMPLEX64 | COMPLEX128 => n.checked_mul(2) == Some(count),
        // Sub-byte types may be stored one element per entry or packed.
        UINT4 | INT4 | FLOAT4E2M1 | UINT2 | INT2 | FLOAT6E2M3 | FLOAT6E3M2 => {
            count <= n && count >= n.div_ceil(4)
        }
        _ => count == n,
    };
    if !ok {
        return Err(format!(
            "declares shape {:?} ({n} elements of {}) but {field} holds {count} values",
            t.dims,
            dtype_name(ty)
        ));
    }
    Ok(n)
}
