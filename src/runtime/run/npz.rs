//! NumPy `.npy` and `.npz` (stored or deflated zip of `.npy`) reading and writing.
//! Headers are parsed here; only the array types ONNX has are accepted.

use std::io::{Read, Write};
use std::path::Path;

use super::dtype::DType;
use super::tensor::{element_count, HostTensor, TensorData};

/// Reads every array of an `.npz` file, in archive order, named by entry (without `.npy`).
pub fn read_npz(path: &Path) -> Result<Vec<(String, HostTensor)>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot open: {e}"))?;
    // Entry sizes are what the archive claims: reserve no more than the archive holds.
    let file_len = file
        .metadata()
        .map(|m| usize::try_from(m.len()).unwrap_or(usize::MAX))
        .unwrap_or(0);
    let mut zip = zip::ZipArchive::new(std::io::BufReader::new(file))
        .map_err(|e| format!("not a valid .npz (zip) file: {e}"))?;
    let mut out = Vec::with_capacity(zip.len());
    for i in 0..zip.len() {
        let mut entry = zip
            .by_index(i)
            .map_err(|e| format!("cannot read entry {i}: {e}"))?;
        if entry.is_dir() {
            continue;
        }
        let name = entry.name().to_string();
        let claimed = usize::try_from(entry.size()).unwrap_or(0);
        let mut bytes = Vec::with_capacity(claimed.min(file_len).min(1 << 30));
        entry
            .read_to_end(&mut bytes)
            .map_err(|e| format!("cannot read entry '{name}': {e}"))?;
        let t = parse_npy(&bytes).map_err(|e| format!("entry '{name}': {e}"))?;
        let key = name.strip_suffix(".npy").unwrap_or(&name).to_string();
        out.push((key, t));
    }
    Ok(out)
}

/// Reads one `.npy` file.
pub fn read_npy(path: &Path) -> Result<HostTensor, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read: {e}"))?;
    parse_npy(&bytes)
}

/// Writes arrays into an uncompressed `.npz` (what `numpy.savez` writes).
pub fn write_npz(path: &Path, arrays: &[(&str, &HostTensor)]) -> Result<(), String> {
    let file = std::fs::File::create(path).map_err(|e| format!("cannot create: {e}"))?;
    let mut zip = zip::ZipWriter::new(file);
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .large_file(true);
    for (name, t) in arrays {
        zip.start_file(format!("{name}.npy"), options)
            .map_err(|e| format!("cannot add '{name}': {e}"))?;
        let bytes = npy_bytes(t)?;
        zip.write_all(&bytes)
            .map_err(|e| format!("cannot write '{name}': {e}"))?;
    }
    zip.finish().map_err(|e| format!("cannot finish: {e}"))?;
    Ok(())
}

/// Encodes a tensor as `.npy` (version 1.0, C order).
pub fn npy_bytes(t: &HostTensor) -> Result<Vec<u8>, String> {
    let (descr, body): (String, Vec<u8>) = match &t.data {
        TensorData::Bytes(b) => {
            let d = match t.dtype {
                DType::F32 => "<f4",
                DType::F64 => "<f8",
                DType::F16 => "<f2",
                DType::I8 => "|i1",
                DType::U8 => "|u1",
                DType::I16 => "<i2",
                DType::U16 => "<u2",
                DType::I32 => "<i4",
                DType::U32 => "<u4",
                DType::I64 => "<i8",
                DType::U64 => "<u8",
                DType::Bool => "|b1",
                DType::C64 => "<c8",
                DType::C128 => "<c16",
                other => return Err(format!("{} has no numpy equivalent", other.name())),
            };
            (d.to_string(), b.clone())
        }
        TensorData::Strings(s) => {
            let width = s
                .iter()
                .map(|x| x.chars().count())
                .max()
                .unwrap_or(0)
                .max(1);
            let mut body = Vec::with_capacity(width * 4 * s.len());
            for x in s {
                let mut n = 0;
                for c in x.chars() {
                    body.extend_from_slice(&(c as u32).to_le_bytes());
                    n += 1;
                }
                body.resize(body.len() + (width - n) * 4, 0);
            }
            (format!("<U{width}"), body)
        }
    };
    let shape = match t.shape.len() {
        0 => "()".to_string(),
        1 => format!("({},)", t.shape[0]),
        _ => {
            let parts: Vec<String> = t.shape.iter().map(|d| d.to_string()).collect();
            format!("({})", parts.join(", "))
        }
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - unpadded % 64) % 64));
    header.push('\n');
    let hlen = u16::try_from(header.len()).map_err(|_| "header too long".to_string())?;
    let mut out = Vec::with_capacity(10 + header.len() + body.len());
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&hlen.to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

