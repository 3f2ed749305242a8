//! Recording a request in the reader's metrics allocates nothing once its label set has been
//! seen: the labels are `&'static str` and enums, never `String`s built per request. Checked
//! with a counting allocator (its own test binary, so it counts only this file's tests; the
//! count is per thread, so other threads cannot disturb it).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Duration;

use ferry_reader::metrics::{Metrics, RedisErrorKind, Route};
use hyper::StatusCode;

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded to the system allocator unchanged; the counter is a
// const-initialized thread-local `Cell`, which needs no allocation itself.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|a| a.set(a.get() + 1));
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|a| a.set(a.get() + 1));
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

fn record_all(m: &Metrics) {
    m.request(Route::Vectors, StatusCode::OK, Duration::from_micros(300));
    m.request(
        Route::Vectors,
        StatusCode::GATEWAY_TIMEOUT,
        Duration::from_millis(60),
    );
    m.request(Route::Other, StatusCode::IM_A_TEAPOT, Duration::ZERO);
    m.keys(8, 5);
    m.redis_error(RedisErrorKind::Timeout);
}

#[test]
fn recording_a_seen_label_set_does_not_allocate() {
    let m = Metrics::default();
    // The first time a label set is seen, the family stores it: that may allocate.
    record_all(&m);
    let before = allocations();
    for _ in 0..1000 {
        record_all(&m);
    }
    assert_eq!(allocations() - before, 0, "allocations while recording");
    // The counting is live: rendering allocates (its String, at least).
    let text = m.render(true);
    assert!(allocations() > before);
    assert!(text.contains("ferry_reader_requests_total{route=\"vectors\",status=\"504\"} 1001\n"));
}
