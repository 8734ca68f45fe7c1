//! `TensorProto` files (`input_0.pb`, `output_0.pb` of the ONNX backend tests) to host
//! tensors and back.

use std::path::Path;

use prost::Message;

use crate::proto::TensorProto;
use crate::runtime::run::dtype::DType;
use crate::runtime::run::tensor::{element_count, HostTensor, TensorData};

/// Reads a serialized `TensorProto`; returns its name (empty if none) and value.
pub fn read_tensor_pb(path: &Path) -> Result<(String, HostTensor), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read: {e}"))?;
    let proto = TensorProto::decode(bytes.as_slice())
        .map_err(|e| format!("not a TensorProto (decode failed: {e})"))?;
    let t = tensor_from_proto(&proto)?;
    Ok((proto.name.unwrap_or_default(), t))
}

/// Converts a `TensorProto` with inline data to a host tensor.
pub fn tensor_from_proto(p: &TensorProto) -> Result<HostTensor, String> {
    let code = p.data_type.unwrap_or(0);
    let dtype = DType::from_code(code).ok_or_else(|| {
        format!(
            "unsupported tensor data type {}",
            DType::describe_code(code)
        )
    })?;
    if !p.external_data.is_empty() || p.data_location == Some(1) {
        return Err("tensors with external data are not supported here".into());
    }
    if p.segment.is_some() {
        return Err("segmented tensors are not supported".into());
    }
    let shape: Vec<usize> = p
        .dims
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("negative dimension {d}")))
        .collect::<Result<_, _>>()?;
    let n = element_count(&shape).ok_or("too many elements")?;
    if dtype == DType::Str {
        let strings: Vec<String> = p
            .string_data
            .iter()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect();
        return HostTensor::new(dtype, shape, TensorData::Strings(strings));
    }
    let want = dtype.byte_len(n).ok_or("too many elements")?;
    let data: Vec<u8> = if let Some(raw) = &p.raw_data {
        raw.to_vec()
    } else {
        typed_to_bytes(p, dtype)?
    };
    if data.len() != want {
        return Err(format!(
            "holds {} bytes of data, but {} of shape {:?} needs {want}",
            data.len(),
            dtype.name(),
            shape
        ));
    }
    let mut data = data;
    if dtype == DType::Bool {
        for b in &mut data {
            *b = u8::from(*b != 0);
        }
    }
    HostTensor::new(dtype, shape, TensorData::Bytes(data))
}

/// The typed repeated fields (`float_data`, `int32_data`, ...) as packed little-endian bytes.
fn typed_to_bytes(p: &TensorProto, dtype: DType) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    match dtype {
        DType::F32 | DType::C64 => {
            for v in &p.float_data {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        DType::F64 | DType::C128 => {
            for v in &p.double_data {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        DType::I64 => {
            for v in &p.int64_data {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        DType::U32 => {
            for v in &p.uint64_data {
                out.extend_from_slice(&(*v as u32).to_le_bytes());
            }
        }
        DType::U64 => {
            for v in &p.uint64_data {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        DType::I32 => {
            for v in &p.int32_data {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        DType::I16 | DType::U16 | DType::F16 | DType::BF16 => {
            for v in &p.int32_data {
                out.extend_from_slice(&(*v as u16).to_le_bytes());
            }
        }
        DType::I8
        | DType::U8
        | DType::Bool
        | DType::F8E4M3FN
        | DType::F8E4M3FNUZ
        | DType::F8E5M2
        | DType::F8E5M2FNUZ
        | DType::F8E8M0 => {
            for v in &p.int32_data {
                out.push(*v as u8);
            }
        }
        DType::U4 | DType::I4 | DType::F4E2M1 | DType::U2 | DType::I2 => {
            // int32_data holds one packed byte per entry.
            for v in &p.int32_data {
                out.push(*v as u8);
            }
        }
        DType::Str => return Err("string tensor in typed conversion".into()),
    }
    Ok(out)
}

/// Converts a host tensor to a `TensorProto` (raw data, or `string_data` for strings).
pub fn tensor_to_proto(name: &str, t: &HostTensor) -> TensorProto {
    let mut p = TensorProto {
        name: Some(name.to_string()),
        data_type: Some(t.dtype.code()),
        dims: t.shape.iter().map(|&d| d as i64).collect(),
        ..TensorProto::default()
    };
    match &t.data {
        TensorData::Bytes(b) => p.raw_data = Some(bytes::Bytes::from(b.clone())),
        TensorData::Strings(s) => {
            p.string_data = s
                .iter()
                .map(|x| bytes::Bytes::from(x.clone().into_bytes()))
                .collect()
        }
    }
    p
}

/// Writes a host tensor as a serialized `TensorProto`.
pub fn write_tensor_pb(path: &Path, name: &str, t: &HostTensor) -> Result<(), String> {
    std::fs::write(path, tensor_to_proto(name, t).encode_to_vec())
        .map_err(|e| format!("cannot write: {e}"))
}
