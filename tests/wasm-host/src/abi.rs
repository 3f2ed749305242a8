//! The proxy-wasm ABI 0.2.1 host functions (module `env`), with Envoy's semantics where the
//! filter could tell the difference: statuses (NotFound for a missing header, BadArgument for a
//! header map that is gone), buffer ranges, tokens, CAS, metric kinds. Calls Ferry has no use for
//! (gRPC) trap loudly instead of pretending.

use wasmtime::{Caller, Linker, Result};

use crate::memory::{self, deserialize_pairs, give, read, read_string, serialize_pairs, write_u32};
use crate::state::{
    status, DispatchedCall, HeaderMap, LocalReply, LogEntry, Metric, MetricKind, State,
};

/// Returns the ABI status of a failed step from the enclosing hostcall.
macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(s) => return Ok(s),
        }
    };
}

type C<'a> = Caller<'a, State>;

const REQUEST_HEADERS: i32 = 0;
const REQUEST_TRAILERS: i32 = 1;
const RESPONSE_HEADERS: i32 = 2;
const RESPONSE_TRAILERS: i32 = 3;
const CALL_RESPONSE_HEADERS: i32 = 6;
const CALL_RESPONSE_TRAILERS: i32 = 7;

const BUFFER_REQUEST_BODY: i32 = 0;
const BUFFER_RESPONSE_BODY: i32 = 1;
const BUFFER_CALL_RESPONSE_BODY: i32 = 4;
const BUFFER_VM_CONFIGURATION: i32 = 6;
const BUFFER_PLUGIN_CONFIGURATION: i32 = 7;

const STREAM_REQUEST: i32 = 0;
const STREAM_RESPONSE: i32 = 1;

