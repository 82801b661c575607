//! Which stream holds each shared allocator: a stream claims its allocator when it
//! submits work with it and lets go when it synchronizes. Another stream that tries to
//! execute with a claimed allocator is refused, naming the holder.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, OnceLock};

use super::StreamError;

/// Allocator key → (stream id, stream name).
type Holders = HashMap<usize, (u64, String)>;

fn holders() -> MutexGuard<'static, Holders> {
    static HOLDERS: OnceLock<Mutex<Holders>> = OnceLock::new();
    HOLDERS
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        // The map stays consistent even if a holder panicked mid-update: every update
        // is one insert or remove.
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Claims allocator `key` for stream `stream`; claiming again from the same stream is
/// fine.
///
/// # Errors
/// [`StreamError::AllocatorBusy`] naming the other stream that holds it.
pub(crate) fn claim(key: usize, stream: u64, name: &str) -> Result<(), StreamError> {
    let mut map = holders();
    match map.get(&key) {
        Some((holder, holder_name)) if *holder != stream => Err(StreamError::AllocatorBusy {
            stream: *holder,
            name: holder_name.clone(),
        }),
        Some(_) => Ok(()),
        None => {
            map.insert(key, (stream, name.to_string()));
            Ok(())
        }
    }
}

/// Lets go of allocator `key` if stream `stream` holds it.
pub(crate) fn release(key: usize, stream: u64) {
    let mut map = holders();
    if map.get(&key).is_some_and(|(holder, _)| *holder == stream) {
        map.remove(&key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Keys that no real allocator has (real keys are addresses of live `Arc`s, which
    // are never this small and odd).
    const KEY: usize = 1;
    const OTHER: usize = 3;

    #[test]
    fn a_claimed_allocator_refuses_another_stream_until_released() {
        claim(KEY, 100, "a").expect("free allocator");
        claim(KEY, 100, "a").expect("the holder may claim again");
        assert_eq!(
            claim(KEY, 200, "b"),
            Err(StreamError::AllocatorBusy {
                stream: 100,
                name: "a".into()
            })
        );
        release(KEY, 200);
        assert!(claim(KEY, 200, "b").is_err(), "only the holder releases");
        release(KEY, 100);
        claim(KEY, 200, "b").expect("released");
        release(KEY, 200);
    }

    #[test]
    fn different_allocators_are_claimed_independently() {
        claim(OTHER, 300, "c").expect("claim");
        claim(OTHER + 2, 400, "d").expect("another allocator");
        release(OTHER, 300);
        release(OTHER + 2, 400);
    }
}
