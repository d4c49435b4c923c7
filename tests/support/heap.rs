//! Live heap bytes allocated by the current thread, to weigh what one cached object
//! holds (issue 10). Other threads' allocations are not counted, so a runtime working
//! beside a measurement does not blur it. Include with `#[path]`; the including binary
//! gets this counting allocator as its global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

pub struct Counting;

#[global_allocator]
static ALLOCATOR: Counting = Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

fn add(delta: isize) {
    // `try_with`: no count while the thread is being torn down.
    let _ = LIVE.try_with(|live| live.set(live.get() + delta));
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        add(layout.size() as isize);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        add(-(layout.size() as isize));
        System.dealloc(ptr, layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        add(layout.size() as isize);
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        add(new_size as isize - layout.size() as isize);
        System.realloc(ptr, layout, new_size)
    }
}

/// Heap bytes `make` leaves allocated on this thread, with what it made.
pub fn kept_by<T>(make: impl FnOnce() -> T) -> (T, usize) {
    let before = LIVE.with(Cell::get);
    let made = make();
    let after = LIVE.with(Cell::get);
    (made, (after - before).max(0) as usize)
}