/// Every `env` function the proxy-wasm Rust SDK 0.2.5 can import.
pub fn add_to_linker(l: &mut Linker<State>) -> Result<()> {
    l.func_wrap("env", "proxy_log", log)?;
    l.func_wrap("env", "proxy_get_log_level", get_log_level)?;
    l.func_wrap("env", "proxy_get_current_time_nanoseconds", current_time)?;
    l.func_wrap("env", "proxy_set_tick_period_milliseconds", set_tick_period)?;
    l.func_wrap("env", "proxy_get_buffer_bytes", get_buffer_bytes)?;
    l.func_wrap("env", "proxy_set_buffer_bytes", set_buffer_bytes)?;
    l.func_wrap("env", "proxy_get_header_map_pairs", get_header_map_pairs)?;
    l.func_wrap("env", "proxy_set_header_map_pairs", set_header_map_pairs)?;
    l.func_wrap("env", "proxy_get_header_map_value", get_header_map_value)?;
    l.func_wrap("env", "proxy_add_header_map_value", add_header_map_value)?;
    l.func_wrap(
        "env",
        "proxy_replace_header_map_value",
        replace_header_map_value,
    )?;
    l.func_wrap(
        "env",
        "proxy_remove_header_map_value",
        remove_header_map_value,
    )?;
    l.func_wrap("env", "proxy_get_property", get_property)?;
    l.func_wrap("env", "proxy_set_property", set_property)?;
    l.func_wrap("env", "proxy_get_shared_data", get_shared_data)?;
    l.func_wrap("env", "proxy_set_shared_data", set_shared_data)?;
    l.func_wrap("env", "proxy_register_shared_queue", register_shared_queue)?;
    l.func_wrap("env", "proxy_resolve_shared_queue", resolve_shared_queue)?;
    l.func_wrap("env", "proxy_enqueue_shared_queue", enqueue_shared_queue)?;
    l.func_wrap("env", "proxy_dequeue_shared_queue", dequeue_shared_queue)?;
    l.func_wrap("env", "proxy_continue_stream", continue_stream)?;
    l.func_wrap("env", "proxy_close_stream", close_stream)?;
    l.func_wrap(
        "env",
        "proxy_send_local_response",
        |c: C<'_>, code, dptr, dlen, bptr, blen, hptr, hlen, grpc_status| {
            let (details, body) = (Span(dptr, dlen), Span(bptr, blen));
            send_local_response(c, code, details, body, Span(hptr, hlen), grpc_status)
        },
    )?;
    l.func_wrap(
        "env",
        "proxy_http_call",
        |c: C<'_>, uptr, ulen, hptr, hlen, bptr, blen, tptr, tlen, timeout_ms, token_ptr| {
            let call = HttpCall {
                upstream: Span(uptr, ulen),
                headers: Span(hptr, hlen),
                body: Span(bptr, blen),
                trailers: Span(tptr, tlen),
                timeout_ms,
            };
            http_call(c, call, token_ptr)
        },
    )?;
    l.func_wrap("env", "proxy_set_effective_context", set_effective_context)?;
    l.func_wrap("env", "proxy_done", |_: C<'_>| status::OK)?;
    l.func_wrap("env", "proxy_get_status", get_status)?;
    l.func_wrap("env", "proxy_call_foreign_function", call_foreign_function)?;
    l.func_wrap("env", "proxy_define_metric", define_metric)?;
    l.func_wrap("env", "proxy_increment_metric", increment_metric)?;
    l.func_wrap("env", "proxy_record_metric", record_metric)?;
    l.func_wrap("env", "proxy_get_metric", get_metric)?;
    // gRPC: Ferry reaches its reader over HTTP. A call means the filter changed: trap loudly.
    l.func_wrap(
        "env",
        "proxy_grpc_call",
        |_: C<'_>,
         _: i32,
         _: i32,
         _: i32,
         _: i32,
         _: i32,
         _: i32,
         _: i32,
         _: i32,
         _: i32,
         _: i32,
         _: i32,
         _: i32|
         -> Result<i32> { unsupported("proxy_grpc_call") },
    )?;
    l.func_wrap(
        "env",
        "proxy_grpc_stream",
        |_: C<'_>,
         _: i32,
         _: i32,
         _: i32,
         _: i32,
         _: i32,
         _: i32,
         _: i32,
         _: i32,
         _: i32|
         -> Result<i32> { unsupported("proxy_grpc_stream") },
    )?;
    l.func_wrap(
        "env",
        "proxy_grpc_send",
        |_: C<'_>, _: i32, _: i32, _: i32, _: i32| -> Result<i32> {
            unsupported("proxy_grpc_send")
        },
    )?;
    l.func_wrap(
        "env",
        "proxy_grpc_cancel",
        |_: C<'_>, _: i32| -> Result<i32> { unsupported("proxy_grpc_cancel") },
    )?;
    l.func_wrap(
        "env",
        "proxy_grpc_close",
        |_: C<'_>, _: i32| -> Result<i32> { unsupported("proxy_grpc_close") },
    )?;
    Ok(())
}

fn unsupported(name: &str) -> Result<i32> {
    wasmtime::bail!("the guest called {name}, which this test host does not implement")
}

fn log(c: C<'_>, level: i32, ptr: i32, len: i32) -> Result<i32> {
    let message = String::from_utf8_lossy(&tri!(read(&c, ptr, len))).into_owned();
    let mut c = c;
    c.data_mut().logs.push(LogEntry {
        level: level as u32,
        message,
    });
    Ok(status::OK)
}

fn get_log_level(mut c: C<'_>, ptr: i32) -> Result<i32> {
    let level = c.data().log_level;
    tri!(write_u32(&mut c, ptr, level));
    Ok(status::OK)
}

fn current_time(mut c: C<'_>, ptr: i32) -> Result<i32> {
    let now = c.data().time_nanos;
    tri!(memory::write(&mut c, ptr, &now.to_le_bytes()));
    Ok(status::OK)
}

fn set_tick_period(mut c: C<'_>, ms: i32) -> Result<i32> {
    c.data_mut().tick_period_ms = ms as u32;
    Ok(status::OK)
}

// ---- buffers ----

/// The bytes the guest sees as buffer `t` in the current context.
fn buffer(st: &State, t: i32) -> Result<&[u8], i32> {
    let stream = st.streams.get(&st.current);
    match t {
        BUFFER_REQUEST_BODY | BUFFER_RESPONSE_BODY => {
            let Some(s) = stream else {
                return Err(status::NOT_FOUND);
            };
            let d = if t == BUFFER_REQUEST_BODY {
                &s.request
            } else {
                &s.response
            };
            Ok(&d.body[d.buffered_from..])
        }
        BUFFER_CALL_RESPONSE_BODY => st
            .call_response
            .as_ref()
            .map(|r| r.body.as_slice())
            .ok_or(status::NOT_FOUND),
        BUFFER_VM_CONFIGURATION => Ok(&st.vm_configuration),
        BUFFER_PLUGIN_CONFIGURATION => Ok(&st.plugin_configuration),
        2 | 3 | 5 | 8 => Err(status::NOT_FOUND),
        _ => Err(status::BAD_ARGUMENT),
    }
}

