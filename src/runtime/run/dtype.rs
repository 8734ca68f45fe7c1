//! ONNX element types of the tensors a model is run with: the `TensorProto.DataType` code, a
//! readable name, the byte layout, and the matching `ort` element type.

use ort::value::TensorElementType;

/// An ONNX tensor element type (the `TensorProto.DataType` enum, minus UNDEFINED).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    U8,
    I8,
    U16,
    I16,
    I32,
    I64,
    Str,
    Bool,
    F16,
    F64,
    U32,
    U64,
    C64,
    C128,
    BF16,
    F8E4M3FN,
    F8E4M3FNUZ,
    F8E5M2,
    F8E5M2FNUZ,
    U4,
    I4,
    F4E2M1,
    F8E8M0,
    U2,
    I2,
}

const ALL: [DType; 26] = [
    DType::F32,
    DType::U8,
    DType::I8,
    DType::U16,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::Str,
    DType::Bool,
    DType::F16,
    DType::F64,
    DType::U32,
    DType::U64,
    DType::C64,
    DType::C128,
    DType::BF16,
    DType::F8E4M3FN,
    DType::F8E4M3FNUZ,
    DType::F8E5M2,
    DType::F8E5M2FNUZ,
    DType::U4,
    DType::I4,
    DType::F4E2M1,
    DType::F8E8M0,
    DType::U2,
    DType::I2,
];

/// How values of a type are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Compared within tolerance after conversion to f64.
    Float,
    /// Compared for equality after conversion to i128.
    Int,
    Bool,
    Str,
    /// Bit patterns compared for equality (float8/float4 and packed sub-byte types).
    Opaque,
}

impl DType {
    /// The `TensorProto.DataType` code.
    pub fn code(self) -> i32 {
        ALL.iter()
            .position(|d| *d == self)
            .map_or(0, |i| i as i32 + 1)
    }

    pub fn from_code(code: i32) -> Option<DType> {
        if code >= 1 {
            ALL.get(code as usize - 1).copied()
        } else {
            None
        }
    }

    /// numpy-like name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::U8 => "uint8",
            DType::I8 => "int8",
            DType::U16 => "uint16",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::Str => "string",
            DType::Bool => "bool",
            DType::F16 => "float16",
            DType::F64 => "float64",
            DType::U32 => "uint32",
            DType::U64 => "uint64",
            DType::C64 => "complex64",
            DType::C128 => "complex128",
            DType::BF16 => "bfloat16",
            DType::F8E4M3FN => "float8e4m3fn",
            DType::F8E4M3FNUZ => "float8e4m3fnuz",
            DType::F8E5M2 => "float8e5m2",
            DType::F8E5M2FNUZ => "float8e5m2fnuz",
            DType::U4 => "uint4",
            DType::I4 => "int4",
            DType::F4E2M1 => "float4e2m1",
            DType::F8E8M0 => "float8e8m0",
            DType::U2 => "uint2",
            DType::I2 => "int2",
        }
    }

    /// A readable name for any code, including unknown ones.
    pub fn describe_code(code: i32) -> String {
        match DType::from_code(code) {
            Some(d) => d.name().to_string(),
            None => format!("data type {code}"),
        }
    }

    pub fn kind(self) -> Kind {
        match self {
            DType::F32 | DType::F64 | DType::F16 | DType::BF16 | DType::C64 | DType::C128 => {
                Kind::Float
            }
            DType::U8
            | DType::I8
            | DType::U16
            | DType::I16
            | DType::I32
            | DType::I64
            | DType::U32
            | DType::U64 => Kind::Int,
            DType::Bool => Kind::Bool,
            DType::Str => Kind::Str,
            _ => Kind::Opaque,
        }
    }

    /// Bytes taken by `n` elements in the packed little-endian layout ONNX and ORT share;
    /// `None` for strings or on overflow.
    pub fn byte_len(self, n: usize) -> Option<usize> {
        match self {
            DType::Str => None,
            DType::U2 | DType::I2 => Some(n.div_ceil(4)),
            DType::U4 | DType::I4 | DType::F4E2M1 => Some(n.div_ceil(2)),
            _ => n.checked_mul(self.scalar_size()?),
        }
    }

    /// Bytes of one element for byte-aligned types.
    pub fn scalar_size(self) -> Option<usize> {
        Some(match self {
            DType::U8
            | DType::I8
            | DType::Bool
            | DType::F8E4M3FN
            | DType::F8E4M3FNUZ
            | DType::F8E5M2
            | DType::F8E5M2FNUZ
            | DType::F8E8M0 => 1,
            DType::U16 | DType::I16 | DType::F16 | DType::BF16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 | DType::C64 => 8,
            DType::C128 => 16,
            DType::Str | DType::U4 | DType::I4 | DType::F4E2M1 | DType::U2 | DType::I2 => {
                return None
            }
        })
    }

    pub fn to_ort(self) -> TensorElementType {
        match self {
            DType::F32 => TensorElementType::Float32,
            DType::U8 => TensorElementType::Uint8,
            DType::I8 => TensorElementType::Int8,
            DType::U16 => TensorElementType::Uint16,
            DType::I16 => TensorElementType::Int16,
            DType::I32 => TensorElementType::Int32,
            DType::I64 => TensorElementType::Int64,
            DType::Str => TensorElementType::String,
            DType::Bool => TensorElementType::Bool,
            DType::F16 => TensorElementType::Float16,
            DType::F64 => TensorElementType::Float64,
            DType::U32 => TensorElementType::Uint32,
            DType::U64 => TensorElementType::Uint64,
            DType::C64 => TensorElementType::Complex64,
            DType::C128 => TensorElementType::Complex128,
            DType::BF16 => TensorElementType::Bfloat16,
            DType::F8E4M3FN => TensorElementType::Float8E4M3FN,
            DType::F8E4M3FNUZ => TensorElementType::Float8E4M3FNUZ,
            DType::F8E5M2 => TensorElementType::Float8E5M2,
            DType::F8E5M2FNUZ => TensorElementType::Float8E5M2FNUZ,
            DType::U4 => TensorElementType::Uint4,
            DType::I4 => TensorElementType::Int4,
            DType::F4E2M1 => TensorElementType::Float4E2M1,
            DType::F8E8M0 => TensorElementType::Float8E8M0,
            DType::U2 => TensorElementType::Uint2,
            DType::I2 => TensorElementType::Int2,
        }
    }

    pub fn from_ort(t: TensorElementType) -> Option<DType> {
        ALL.iter().copied().find(|d| d.to_ort() == t)
    }

    /// Reads element `i` of a byte-aligned numeric buffer as f64 (floats and complex parts;
    /// complex types are read as 2n interleaved reals).
    pub fn read_f64(self, data: &[u8], i: usize) -> f64 {
        match self {
            DType::F32 | DType::C64 => f32::from_le_bytes(le4(data, i)) as f64,
            DType::F64 | DType::C128 => f64::from_le_bytes(le8(data, i)),
            DType::F16 => f16_to_f32(u16::from_le_bytes(le2(data, i))) as f64,
            DType::BF16 => bf16_to_f32(u16::from_le_bytes(le2(data, i))) as f64,
            _ => self.read_i128(data, i) as f64,
        }
    }

    /// Reads element `i` of an integer or bool buffer.
    pub fn read_i128(self, data: &[u8], i: usize) -> i128 {
        match self {
            DType::U8 | DType::Bool => data[i] as i128,
            DType::I8 => data[i] as i8 as i128,
            DType::U16 => u16::from_le_bytes(le2(data, i)) as i128,
            DType::I16 => i16::from_le_bytes(le2(data, i)) as i128,
            DType::U32 => u32::from_le_bytes(le4(data, i)) as i128,
            DType::I32 => i32::from_le_bytes(le4(data, i)) as i128,
            DType::U64 => u64::from_le_bytes(le8(data, i)) as i128,
            DType::I64 => i64::from_le_bytes(le8(data, i)) as i128,
            _ => 0,
        }
    }

    /// Number of scalars compared per element (2 for complex types).
    pub fn lanes(self) -> usize {
        match self {
            DType::C64 | DType::C128 => 2,
            _ => 1,
        }
    }
}