/// Parses `.npy` bytes.
pub fn parse_npy(bytes: &[u8]) -> Result<HostTensor, String> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err("not a .npy array (bad magic)".into());
    }
    let major = bytes[6];
    let (hlen, start) = match major {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10usize),
        2 | 3 => {
            if bytes.len() < 12 {
                return Err("truncated .npy header".into());
            }
            (
                u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
                12,
            )
        }
        v => return Err(format!("unsupported .npy version {v}")),
    };
    let end = start
        .checked_add(hlen)
        .filter(|&e| e <= bytes.len())
        .ok_or("truncated .npy header")?;
    let header = std::str::from_utf8(&bytes[start..end]).map_err(|_| "header is not text")?;
    let descr = dict_value(header, "descr").ok_or("header has no 'descr'")?;
    let descr = descr.trim_matches(|c| c == '\'' || c == '"');
    let fortran = dict_value(header, "fortran_order")
        .ok_or("header has no 'fortran_order'")?
        .starts_with("True");
    let shape_str = dict_value(header, "shape").ok_or("header has no 'shape'")?;
    let shape = parse_shape(shape_str)?;
    let n = element_count(&shape).ok_or("shape too large")?;
    let body = &bytes[end..];
    let (endian, code) = descr.split_at_checked(1).unwrap_or(("", descr));
    let (endian, code) = match endian {
        "<" | ">" | "|" | "=" => (endian, code),
        _ => ("=", descr),
    };
    let big = endian == ">";
    // A string array's element count is bounded by its data only when elements have a width.
    let string_width = |w: &str| -> Result<usize, String> {
        match w.parse::<usize>() {
            Ok(0) if n > 0 => Err(format!("zero-width strings ('{descr}') are not supported")),
            Ok(width) => Ok(width),
            Err(_) => Err(format!("bad descr '{descr}'")),
        }
    };
    if let Some(w) = code.strip_prefix('U') {
        let width = string_width(w)?;
        let need = width
            .checked_mul(4)
            .and_then(|b| n.checked_mul(b))
            .ok_or("shape too large")?;
        if body.len() < need {
            return Err(format!("data is {} bytes, expected {need}", body.len()));
        }
        let mut strings = Vec::with_capacity(n);
        for i in 0..n {
            let mut s = String::new();
            for k in 0..width {
                let o = (i * width + k) * 4;
                let b = [body[o], body[o + 1], body[o + 2], body[o + 3]];
                let cp = if big {
                    u32::from_be_bytes(b)
                } else {
                    u32::from_le_bytes(b)
                };
                if cp == 0 {
                    break;
                }
                s.push(char::from_u32(cp).ok_or("invalid unicode in string array")?);
            }
            strings.push(s);
        }
        let strings = if fortran {
            fortran_to_c(&strings, &shape)
        } else {
            strings
        };
        return HostTensor::new(DType::Str, shape, TensorData::Strings(strings));
    }
    if let Some(w) = code.strip_prefix('S') {
        let width = string_width(w)?;
        let need = n.checked_mul(width).ok_or("shape too large")?;
        if body.len() < need {
            return Err(format!("data is {} bytes, expected {need}", body.len()));
        }
        let mut strings = Vec::with_capacity(n);
        for i in 0..n {
            let raw = &body[i * width..(i + 1) * width];
            let len = raw.iter().position(|&b| b == 0).unwrap_or(width);
            strings.push(String::from_utf8_lossy(&raw[..len]).into_owned());
        }
        let strings = if fortran {
            fortran_to_c(&strings, &shape)
        } else {
            strings
        };
        return HostTensor::new(DType::Str, shape, TensorData::Strings(strings));
    }
    let dtype = match code {
        "f4" => DType::F32,
        "f8" => DType::F64,
        "f2" => DType::F16,
        "i1" => DType::I8,
        "u1" => DType::U8,
        "i2" => DType::I16,
        "u2" => DType::U16,
        "i4" => DType::I32,
        "u4" => DType::U32,
        "i8" => DType::I64,
        "u8" => DType::U64,
        "b1" | "?" => DType::Bool,
        "c8" => DType::C64,
        "c16" => DType::C128,
        _ => return Err(format!("unsupported numpy dtype '{descr}'")),
    };
    let len = dtype.byte_len(n).ok_or("shape too large")?;
    if body.len() < len {
        return Err(format!("data is {} bytes, expected {len}", body.len()));
    }
    let mut data = body[..len].to_vec();
    // Swap to little endian per scalar (complex: per part).
    let scalar = match dtype {
        DType::C64 => 4,
        DType::C128 => 8,
        d => d.scalar_size().unwrap_or(1),
    };
    if big && scalar > 1 {
        for chunk in data.chunks_exact_mut(scalar) {
            chunk.reverse();
        }
    }
    if dtype == DType::Bool {
        for b in &mut data {
            *b = u8::from(*b != 0);
        }
    }
    if fortran && shape.len() > 1 {
        let elem = dtype.scalar_size().unwrap_or(1);
        let elems: Vec<&[u8]> = data.chunks_exact(elem).collect();
        let reordered = fortran_to_c(&elems, &shape);
        data = reordered.concat();
    }
    HostTensor::new(dtype, shape, TensorData::Bytes(data))
}