fn get_buffer_bytes(
    mut c: C<'_>,
    t: i32,
    start: i32,
    max: i32,
    ptr_ptr: i32,
    size_ptr: i32,
) -> Result<i32> {
    let (start, max) = (start as u32 as usize, max as u32 as usize);
    let data = {
        let st = c.data();
        let b = tri!(buffer(st, t));
        if start > b.len() {
            return Ok(c
                .data_mut()
                .abi_error("proxy_get_buffer_bytes", "start past the end"));
        }
        let end = start + max.min(b.len() - start);
        b[start..end].to_vec()
    };
    // Envoy copies nothing for an empty range and leaves the return pointers alone.
    if data.is_empty() {
        return Ok(status::OK);
    }
    give(&mut c, &data, ptr_ptr, size_ptr)
}

fn set_buffer_bytes(
    mut c: C<'_>,
    t: i32,
    start: i32,
    size: i32,
    ptr: i32,
    len: i32,
) -> Result<i32> {
    let data = tri!(read(&c, ptr, len));
    let (start, size) = (start as u32 as usize, size as u32 as usize);
    let st = c.data_mut();
    let current = st.current;
    let Some(s) = st.streams.get_mut(&current) else {
        return Ok(st.abi_error("proxy_set_buffer_bytes", "not an HTTP stream context"));
    };
    let d = match t {
        BUFFER_REQUEST_BODY => &mut s.request,
        BUFFER_RESPONSE_BODY => &mut s.response,
        _ => {
            return Ok(st.abi_error(
                "proxy_set_buffer_bytes",
                format!("buffer type {t} cannot be written"),
            ))
        }
    };
    let window = d.body.len() - d.buffered_from;
    // Envoy's Buffer::copyFrom: start 0 replaces the first `size` bytes, start at or past the
    // end appends; anything else is refused.
    if start == 0 {
        let from = d.buffered_from;
        d.body.splice(from..from + size.min(window), data);
        Ok(status::OK)
    } else if start >= window {
        d.body.extend_from_slice(&data);
        Ok(status::OK)
    } else {
        Ok(st.abi_error(
            "proxy_set_buffer_bytes",
            format!("start {start} inside a {window}-byte buffer (Envoy only replaces from 0 or appends)"),
        ))
    }
}

// ---- header maps ----

/// Header map `t` of the current context, if the guest may use it now.
fn header_map<'a>(st: &'a mut State, call: &str, t: i32) -> Result<&'a mut HeaderMap, i32> {
    let current = st.current;
    let why = match t {
        REQUEST_HEADERS..=RESPONSE_TRAILERS => match st.streams.get(&current) {
            None => Some("not an HTTP stream context".to_string()),
            Some(s) => {
                let d = if t < RESPONSE_HEADERS {
                    &s.request
                } else {
                    &s.response
                };
                let headers = t == REQUEST_HEADERS || t == RESPONSE_HEADERS;
                (headers && !d.headers_open).then(|| {
                    "the headers were already forwarded (Envoy no longer has them: \
                     return Pause from the headers callback to change them later)"
                        .to_string()
                })
            }
        },
        CALL_RESPONSE_HEADERS | CALL_RESPONSE_TRAILERS => st
            .call_response
            .is_none()
            .then(|| "no dispatched call's response is being delivered".to_string()),
        4 | 5 => Some("gRPC metadata is not supported by this host".into()),
        _ => Some(format!("unknown map type {t}")),
    };
    if let Some(why) = why {
        return Err(st.abi_error(call, why));
    }
    let map = match t {
        CALL_RESPONSE_HEADERS | CALL_RESPONSE_TRAILERS => {
            let r = st.call_response.as_mut().ok_or(status::BAD_ARGUMENT)?;
            if t == CALL_RESPONSE_HEADERS {
                &mut r.headers
            } else {
                &mut r.trailers
            }
        }
        _ => {
            let s = st.streams.get_mut(&current).ok_or(status::BAD_ARGUMENT)?;
            match t {
                REQUEST_HEADERS => &mut s.request.headers,
                REQUEST_TRAILERS => &mut s.request.trailers,
                RESPONSE_HEADERS => &mut s.response.headers,
                _ => &mut s.response.trailers,
            }
        }
    };
    Ok(map)
}

