//! Guest memory: reading what the guest passes, and handing data back the way proxy-wasm hosts
//! do (allocate in the guest with `proxy_on_memory_allocate`, copy, write pointer and size).

use wasmtime::{Caller, Result};

use crate::state::{status, State};

/// A guest (pointer, length) pair read into host memory, or the ABI status to return.
pub fn read(caller: &Caller<'_, State>, ptr: i32, len: i32) -> Result<Vec<u8>, i32> {
    let Some(g) = caller.data().guest.as_ref() else {
        return Err(status::INVALID_MEMORY_ACCESS);
    };
    let mut buf = vec![0u8; len as u32 as usize];
    g.memory
        .read(caller, ptr as u32 as usize, &mut buf)
        .map_err(|_| status::INVALID_MEMORY_ACCESS)?;
    Ok(buf)
}

pub fn read_string(caller: &Caller<'_, State>, ptr: i32, len: i32) -> Result<String, i32> {
    let b = read(caller, ptr, len)?;
    String::from_utf8(b).map_err(|_| status::BAD_ARGUMENT)
}

pub fn write(caller: &mut Caller<'_, State>, ptr: i32, data: &[u8]) -> Result<(), i32> {
    let Some(g) = caller.data().guest.clone() else {
        return Err(status::INVALID_MEMORY_ACCESS);
    };
    g.memory
        .write(caller, ptr as u32 as usize, data)
        .map_err(|_| status::INVALID_MEMORY_ACCESS)
}

pub fn write_u32(caller: &mut Caller<'_, State>, ptr: i32, v: u32) -> Result<(), i32> {
    write(caller, ptr, &v.to_le_bytes())
}

/// Copies `data` into fresh guest memory and writes its pointer and size at the two return
/// pointers. Empty data is returned as (0, 0) without allocating, like the C++ host does.
/// The outer Result is a trap (the guest's allocator failed); the inner one an ABI status.
pub fn give(
    caller: &mut Caller<'_, State>,
    data: &[u8],
    ptr_ptr: i32,
    size_ptr: i32,
) -> Result<i32> {
    let mut ptr = 0i32;
    if !data.is_empty() {
        let Some(g) = caller.data().guest.clone() else {
            return Ok(status::INVALID_MEMORY_ACCESS);
        };
        let len = i32::try_from(data.len())
            .map_err(|_| wasmtime::format_err!("{} bytes do not fit guest memory", data.len()))?;
        ptr = g.malloc.call(&mut *caller, len)?;
        if ptr == 0 {
            wasmtime::bail!("proxy_on_memory_allocate({len}) returned null");
        }
        if let Err(s) = write(caller, ptr, data) {
            return Ok(s);
        }
    }
    let size = data.len() as u32;
    match write_u32(caller, ptr_ptr, ptr as u32).and_then(|()| write_u32(caller, size_ptr, size)) {
        Ok(()) => Ok(status::OK),
        Err(s) => Ok(s),
    }
}

/// proxy-wasm's serialized header map: u32 count, then (u32 name len, u32 value len) per pair,
/// then each name and value followed by a NUL.
pub fn serialize_pairs<K: AsRef<[u8]>, V: AsRef<[u8]>>(pairs: &[(K, V)]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(pairs.len() as u32).to_le_bytes());
    for (k, v) in pairs {
        out.extend_from_slice(&(k.as_ref().len() as u32).to_le_bytes());
        out.extend_from_slice(&(v.as_ref().len() as u32).to_le_bytes());
    }
    for (k, v) in pairs {
        out.extend_from_slice(k.as_ref());
        out.push(0);
        out.extend_from_slice(v.as_ref());
        out.push(0);
    }
    out
}

/// The inverse of [`serialize_pairs`]; None if the bytes are not a well-formed map.
pub fn deserialize_pairs(bytes: &[u8]) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    if bytes.is_empty() {
        return Some(Vec::new());
    }
    let word = |at: usize| -> Option<usize> {
        let b = bytes.get(at..at.checked_add(4)?)?;
        Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    };
    let n = word(0)?;
    let mut data = 4usize.checked_add(n.checked_mul(8)?)?;
    let mut out = Vec::with_capacity(n.min(1024));
    for i in 0..n {
        let (klen, vlen) = (word(4 + i * 8)?, word(8 + i * 8)?);
        let k = bytes.get(data..data.checked_add(klen)?)?.to_vec();
        data += klen + 1;
        let v = bytes.get(data..data.checked_add(vlen)?)?.to_vec();
        data += vlen + 1;
        out.push((k, v));
    }
    (data <= bytes.len()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_round_trip() {
        let pairs = vec![(b":path".to_vec(), b"/x".to_vec()), (b"a".to_vec(), vec![])];
        let bytes = serialize_pairs(&pairs);
        assert_eq!(deserialize_pairs(&bytes), Some(pairs));
        assert_eq!(deserialize_pairs(&bytes[..bytes.len() - 2]), None);
        assert_eq!(deserialize_pairs(&[]), Some(vec![]));
        assert_eq!(deserialize_pairs(&[0xff, 0xff, 0xff, 0xff]), None);
    }
}