/// Reorders column-major elements into row-major order.
fn fortran_to_c<T: Clone>(items: &[T], shape: &[usize]) -> Vec<T> {
    let n = items.len();
    if shape.len() < 2 || n == 0 {
        return items.to_vec();
    }
    // Fortran strides: stride[0] = 1, stride[k] = stride[k-1] * shape[k-1].
    let mut fstride = vec![1usize; shape.len()];
    for k in 1..shape.len() {
        fstride[k] = fstride[k - 1] * shape[k - 1];
    }
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0usize; shape.len()];
    for _ in 0..n {
        let off: usize = idx.iter().zip(&fstride).map(|(i, s)| i * s).sum();
        out.push(items[off].clone());
        for k in (0..shape.len()).rev() {
            idx[k] += 1;
            if idx[k] < shape[k] {
                break;
            }
            idx[k] = 0;
        }
    }
    out
}

/// The raw text of `'key': value` in a numpy header dict (up to the next top-level comma).
fn dict_value<'h>(header: &'h str, key: &str) -> Option<&'h str> {
    let pat1 = format!("'{key}'");
    let pat2 = format!("\"{key}\"");
    let pos = header.find(&pat1).or_else(|| header.find(&pat2))?;
    let rest = &header[pos + pat1.len()..];
    let rest = rest.trim_start().strip_prefix(':')?.trim_start();
    let mut depth = 0i32;
    for (i, c) in rest.char_indices() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&rest[..=i]);
                }
            }
            ',' | '}' if depth == 0 => return Some(rest[..i].trim()),
            _ => {}
        }
    }
    None
}

fn parse_shape(s: &str) -> Result<Vec<usize>, String> {
    let inner = s
        .trim()
        .strip_prefix('(')
        .and_then(|x| x.strip_suffix(')'))
        .ok_or_else(|| format!("bad shape '{s}'"))?;
    inner
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            p.trim_end_matches('L')
                .parse::<usize>()
                .map_err(|_| format!("bad shape '{s}'"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npy_round_trip() {
        let data: Vec<u8> = (0..6).flat_map(|i| (i as f32).to_le_bytes()).collect();
        let t = HostTensor::new(DType::F32, vec![2, 3], TensorData::Bytes(data)).unwrap();
        let back = parse_npy(&npy_bytes(&t).unwrap()).unwrap();
        assert_eq!(back, t);
        let s = HostTensor::new(
            DType::Str,
            vec![2],
            TensorData::Strings(vec!["ab".into(), "ü".into()]),
        )
        .unwrap();
        assert_eq!(parse_npy(&npy_bytes(&s).unwrap()).unwrap(), s);
        let scalar = HostTensor::new(
            DType::I64,
            vec![],
            TensorData::Bytes(7i64.to_le_bytes().to_vec()),
        )
        .unwrap();
        assert_eq!(parse_npy(&npy_bytes(&scalar).unwrap()).unwrap(), scalar);
    }

    #[test]
    fn fortran_order_and_big_endian() {
        // [[1,2,3],[4,5,6]] stored column-major as 1,4,2,5,3,6 in big-endian int16.
        let header = "{'descr': '>i2', 'fortran_order': True, 'shape': (2, 3), }";
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
        bytes.extend_from_slice(header.as_bytes());
        for v in [1i16, 4, 2, 5, 3, 6] {
            bytes.extend_from_slice(&v.to_be_bytes());
        }
        let t = parse_npy(&bytes).unwrap();
        let want: Vec<u8> = [1i16, 2, 3, 4, 5, 6]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(t.shape, vec![2, 3]);
        assert_eq!(t.data, TensorData::Bytes(want));
    }

    #[test]
    fn deflated_npz_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.npz");
        let t = HostTensor::new(
            DType::I32,
            vec![3],
            TensorData::Bytes(vec![1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0]),
        )
        .unwrap();
        {
            let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
            let options = zip::write::SimpleFileOptions::default()
                .compression_method(zip::CompressionMethod::Deflated);
            zip.start_file("ids.npy", options).unwrap();
            zip.write_all(&npy_bytes(&t).unwrap()).unwrap();
            zip.finish().unwrap();
        }
        assert_eq!(read_npz(&path).unwrap(), vec![("ids".to_string(), t)]);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(parse_npy(b"").is_err());
        assert!(parse_npy(b"\x93NUMPY\x01\x00\xff\xff{").is_err());
        assert!(parse_npy(b"\x93NUMPY\x01\x00\x05\x00{'a'}").is_err());
    }
}