fn key(c: &C<'_>, ptr: i32, len: i32) -> Result<String, i32> {
    Ok(read_string(c, ptr, len)?.to_ascii_lowercase())
}

fn get_header_map_pairs(mut c: C<'_>, t: i32, ptr_ptr: i32, size_ptr: i32) -> Result<i32> {
    let bytes = serialize_pairs(tri!(header_map(
        c.data_mut(),
        "proxy_get_header_map_pairs",
        t
    )));
    give(&mut c, &bytes, ptr_ptr, size_ptr)
}

fn set_header_map_pairs(mut c: C<'_>, t: i32, ptr: i32, len: i32) -> Result<i32> {
    let Some(pairs) = deserialize_pairs(&tri!(read(&c, ptr, len))) else {
        return Ok(c
            .data_mut()
            .abi_error("proxy_set_header_map_pairs", "malformed map"));
    };
    let map = tri!(header_map(c.data_mut(), "proxy_set_header_map_pairs", t));
    *map = pairs
        .into_iter()
        .map(|(k, v)| (String::from_utf8_lossy(&k).to_ascii_lowercase(), v))
        .collect();
    Ok(status::OK)
}

fn get_header_map_value(
    mut c: C<'_>,
    t: i32,
    kptr: i32,
    klen: i32,
    ptr_ptr: i32,
    size_ptr: i32,
) -> Result<i32> {
    let k = tri!(key(&c, kptr, klen));
    let map = tri!(header_map(c.data_mut(), "proxy_get_header_map_value", t));
    let Some(v) = map.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()) else {
        return Ok(status::NOT_FOUND);
    };
    give(&mut c, &v, ptr_ptr, size_ptr)
}

fn add_header_map_value(
    mut c: C<'_>,
    t: i32,
    kptr: i32,
    klen: i32,
    vptr: i32,
    vlen: i32,
) -> Result<i32> {
    let k = tri!(key(&c, kptr, klen));
    let v = tri!(read(&c, vptr, vlen));
    tri!(header_map(c.data_mut(), "proxy_add_header_map_value", t)).push((k, v));
    Ok(status::OK)
}

fn replace_header_map_value(
    mut c: C<'_>,
    t: i32,
    kptr: i32,
    klen: i32,
    vptr: i32,
    vlen: i32,
) -> Result<i32> {
    let k = tri!(key(&c, kptr, klen));
    let v = tri!(read(&c, vptr, vlen));
    let map = tri!(header_map(
        c.data_mut(),
        "proxy_replace_header_map_value",
        t
    ));
    // Envoy's setCopy: the first entry keeps its place, later duplicates go.
    match map.iter().position(|(n, _)| *n == k) {
        Some(i) => {
            map[i].1 = v;
            let mut seen = 0;
            map.retain(|(n, _)| {
                if *n == k {
                    seen += 1;
                    seen == 1
                } else {
                    true
                }
            });
        }
        None => map.push((k, v)),
    }
    Ok(status::OK)
}

fn remove_header_map_value(mut c: C<'_>, t: i32, kptr: i32, klen: i32) -> Result<i32> {
    let k = tri!(key(&c, kptr, klen));
    tri!(header_map(c.data_mut(), "proxy_remove_header_map_value", t)).retain(|(n, _)| *n != k);
    Ok(status::OK)
}

// ---- properties, shared data, queues ----

fn get_property(mut c: C<'_>, ptr: i32, len: i32, ptr_ptr: i32, size_ptr: i32) -> Result<i32> {
    let path = tri!(read(&c, ptr, len));
    let Some(v) = c.data().properties.get(&path).cloned() else {
        return Ok(status::NOT_FOUND);
    };
    give(&mut c, &v, ptr_ptr, size_ptr)
}

