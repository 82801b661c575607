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

/// A claim taken by [`claim`]. Dropping it lets the allocator go again when this claim
/// took it (not when the stream already held it), unless [`Claim::keep`] was called:
/// an execution that fails, or unwinds out of a panicking user callback, never leaves
/// its allocator claimed.
#[derive(Debug)]
#[must_use = "dropping a claim lets the allocator go"]
pub(crate) struct Claim {
    key: usize,
    stream: u64,
    /// Whether dropping the claim releases the allocator.
    armed: bool,
}

impl Claim {
    /// Keeps the allocator claimed after this guard is gone (work was submitted with
    /// it; [`release`] lets it go at synchronization).
    pub(crate) fn keep(mut self) {
        self.armed = false;
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if self.armed {
            release(self.key, self.stream);
        }
    }
}

/// Claims allocator `key` for stream `stream`; claiming again from the same stream is
/// fine (and its guard then releases nothing: the earlier claim still holds).
///
/// # Errors
/// [`StreamError::AllocatorBusy`] naming the other stream that holds it.
pub(crate) fn claim(key: usize, stream: u64, name: &str) -> Result<Claim, StreamError> {
    let mut map = holders();
    match map.get(&key) {
        Some((holder, holder_name)) if *holder != stream => Err(StreamError::AllocatorBusy {
            stream: *holder,
            name: holder_name.clone(),
        }),
        Some(_) => Ok(Claim {
            key,
            stream,
            armed: false,
        }),
        None => {
            map.insert(key, (stream, name.to_string()));
            Ok(Claim {
                key,
                stream,
                armed: true,
            })
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
        claim(KEY, 100, "a").expect("free allocator").keep();
        claim(KEY, 100, "a")
            .expect("the holder may claim again")
            .keep();
        assert_eq!(
            claim(KEY, 200, "b").map(Claim::keep),
            Err(StreamError::AllocatorBusy {
                stream: 100,
                name: "a".into()
            })
        );
        release(KEY, 200);
        assert!(claim(KEY, 200, "b").is_err(), "only the holder releases");
        release(KEY, 100);
        claim(KEY, 200, "b").expect("released").keep();
        release(KEY, 200);
    }

    #[test]
    fn different_allocators_are_claimed_independently() {
        claim(OTHER, 300, "c").expect("claim").keep();
        claim(OTHER + 2, 400, "d")
            .expect("another allocator")
            .keep();
        release(OTHER, 300);
        release(OTHER + 2, 400);
    }

    #[test]
    fn a_claim_dropped_without_keep_lets_the_allocator_go_but_not_an_earlier_one() {
        const GUARDED: usize = 9;
        drop(claim(GUARDED, 500, "e").expect("free allocator"));
        claim(GUARDED, 600, "f")
            .expect("the dropped claim let go")
            .keep();
        // A second claim by the holder does not undo the first when it is dropped.
        drop(claim(GUARDED, 600, "f").expect("the holder again"));
        assert!(
            claim(GUARDED, 500, "e").is_err(),
            "the first claim still holds"
        );
        release(GUARDED, 600);
    }

    #[test]
    fn racing_streams_get_a_free_allocator_exactly_once() {
        const RACED: usize = 11;
        let winners: usize = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..8u64)
                .map(|s| scope.spawn(move || claim(RACED, 1000 + s, "racer").map(Claim::keep)))
                .collect();
            handles
                .into_iter()
                .map(|h| usize::from(h.join().is_ok_and(|r| r.is_ok())))
                .sum()
        });
        assert_eq!(winners, 1);
        for s in 0..8u64 {
            release(RACED, 1000 + s);
        }
    }
}