impl serde::Serialize for DType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

fn le2(d: &[u8], i: usize) -> [u8; 2] {
    [d[2 * i], d[2 * i + 1]]
}

fn le4(d: &[u8], i: usize) -> [u8; 4] {
    let mut b = [0u8; 4];
    b.copy_from_slice(&d[4 * i..4 * i + 4]);
    b
}

fn le8(d: &[u8], i: usize) -> [u8; 8] {
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[8 * i..8 * i + 8]);
    b
}

/// IEEE half to f32 (exact).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h >> 15) & 1) as u32;
    let exp = ((h >> 10) & 0x1f) as u32;
    let frac = (h & 0x3ff) as u32;
    let bits = if exp == 0 {
        if frac == 0 {
            sign << 31
        } else {
            // Subnormal: value = frac * 2^-24.
            let v = frac as f32 * (1.0 / 16_777_216.0);
            return if sign == 1 { -v } else { v };
        }
    } else if exp == 0x1f {
        (sign << 31) | 0x7f80_0000 | (frac << 13)
    } else {
        (sign << 31) | ((exp + 112) << 23) | (frac << 13)
    };
    f32::from_bits(bits)
}

/// f32 to IEEE half, rounding to nearest even.
pub fn f32_to_f16(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32;
    let frac = bits & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if frac != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        let m = frac | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = 1u32 << (shift - 1);
        let mut v = m >> shift;
        let rem = m & ((1u32 << shift) - 1);
        if rem > half || (rem == half && (v & 1) == 1) {
            v += 1;
        }
        return sign | v as u16;
    }
    let mut v = ((e as u32) << 10) | (frac >> 13);
    let rem = frac & 0x1fff;
    if rem > 0x1000 || (rem == 0x1000 && (v & 1) == 1) {
        v += 1;
    }
    sign | v as u16
}

pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// f32 to bfloat16, rounding to nearest even.
pub fn f32_to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) as u16) | 0x40;
    }
    let round = 0x7fff + ((bits >> 16) & 1);
    (bits.wrapping_add(round) >> 16) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for d in ALL {
            assert_eq!(DType::from_code(d.code()), Some(d));
            assert_eq!(DType::from_ort(d.to_ort()), Some(d));
        }
        assert_eq!(DType::F32.code(), 1);
        assert_eq!(DType::BF16.code(), 16);
        assert_eq!(DType::I2.code(), 26);
        assert_eq!(DType::from_code(0), None);
        assert_eq!(DType::from_code(99), None);
    }

    #[test]
    fn half_conversions() {
        for v in [
            0.0f32,
            1.0,
            -2.5,
            65504.0,
            6.1035156e-5,
            5.9604645e-8,
            0.333_251_95,
        ] {
            assert_eq!(f16_to_f32(f32_to_f16(v)), v, "{v}");
        }
        assert!(f16_to_f32(f32_to_f16(f32::NAN)).is_nan());
        assert_eq!(f16_to_f32(f32_to_f16(1e6)), f32::INFINITY);
        assert_eq!(bf16_to_f32(f32_to_bf16(1.5)), 1.5);
    }
}