fn set_property(mut c: C<'_>, ptr: i32, len: i32, vptr: i32, vlen: i32) -> Result<i32> {
    let path = tri!(read(&c, ptr, len));
    let v = tri!(read(&c, vptr, vlen));
    c.data_mut().properties.insert(path, v);
    Ok(status::OK)
}

fn get_shared_data(
    mut c: C<'_>,
    kptr: i32,
    klen: i32,
    ptr_ptr: i32,
    size_ptr: i32,
    cas_ptr: i32,
) -> Result<i32> {
    let k = tri!(read_string(&c, kptr, klen));
    let Some((v, cas)) = c.data().shared.get(&k).cloned() else {
        return Ok(status::NOT_FOUND);
    };
    let s = give(&mut c, &v, ptr_ptr, size_ptr)?;
    if s != status::OK {
        return Ok(s);
    }
    tri!(write_u32(&mut c, cas_ptr, cas));
    Ok(status::OK)
}

fn set_shared_data(
    mut c: C<'_>,
    kptr: i32,
    klen: i32,
    vptr: i32,
    vlen: i32,
    cas: i32,
) -> Result<i32> {
    let k = tri!(read_string(&c, kptr, klen));
    let v = tri!(read(&c, vptr, vlen));
    let st = c.data_mut();
    // As in the C++ host: a non-zero cas must match the stored one; an absent key is just set.
    if let Some((_, current)) = st.shared.get(&k) {
        if cas != 0 && cas as u32 != *current {
            return Ok(status::CAS_MISMATCH);
        }
    }
    st.next_cas = st.next_cas.wrapping_add(1).max(1);
    let next = st.next_cas;
    st.shared.insert(k, (v, next));
    Ok(status::OK)
}

/// This VM's id for queue names (Envoy's `vm_id`); the host uses the empty id.
const VM_ID: &str = "";

fn register_shared_queue(mut c: C<'_>, ptr: i32, len: i32, id_ptr: i32) -> Result<i32> {
    let name = tri!(read_string(&c, ptr, len));
    let st = c.data_mut();
    let next = st.queue_ids.len() as u32 + 1;
    let id = *st
        .queue_ids
        .entry((VM_ID.to_string(), name))
        .or_insert(next);
    st.queues.entry(id).or_default();
    tri!(write_u32(&mut c, id_ptr, id));
    Ok(status::OK)
}

fn resolve_shared_queue(
    mut c: C<'_>,
    vptr: i32,
    vlen: i32,
    nptr: i32,
    nlen: i32,
    id_ptr: i32,
) -> Result<i32> {
    let vm = tri!(read_string(&c, vptr, vlen));
    let name = tri!(read_string(&c, nptr, nlen));
    let Some(id) = c.data().queue_ids.get(&(vm, name)).copied() else {
        return Ok(status::NOT_FOUND);
    };
    tri!(write_u32(&mut c, id_ptr, id));
    Ok(status::OK)
}

fn enqueue_shared_queue(mut c: C<'_>, id: i32, ptr: i32, len: i32) -> Result<i32> {
    let v = tri!(read(&c, ptr, len));
    match c.data_mut().queues.get_mut(&(id as u32)) {
        Some(q) => {
            q.push_back(v);
            Ok(status::OK)
        }
        None => Ok(status::NOT_FOUND),
    }
}

fn dequeue_shared_queue(mut c: C<'_>, id: i32, ptr_ptr: i32, size_ptr: i32) -> Result<i32> {
    let item = match c.data_mut().queues.get_mut(&(id as u32)) {
        None => return Ok(status::NOT_FOUND),
        Some(q) => q.pop_front(),
    };
    match item {
        None => Ok(status::EMPTY),
        Some(v) => give(&mut c, &v, ptr_ptr, size_ptr),
    }
}

// ---- stream control ----

fn continue_stream(mut c: C<'_>, t: i32) -> Result<i32> {
    let st = c.data_mut();
    let current = st.current;
    let Some(s) = st.streams.get_mut(&current) else {
        return Ok(st.abi_error("proxy_continue_stream", "not an HTTP stream context"));
    };
    let d = match t {
        STREAM_REQUEST => &mut s.request,
        STREAM_RESPONSE => &mut s.response,
        _ => {
            return Ok(st.abi_error(
                "proxy_continue_stream",
                format!("stream type {t} is not HTTP"),
            ))
        }
    };
    let was_paused = d.paused;
    d.resumed += 1;
    d.forward();
    if !was_paused {
        st.abi_error("proxy_continue_stream", "the stream was not paused");
    }
    Ok(status::OK)
}

