//! A tensor held in host memory, independent of ONNX Runtime: what inputs are generated
//! or loaded into, and what outputs are copied out into before they are compared.

use super::dtype::DType;

/// Element storage: the packed little-endian bytes ONNX `raw_data` and ORT use, or strings.
#[derive(Debug, Clone, PartialEq)]
pub enum TensorData {
    Bytes(Vec<u8>),
    Strings(Vec<String>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct HostTensor {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data: TensorData,
}

impl HostTensor {
    /// Builds a tensor, checking that the data matches the type and shape.
    pub fn new(dtype: DType, shape: Vec<usize>, data: TensorData) -> Result<HostTensor, String> {
        let n = element_count(&shape).ok_or_else(|| format!("shape {shape:?} is too large"))?;
        match (&data, dtype) {
            (TensorData::Strings(s), DType::Str) => {
                if s.len() != n {
                    return Err(format!(
                        "{} strings for shape {} ({n} elements)",
                        s.len(),
                        fmt_shape(&shape)
                    ));
                }
            }
            (TensorData::Strings(_), _) => {
                return Err(format!("string data given for a {} tensor", dtype.name()))
            }
            (TensorData::Bytes(_), DType::Str) => {
                return Err("byte data given for a string tensor".to_string())
            }
            (TensorData::Bytes(b), _) => {
                let want = dtype
                    .byte_len(n)
                    .ok_or_else(|| format!("shape {shape:?} is too large"))?;
                if b.len() != want {
                    return Err(format!(
                        "{} bytes for a {} tensor of shape {} (expected {want})",
                        b.len(),
                        dtype.name(),
                        fmt_shape(&shape)
                    ));
                }
            }
        }
        Ok(HostTensor { dtype, shape, data })
    }

    pub fn len(&self) -> usize {
        element_count(&self.shape).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `float32[1,3,64,64]`
    pub fn describe(&self) -> String {
        format!("{}{}", self.dtype.name(), fmt_shape(&self.shape))
    }
}

/// Number of elements of a shape, `None` on overflow.
pub fn element_count(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

/// `[1,3,64,64]`
pub fn fmt_shape(shape: &[usize]) -> String {
    let parts: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("[{}]", parts.join(","))
}
