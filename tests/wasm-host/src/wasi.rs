//! The few `wasi_snapshot_preview1` functions a proxy-wasm filter built for wasm32-wasip1
//! imports (Rust's std asks for them at start-up and for panics). Implemented here rather than
//! with wasmtime-wasi, whose preview1 layer needs wasmtime's async and component-model features:
//! these are deterministic (seeded randomness, host time, empty environment), and what the guest
//! writes to stdout/stderr (e.g. a panic message) lands in the host's log.

use wasmtime::{Caller, Linker, Result};

use crate::memory::{read, write, write_u32};
use crate::state::{LogEntry, State};

const ERRNO_SUCCESS: i32 = 0;
const ERRNO_BADF: i32 = 8;
const ERRNO_FAULT: i32 = 21;
const ERRNO_INVAL: i32 = 28;

type C<'a> = Caller<'a, State>;

pub fn add_to_linker(l: &mut Linker<State>) -> Result<()> {
    const M: &str = "wasi_snapshot_preview1";
    l.func_wrap(M, "fd_write", fd_write)?;
    l.func_wrap(M, "random_get", random_get)?;
    l.func_wrap(M, "environ_sizes_get", zero_sizes)?;
    l.func_wrap(M, "environ_get", |_: C<'_>, _: i32, _: i32| ERRNO_SUCCESS)?;
    l.func_wrap(M, "args_sizes_get", zero_sizes)?;
    l.func_wrap(M, "args_get", |_: C<'_>, _: i32, _: i32| ERRNO_SUCCESS)?;
    l.func_wrap(M, "clock_time_get", clock_time_get)?;
    l.func_wrap(M, "sched_yield", |_: C<'_>| ERRNO_SUCCESS)?;
    l.func_wrap(M, "proc_exit", |_: C<'_>, code: i32| -> Result<()> {
        wasmtime::bail!("the guest called proc_exit({code})")
    })?;
    Ok(())
}

fn zero_sizes(mut c: C<'_>, count_ptr: i32, size_ptr: i32) -> i32 {
    match write_u32(&mut c, count_ptr, 0).and_then(|()| write_u32(&mut c, size_ptr, 0)) {
        Ok(()) => ERRNO_SUCCESS,
        Err(_) => ERRNO_FAULT,
    }
}

fn fd_write(mut c: C<'_>, fd: i32, iovs: i32, iovs_len: i32, nwritten_ptr: i32) -> i32 {
    if fd != 1 && fd != 2 {
        return ERRNO_BADF;
    }
    let Ok(table) = read(&c, iovs, iovs_len.saturating_mul(8)) else {
        return ERRNO_FAULT;
    };
    let mut out = Vec::new();
    for iov in table.chunks_exact(8) {
        let ptr = i32::from_le_bytes([iov[0], iov[1], iov[2], iov[3]]);
        let len = i32::from_le_bytes([iov[4], iov[5], iov[6], iov[7]]);
        match read(&c, ptr, len) {
            Ok(b) => out.extend_from_slice(&b),
            Err(_) => return ERRNO_FAULT,
        }
    }
    let n = out.len() as u32;
    let st = c.data_mut();
    let (level, line) = if fd == 1 {
        (2, &mut st.stdout_line)
    } else {
        (4, &mut st.stderr_line)
    };
    line.extend_from_slice(&out);
    let mut done = Vec::new();
    while let Some(i) = line.iter().position(|b| *b == b'\n') {
        let rest = line.split_off(i + 1);
        let full = std::mem::replace(line, rest);
        done.push(String::from_utf8_lossy(&full[..i]).into_owned());
    }
    st.logs
        .extend(done.into_iter().map(|message| LogEntry { level, message }));
    match write_u32(&mut c, nwritten_ptr, n) {
        Ok(()) => ERRNO_SUCCESS,
        Err(_) => ERRNO_FAULT,
    }
}

fn random_get(mut c: C<'_>, buf: i32, len: i32) -> i32 {
    let st = c.data_mut();
    let mut bytes = Vec::with_capacity(len as u32 as usize);
    while bytes.len() < len as u32 as usize {
        // xorshift64*: reproducible across runs, which is all a test host needs.
        st.rng ^= st.rng >> 12;
        st.rng ^= st.rng << 25;
        st.rng ^= st.rng >> 27;
        bytes.extend_from_slice(&st.rng.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    bytes.truncate(len as u32 as usize);
    match write(&mut c, buf, &bytes) {
        Ok(()) => ERRNO_SUCCESS,
        Err(_) => ERRNO_FAULT,
    }
}

fn clock_time_get(mut c: C<'_>, clock: i32, _precision: i64, ptr: i32) -> i32 {
    // Realtime and monotonic both follow the host's scripted time.
    if !(0..=3).contains(&clock) {
        return ERRNO_INVAL;
    }
    let now = c.data().time_nanos;
    match write(&mut c, ptr, &now.to_le_bytes()) {
        Ok(()) => ERRNO_SUCCESS,
        Err(_) => ERRNO_FAULT,
    }
}