fn close_stream(mut c: C<'_>, _t: i32) -> Result<i32> {
    let st = c.data_mut();
    let current = st.current;
    match st.streams.get_mut(&current) {
        Some(s) => {
            s.closed = true;
            s.finished = true;
            Ok(status::OK)
        }
        None => Ok(st.abi_error("proxy_close_stream", "not an HTTP stream context")),
    }
}

fn lossy_pairs(pairs: Vec<(Vec<u8>, Vec<u8>)>) -> Vec<(String, String)> {
    pairs
        .into_iter()
        .map(|(k, v)| {
            (
                String::from_utf8_lossy(&k).into_owned(),
                String::from_utf8_lossy(&v).into_owned(),
            )
        })
        .collect()
}

/// A range of guest memory as the ABI passes it: pointer, length.
#[derive(Clone, Copy)]
struct Span(i32, i32);

impl Span {
    fn read(self, c: &C<'_>) -> Result<Vec<u8>, i32> {
        read(c, self.0, self.1)
    }
}

fn send_local_response(
    mut c: C<'_>,
    code: i32,
    details: Span,
    body: Span,
    headers: Span,
    grpc_status: i32,
) -> Result<i32> {
    let details = String::from_utf8_lossy(&tri!(details.read(&c))).into_owned();
    let body = tri!(body.read(&c));
    let Some(headers) = deserialize_pairs(&tri!(headers.read(&c))) else {
        return Ok(c
            .data_mut()
            .abi_error("proxy_send_local_response", "malformed header map"));
    };
    let st = c.data_mut();
    let current = st.current;
    let Some(s) = st.streams.get_mut(&current) else {
        return Ok(st.abi_error("proxy_send_local_response", "not an HTTP stream context"));
    };
    s.local_replies.push(LocalReply {
        status: code as u32,
        details,
        headers: lossy_pairs(headers),
        body,
        grpc_status,
    });
    s.finished = true;
    if s.local_replies.len() > 1 {
        st.abi_error(
            "proxy_send_local_response",
            "a second local reply on one stream",
        );
    }
    Ok(status::OK)
}

/// `proxy_http_call`'s request: where the upstream name, headers, body and trailers are in
/// guest memory, and the timeout.
struct HttpCall {
    upstream: Span,
    headers: Span,
    body: Span,
    trailers: Span,
    timeout_ms: i32,
}

fn http_call(mut c: C<'_>, call: HttpCall, token_ptr: i32) -> Result<i32> {
    let HttpCall {
        upstream,
        headers,
        body,
        trailers,
        timeout_ms,
    } = call;
    let cluster = tri!(read_string(&c, upstream.0, upstream.1));
    let headers = deserialize_pairs(&tri!(headers.read(&c)));
    let body = tri!(body.read(&c));
    let trailers = deserialize_pairs(&tri!(trailers.read(&c)));
    let st = c.data_mut();
    let (Some(headers), Some(trailers)) = (headers, trailers) else {
        return Ok(st.abi_error("proxy_http_call", "malformed header map"));
    };
    let headers = lossy_pairs(headers);
    // Envoy refuses a call without these (its AsyncClient needs them).
    for required in [":method", ":path", ":authority"] {
        if !headers.iter().any(|(n, _)| n == required) {
            return Ok(st.abi_error("proxy_http_call", format!("no {required} header")));
        }
    }
    if let Some(known) = &st.clusters {
        if !known.contains(&cluster) {
            // A legitimate refusal (Envoy: unknown cluster), not an ABI misuse.
            return Ok(status::BAD_ARGUMENT);
        }
    }
    st.next_token += 1;
    let token = st.next_token;
    st.calls.push(DispatchedCall {
        token,
        context_id: st.current,
        cluster,
        headers,
        body,
        trailers: lossy_pairs(trailers),
        timeout_ms: timeout_ms as u32,
    });
    st.pending_calls.push(token);
    tri!(write_u32(&mut c, token_ptr, token));
    Ok(status::OK)
}

fn set_effective_context(mut c: C<'_>, id: i32) -> Result<i32> {
    let st = c.data_mut();
    let id = id as u32;
    if id == st.root_id || st.streams.contains_key(&id) {
        st.current = id;
        Ok(status::OK)
    } else {
        Ok(st.abi_error("proxy_set_effective_context", format!("no context {id}")))
    }
}

fn get_status(mut c: C<'_>, code_ptr: i32, ptr_ptr: i32, size_ptr: i32) -> Result<i32> {
    tri!(write_u32(&mut c, code_ptr, 0));
    give(&mut c, &[], ptr_ptr, size_ptr)
}

fn call_foreign_function(
    _c: C<'_>,
    _nptr: i32,
    _nlen: i32,
    _aptr: i32,
    _alen: i32,
    _rptr: i32,
    _rsize: i32,
) -> Result<i32> {
    // Envoy answers NotFound for a function it does not register.
    Ok(status::NOT_FOUND)
}

// ---- metrics ----

fn metric_kind(id: u32) -> MetricKind {
    match id & 3 {
        0 => MetricKind::Counter,
        1 => MetricKind::Gauge,
        _ => MetricKind::Histogram,
    }
}

fn define_metric(mut c: C<'_>, t: i32, ptr: i32, len: i32, id_ptr: i32) -> Result<i32> {
    let name = tri!(read_string(&c, ptr, len));
    let kind = match t {
        0 => MetricKind::Counter,
        1 => MetricKind::Gauge,
        2 => MetricKind::Histogram,
        _ => {
            return Ok(c
                .data_mut()
                .abi_error("proxy_define_metric", format!("metric type {t}")))
        }
    };
    let st = c.data_mut();
    // Defining the same metric again returns its id, as Envoy does.
    let existing = st
        .metrics
        .iter()
        .find(|(_, m)| m.name == name && m.kind == kind)
        .map(|(id, _)| *id);
    let id = match existing {
        Some(id) => id,
        None => {
            st.next_metric += 1;
            let id = (st.next_metric << 2) | t as u32;
            st.metrics.insert(
                id,
                Metric {
                    name,
                    kind,
                    value: 0,
                    recorded: Vec::new(),
                },
            );
            id
        }
    };
    tri!(write_u32(&mut c, id_ptr, id));
    Ok(status::OK)
}

fn increment_metric(mut c: C<'_>, id: i32, offset: i64) -> Result<i32> {
    let st = c.data_mut();
    let Some(m) = st.metrics.get_mut(&(id as u32)) else {
        return Ok(status::NOT_FOUND);
    };
    match metric_kind(id as u32) {
        MetricKind::Counter if offset > 0 => m.value = m.value.saturating_add(offset),
        MetricKind::Gauge => m.value = m.value.saturating_add(offset),
        kind => {
            let why = format!("increment {offset} on {kind:?} '{}'", m.name);
            return Ok(st.abi_error("proxy_increment_metric", why));
        }
    }
    Ok(status::OK)
}

fn record_metric(mut c: C<'_>, id: i32, value: i64) -> Result<i32> {
    let Some(m) = c.data_mut().metrics.get_mut(&(id as u32)) else {
        return Ok(status::NOT_FOUND);
    };
    let v = value as u64;
    match m.kind {
        MetricKind::Counter => m.value = m.value.saturating_add(v as i64),
        MetricKind::Gauge => m.value = v as i64,
        MetricKind::Histogram => {
            m.value = m.value.saturating_add(v as i64);
            m.recorded.push(v);
        }
    }
    Ok(status::OK)
}

fn get_metric(mut c: C<'_>, id: i32, ptr: i32) -> Result<i32> {
    let st = c.data_mut();
    let Some(m) = st.metrics.get(&(id as u32)) else {
        return Ok(status::NOT_FOUND);
    };
    if m.kind == MetricKind::Histogram {
        let why = format!("histogram '{}' has no single value", m.name);
        return Ok(st.abi_error("proxy_get_metric", why));
    }
    let v = m.value as u64;
    tri!(memory::write(&mut c, ptr, &v.to_le_bytes()));
    Ok(status::OK)
}
